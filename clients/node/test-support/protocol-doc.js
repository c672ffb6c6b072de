'use strict';
/*
 * protocol-doc.js - reads the error codes out of the protocol's own
 * documentation (protocol/PROTOCOL.md, section "Error codes"), so that the
 * tests check the client's error table against the protocol instead of
 * against a copy of it.
 *
 * Invariants:
 *  - The parse is of Markdown as people write it: the section is found by
 *    its heading at any level (any case, trailing #s allowed) and ends at
 *    the next heading of the same or a higher level; inside it, every table
 *    (a row with a pipe followed by a delimiter row, as GFM has it) with a
 *    column headed "code" is read, wherever that column is (outer pipes
 *    optional, alignment colons, `backticks` around a code, escaped \| in
 *    a cell); fenced code blocks are skipped.
 *  - It fails loudly instead of guessing: no such section, no such table,
 *    a code cell that is not a lower-case identifier, or a code listed
 *    twice is an Error naming the line.
 */

const fs = require('node:fs');

/** The cells of a Markdown table row, trimmed. */
function cells(line) {
  let s = line.trim();
  if (s.startsWith('|')) s = s.slice(1);
  if (s.endsWith('|') && !s.endsWith('\\|')) s = s.slice(0, -1);
  return s.split(/(?<!\\)\|/).map((c) => c.replace(/\\\|/g, '|').trim());
}

function isSeparatorRow(cs) {
  return cs.length > 0 && cs.every((c) => /^:?-+:?$/.test(c));
}

/**
 * The codes of the tables with a "code" column in the section headed
 * `heading`, in document order.
 * @param {string} text     Markdown
 * @param {string} [heading='Error codes']
 * @returns {string[]}
 */
function parseErrorCodes(text, heading = 'Error codes') {
  const lines = text.split(/\r?\n/);
  const want = heading.toLowerCase();
  let start = -1;
  let level = 0;
  for (let i = 0; i < lines.length; i++) {
    const m = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/.exec(lines[i]);
    if (m && m[2].toLowerCase() === want) {
      start = i;
      level = m[1].length;
      break;
    }
  }
  if (start < 0) throw new Error(`no heading "${heading}"`);

  const codes = [];
  let fence = null; // the fence that opened the code block we are in
  let col = null; // in a table: the index of its "code" column (-1: it has none); else null
  for (let i = start + 1; i < lines.length; i++) {
    const line = lines[i];
    const f = /^ {0,3}(`{3,}|~{3,})/.exec(line);
    if (f) {
      if (fence === null) fence = f[1][0];
      else if (f[1][0] === fence) fence = null;
      col = null;
      continue;
    }
    if (fence !== null) continue;
    const h = /^ {0,3}(#{1,6})\s/.exec(line);
    if (h && h[1].length <= level) break;
    if (col === null) {
      // A table starts with a row holding a pipe, followed by the delimiter row.
      if (line.includes('|') && i + 1 < lines.length && isSeparatorRow(cells(lines[i + 1]))) {
        col = cells(line).findIndex((c) => c.replace(/[`*_]/g, '').toLowerCase() === 'code');
        i += 1;
      }
      continue;
    }
    if (line.trim() === '' || !line.includes('|')) {
      col = null; // the table ended
      continue;
    }
    if (col < 0) continue; // a table without a "code" column
    const cs = cells(line);
    const raw = cs[col] === undefined ? '' : cs[col];
    const code = raw.replace(/^`+|`+$/g, '').trim();
    if (!/^[a-z][a-z0-9_]*$/.test(code)) {
      throw new Error(`line ${i + 1}: ${JSON.stringify(raw)} is not an error code`);
    }
    if (codes.includes(code)) throw new Error(`line ${i + 1}: ${code} is listed twice`);
    codes.push(code);
  }
  if (codes.length === 0) throw new Error(`no table with a "code" column under "${heading}"`);
  return codes;
}

/**
 * The error codes a PROTOCOL.md lists, in its order. A test passes the path
 * resolved from its own file: path.join(__dirname, '../../../protocol/PROTOCOL.md').
 */
function readErrorCodes(file) {
  return parseErrorCodes(fs.readFileSync(file, 'utf8'));
}

module.exports = { parseErrorCodes, readErrorCodes };
