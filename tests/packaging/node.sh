#!/bin/sh
# tests/packaging/node.sh: the Node client (clients/node) as a user gets
# it from npm. `npm pack` makes lockbroker-VERSION.tgz holding index.js,
# index.d.ts, lib/*.js, README.md and package.json and nothing else (no
# tests); in a fresh project, `npm install ./lockbroker-VERSION.tgz` works
# offline (the registry set to an address nothing listens on: the package
# has no dependencies); require('lockbroker') and ESM's named imports give
# the API, a deep import is refused ("exports"), and a connect to a socket
# that does not exist rejects at once with ConnectionError. Then the
# types: clients/node/test-types/usage.ts compiles with `tsc --strict
# --noEmit` against the installed package, resolved the three ways
# TypeScript resolves packages (nodenext through "exports", node10
# through "types", bundler). typescript and @types/node are the versions
# package.json's devDependencies pin, from the npm registry the first time,
# from the cache build/npm-cache ($LB_NPM_CACHE) after, with no network;
# if they can be had from neither, the script fails saying so.
#
# Everything happens in a temp dir, removed after: nothing is left in
# clients/node (no node_modules, no tarball). Needs node (18 or later)
# and npm (Debian: nodejs, npm), tar. Run from the repository's top (or
# anywhere); exits non-zero on the first failure.
set -eu

top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
pkg=$top/clients/node
cache=${LB_NPM_CACHE:-$top/build/npm-cache}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/lbnodepkg.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM
fail() { echo "packaging/node: $*" >&2; exit 1; }

command -v node >/dev/null 2>&1 || fail "node is missing (apt-get install nodejs)"
command -v npm >/dev/null 2>&1 || fail "npm is missing (apt-get install npm)"
mkdir -p "$cache"
npm_q() {
	npm --cache "$cache" --no-audit --no-fund --no-update-notifier --ignore-scripts --loglevel=error "$@"
}

field() { node -p "const p = require('$pkg/package.json'); $1"; }
version=$(field 'p.version')
ts=$(field 'p.devDependencies.typescript')
types=$(field "p.devDependencies['@types/node']")
[ "$(field '"private" in p')" = false ] || fail "package.json is private: npm would not publish it"
had_modules=false
[ -e "$pkg/node_modules" ] && had_modules=true

# The tarball and what it holds
(cd "$pkg" && npm_q pack --pack-destination "$tmp" >/dev/null) || fail "npm pack failed"
tgz=$tmp/lockbroker-$version.tgz
[ -f "$tgz" ] || fail "npm pack made no $(basename "$tgz")"
tar -tzf "$tgz" | sort >"$tmp/got"
{
	printf 'package/%s\n' README.md index.d.ts index.js package.json
	for f in "$pkg"/lib/*.js; do echo "package/lib/${f##*/}"; done
} | sort >"$tmp/want"
if ! cmp -s "$tmp/want" "$tmp/got"; then
	diff "$tmp/want" "$tmp/got" >&2 || true
	fail "the tarball holds other files than index.js, index.d.ts, lib/*.js, README.md, package.json (< wanted, > packed)"
fi

# A fresh project installs it offline
app=$tmp/app
mkdir "$app"
printf '{ "name": "lockbroker-packaging-check", "version": "0.0.0", "private": true }\n' >"$app/package.json"
(cd "$app" && npm_q install --offline --registry http://127.0.0.1:9/ "$tgz" >/dev/null) ||
	fail "npm install --offline of the tarball failed"
installed=$(cd "$app/node_modules" && echo *)
[ "$installed" = lockbroker ] || fail "installing it brought other packages: $installed"

cd "$app"
node -e "
const assert = require('node:assert/strict');
const lb = require('lockbroker');
assert.match(require.resolve('lockbroker'), /node_modules\/lockbroker\/index\.js\$/);
for (const k of ['connect', 'Client', 'Election', 'Lease', 'parseUrl', 'defaultUrl', 'errorFromWire', 'WIRE_CODES',
  'LockbrokerError', 'ConnectionError', 'LeaseLostError', 'LockTimeoutError', 'NotHeldError']) {
  assert.ok(lb[k] !== undefined, 'require(\"lockbroker\") has no ' + k);
}
assert.equal(require('lockbroker/package.json').version, '$version');
assert.throws(() => require('lockbroker/lib/client'), { code: 'ERR_PACKAGE_PATH_NOT_EXPORTED' });
const t0 = Date.now();
lb.connect({ url: 'unix://$tmp/no-such.sock' }).then(
  () => assert.fail('connected to nothing'),
  (err) => {
    assert.ok(err instanceof lb.ConnectionError, String(err));
    assert.ok(Date.now() - t0 < 2000, 'a refused connect took ' + (Date.now() - t0) + ' ms');
  },
);
" || fail "require('lockbroker') from the installed package failed"
node --input-type=module -e "
import { connect, Client, ConnectionError, LeaseLostError, WIRE_CODES } from 'lockbroker';
if (typeof connect !== 'function' || typeof Client !== 'function' || !(new ConnectionError('x') instanceof Error) ||
    typeof LeaseLostError !== 'function' || WIRE_CODES.length === 0) throw new Error('bad named exports');
" || fail "import { ... } from 'lockbroker' (ESM, named exports) failed"

# The types, with the TypeScript package.json pins: from the cache, else the registry
tools="typescript@$ts @types/node@$types"
# shellcheck disable=SC2086
if ! npm_q install --no-save --offline $tools >/dev/null 2>"$tmp/npm.err"; then
	# shellcheck disable=SC2086
	npm_q install --no-save --prefer-offline --fetch-retries=1 --fetch-retry-mintimeout=2000 $tools \
		>/dev/null 2>"$tmp/npm.err" || {
		cat "$tmp/npm.err" >&2
		fail "cannot install $tools: not in $cache, nor from the npm registry (npm's error above)"
	}
fi
[ -d node_modules/lockbroker ] || fail "installing typescript removed lockbroker"
cp "$pkg/test-types/usage.ts" "$pkg/test-types/tsconfig.json" .
tsc=$app/node_modules/.bin/tsc
$tsc -p tsconfig.json --strict --noEmit || fail "tsc --strict (module nodenext): the types do not compile"
$tsc -p tsconfig.json --strict --noEmit --module commonjs --moduleResolution node10 ||
	fail "tsc --strict (moduleResolution node10): the types do not compile"
$tsc -p tsconfig.json --strict --noEmit --module preserve --moduleResolution bundler ||
	fail "tsc --strict (moduleResolution bundler): the types do not compile"

cd "$top"
[ "$had_modules" = true ] || [ ! -e "$pkg/node_modules" ] || fail "clients/node/node_modules was left behind"
[ ! -e "$pkg/lockbroker-$version.tgz" ] || fail "a tarball was left in clients/node"
echo "packaging/node: ok (lockbroker-$version.tgz: $(wc -l <"$tmp/got") files; installed offline;" \
	"require and import; typescript $ts: tsc --strict, 3 module resolutions)"
