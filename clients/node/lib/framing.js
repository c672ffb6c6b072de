'use strict';
/*
 * framing.js - the wire's framing: one JSON object per line, in both
 * directions. Does no I/O: feed it bytes, take complete lines out.
 *
 * Invariants (the shape of hiredis read.c):
 *  - LineReader.feed(chunk) returns the complete lines the bytes finished,
 *    in order, as strings without their '\n' or '\r\n'; blank lines (only
 *    spaces or tabs) are dropped, as the broker drops them.
 *  - A hard maximum line length (bytes before the '\n'): past it the reader
 *    fails, without waiting for the newline, and the failure is sticky:
 *    every later feed() throws the same ProtocolError.
 *  - Lines split at any byte (inside a UTF-8 sequence included) come out
 *    whole: bytes are joined before they are decoded.
 *  - encodeLine() is the only way a request becomes bytes: JSON and '\n'.
 */

const { ProtocolError } = require('./errors');

/** Longest broker line this client accepts: a `leases` answer of a big session is long. */
const DEFAULT_MAX_LINE = 64 * 1024 * 1024;

class LineReader {
  /** @param {number} [maxLine] longest line in bytes, its '\n' not counted */
  constructor(maxLine = DEFAULT_MAX_LINE) {
    this.maxLine = maxLine;
    this.parts = []; // bytes of the unfinished line, in arrival order
    this.partLen = 0;
    this.error = null; // sticky
  }

  /**
   * Takes the next bytes; returns the lines they complete.
   * @param {Buffer} chunk
   * @returns {string[]}
   */
  feed(chunk) {
    if (this.error) throw this.error;
    const lines = [];
    let start = 0;
    for (;;) {
      const nl = chunk.indexOf(10, start);
      if (nl < 0) break;
      let bytes;
      if (this.partLen === 0) {
        bytes = chunk.subarray(start, nl);
      } else {
        this.parts.push(chunk.subarray(start, nl));
        bytes = Buffer.concat(this.parts, this.partLen + (nl - start));
        this.parts = [];
        this.partLen = 0;
      }
      let len = bytes.length;
      if (len > 0 && bytes[len - 1] === 13) len--; // "\r\n"
      if (len > this.maxLine) this.fail();
      const line = bytes.toString('utf8', 0, len);
      if (line.charCodeAt(0) === 123 || !/^[ \t]*$/.test(line)) lines.push(line); // 123: '{'
      start = nl + 1;
    }
    if (start < chunk.length) {
      const rest = chunk.subarray(start);
      this.parts.push(rest);
      this.partLen += rest.length;
      // A final '\r' may still be the start of "\r\n": allow one byte over.
      if (this.partLen > this.maxLine + 1) this.fail();
    }
    return lines;
  }

  fail() {
    this.parts = [];
    this.partLen = 0;
    this.error = new ProtocolError(`the broker sent a line longer than ${this.maxLine} bytes`);
    throw this.error;
  }
}

/** A request object as one line of bytes' text: JSON, then '\n'. */
function encodeLine(obj) {
  return JSON.stringify(obj) + '\n';
}

module.exports = { LineReader, encodeLine, DEFAULT_MAX_LINE };
