'use strict';
/*
 * index.js - the lockbroker client library's entry point: what
 * require('lockbroker') gives. Nothing here but exports; the code lives in
 * lib/ (client.js: connection and locks, session.js: one connection and its
 * reader, lease.js: a held lease, errors.js: error classes, url.js: broker
 * addresses, framing.js: lines on the wire).
 */

const { Client, Election } = require('./lib/client');
const { Lease } = require('./lib/lease');
const { parseUrl, defaultUrl } = require('./lib/url');

/**
 * Makes a Client and connects it. Resolves with the connected client.
 * @param {object} [opts] the Client's options
 */
async function connect(opts) {
  return new Client(opts).connect();
}

module.exports = {
  Client,
  Election,
  Lease,
  connect,
  parseUrl,
  defaultUrl,
  // Spread from require() itself, not from a variable: Node's import of
  // this CommonJS module (cjs-module-lexer) then finds every error class as
  // a named export.
  ...require('./lib/errors'),
};
