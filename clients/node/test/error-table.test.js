'use strict';
/*
 * error-table.test.js - the client's error table against the protocol's
 * documentation, not against a copy of it: every error code that
 * protocol/PROTOCOL.md lists ("Error codes") has a class of its own in
 * lib/errors.js, and every class of the table has its code listed there,
 * in the same order; the README's error table says the same. Also the
 * parser of that Markdown, on a document written to trip it. Needs no
 * broker.
 */

const { describe, it } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const lb = require('..');
const { parseErrorCodes, readErrorCodes } = require('../test-support/protocol-doc');

const PROTOCOL_MD = path.join(__dirname, '../../../protocol/PROTOCOL.md');
const README_MD = path.join(__dirname, '../README.md');

describe('the error table and PROTOCOL.md', () => {
  it('the parser reads tables as Markdown has them, and fails loudly', () => {
    const doc = [
      '# Title',
      '## Contract',
      '| code | meaning |', // a table before the section: not read
      '|---|---|',
      '| before | no |',
      '### Error Codes ###',
      'Some text with a | pipe in it.',
      '',
      '```',
      '| code | meaning |',
      '|---|---|',
      '| in_a_fence | no |',
      '```',
      '',
      'code | meaning',
      ':--- | :---:',
      '`first_code` | starts without a pipe',
      '',
      '| meaning | Code |',
      '|:--|--:|',
      '|  a \\| b  |  second  |',
      '| c | `third_one` |',
      '',
      '| other | table |',
      '|---|---|',
      '| not_a_code_column | x |',
      '',
      '#### A sub-heading stays in the section',
      '| code |',
      '|-|',
      '| fourth |',
      '### Ops',
      '| code | meaning |',
      '|---|---|',
      '| after | no |',
    ].join('\r\n');
    assert.deepEqual(parseErrorCodes(doc), ['first_code', 'second', 'third_one', 'fourth']);
    assert.throws(() => parseErrorCodes('# Nothing here\n'), /no heading/);
    assert.throws(() => parseErrorCodes('## Error codes\ntext\n## Next\n| code |\n|-|\n| x |\n'), /no table/);
    assert.throws(() => parseErrorCodes('## Error codes\n| code |\n|-|\n| Not A Code |\n'), /not an error code/);
    assert.throws(() => parseErrorCodes('## Error codes\n| code |\n|-|\n| twice |\n| twice |\n'), /listed twice/);
  });

  it('every code PROTOCOL.md lists has its own class, and every class its code there, in order', () => {
    const documented = readErrorCodes(PROTOCOL_MD);
    const table = lb.WIRE_CODES.map(([code]) => code);
    const missingClass = documented.filter((c) => !table.includes(c));
    const undocumented = table.filter((c) => !documented.includes(c));
    assert.deepEqual(missingClass, [], `codes of PROTOCOL.md without a class in lib/errors.js: ${missingClass}`);
    assert.deepEqual(undocumented, [], `codes of lib/errors.js that PROTOCOL.md does not list: ${undocumented}`);
    assert.deepEqual(table, documented, "lib/errors.js keeps PROTOCOL.md's order");

    const classes = new Set();
    for (const [code, cls] of lb.WIRE_CODES) {
      assert.equal(typeof cls, 'function', code);
      assert.notEqual(cls, lb.LockbrokerError, `${code} has a class of its own`);
      assert.ok(cls.prototype instanceof lb.LockbrokerError, `${cls.name} is a LockbrokerError`);
      assert.equal(lb[cls.name], cls, `${cls.name} is exported by index.js`);
      assert.equal(cls.prototype.code, code);
      assert.ok(!classes.has(cls), `${cls.name} serves one code only`);
      classes.add(cls);
      const err = lb.errorFromWire({ code, message: `m ${code}` });
      assert.equal(err.constructor, cls, code);
      assert.equal(err.code, code);
      assert.equal(err.message, `m ${code}`);
    }
    // The client's own conditions are not protocol codes.
    for (const cls of [lb.ConnectionError, lb.DeadlockError, lb.ProtocolError, lb.LeaseLostError]) {
      assert.ok(!documented.includes(cls.prototype.code), cls.name);
      assert.ok(!classes.has(cls), cls.name);
    }
  });

  it("the README's error table names the same codes and classes", () => {
    const text = fs.readFileSync(README_MD, 'utf8');
    const section = text.slice(text.search(/^## Errors\s*$/m));
    assert.notEqual(text.search(/^## Errors\s*$/m), -1, 'README.md has "## Errors"');
    const rows = [...section.matchAll(/^\|\s*`([a-z][a-z0-9_]*)`\s*\|\s*`([A-Za-z]+)`/gm)].map((m) => [m[1], m[2]]);
    assert.deepEqual(
      rows,
      lb.WIRE_CODES.map(([code, cls]) => [code, cls.name]),
    );
  });
});
