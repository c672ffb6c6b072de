'use strict';
/*
 * url.js - the broker's address: parsing tcp://HOST:PORT and unix:///PATH,
 * and the default address, chosen exactly as lockctl chooses it.
 *
 * Pure string work, no I/O except the one stat() of the default socket.
 * Invariants:
 *  - parseUrl() returns {kind: 'tcp', host, port, url} or
 *    {kind: 'unix', path, url}, or throws InvalidArgumentError; the message
 *    says what is wrong and never quotes the URL (it is only an address, but
 *    the broker's url.c keeps the same rule and so do we).
 *  - Schemes match case-insensitively; an IPv6 host is written in brackets
 *    ([::1]:7380) and is returned without them.
 *  - defaultUrl(): $LOCKBROKER_URL when set and not empty, else
 *    unix:///run/lockbroker/lockbroker.sock when that path exists, else
 *    tcp://127.0.0.1:7380.
 */

const fs = require('node:fs');
const net = require('node:net');
const { InvalidArgumentError } = require('./errors');

const DEFAULT_UNIX = '/run/lockbroker/lockbroker.sock';
const DEFAULT_TCP = 'tcp://127.0.0.1:7380';

function bad(what) {
  return new InvalidArgumentError(`bad broker URL: ${what} (want tcp://HOST:PORT or unix:///PATH)`);
}

/**
 * Parses a broker URL.
 * @param {string} url
 * @returns {{kind: 'tcp', host: string, port: number, url: string} | {kind: 'unix', path: string, url: string}}
 */
function parseUrl(url) {
  if (typeof url !== 'string' || url === '') throw bad('empty URL');
  const lower = url.slice(0, 7).toLowerCase();
  if (lower.startsWith('tcp://')) {
    const rest = url.slice(6);
    if (/[/?#@]/.test(rest)) throw bad('a tcp URL is tcp://HOST:PORT, nothing more');
    let host;
    let portText;
    if (rest.startsWith('[')) {
      const close = rest.indexOf(']');
      if (close < 0) throw bad("IPv6 address lacks its closing ']'");
      host = rest.slice(1, close);
      if (!net.isIPv6(host)) throw bad('invalid IPv6 address');
      if (rest[close + 1] !== ':') throw bad('port missing');
      portText = rest.slice(close + 2);
    } else {
      const colon = rest.indexOf(':');
      if (colon < 0) throw bad('port missing');
      host = rest.slice(0, colon);
      portText = rest.slice(colon + 1);
      if (portText.includes(':')) throw bad('IPv6 addresses must be in brackets, e.g. [::1]:7380');
      if (!/^[A-Za-z0-9._-]+$/.test(host)) throw bad(host === '' ? 'host missing' : 'invalid character in host');
    }
    if (!/^[0-9]{1,5}$/.test(portText)) throw bad('port must be a number');
    const port = Number(portText);
    if (port < 1 || port > 65535) throw bad('port out of range 1..65535');
    return { kind: 'tcp', host, port, url };
  }
  if (lower === 'unix://') {
    const path = url.slice(7);
    if (/[?#]/.test(path)) throw bad('a unix URL takes no query or fragment');
    if (!path.startsWith('/')) throw bad('a unix URL needs an absolute path (unix:///PATH)');
    if (path.includes('\0')) throw bad('the path holds a NUL byte');
    return { kind: 'unix', path, url };
  }
  throw bad('unsupported scheme');
}

/** The broker URL when none is given: $LOCKBROKER_URL, the default socket, or TCP. */
function defaultUrl(env = process.env) {
  if (env.LOCKBROKER_URL) return env.LOCKBROKER_URL;
  try {
    fs.statSync(DEFAULT_UNIX);
    return `unix://${DEFAULT_UNIX}`;
  } catch {
    return DEFAULT_TCP;
  }
}

/** The arguments of net.connect() for a parsed address. */
function connectArgs(addr) {
  return addr.kind === 'tcp' ? { host: addr.host, port: addr.port } : { path: addr.path };
}

module.exports = { parseUrl, defaultUrl, connectArgs, DEFAULT_UNIX, DEFAULT_TCP };
