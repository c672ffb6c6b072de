#!/bin/sh
# tests/deps_check_selftest.sh - deps_check.sh fails where it must: on a
# copy of the tree, each of the breaks below (one at a time) must make it
# exit 1 with its message, and the untouched copy must pass. Run by
# `make deps-check` before the real check.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
fails=0

fresh() {
	rm -rf "$tmp/t"
	mkdir -p "$tmp/t"
	cp -R "$top/broker" "$top/protocol" "$top/cmd" "$tmp/t/"
}

# expect_fail what file line pattern: adds the include line to file and
# expects a failure whose output matches pattern.
expect_fail() {
	fresh
	printf '%s\n' "$3" >>"$tmp/t/$2"
	if out=$(sh "$top/tests/deps_check.sh" "$tmp/t" 2>&1); then
		echo "deps-check selftest: $1: passed, must fail"
		fails=1
	elif ! printf '%s\n' "$out" | grep -q -- "$4"; then
		echo "deps-check selftest: $1: failed without \"$4\":"
		printf '%s\n' "$out"
		fails=1
	fi
}

fresh
if ! sh "$top/tests/deps_check.sh" "$tmp/t" >/dev/null; then
	echo "deps-check selftest: the untouched tree fails"
	fails=1
fi
expect_fail "base includes locks" broker/base/htab.c '#include "broker/locks/lease.h"' 'against the layer order'
expect_fail "store includes net" broker/store/single.c '#include "broker/net/session.h"' 'against the layer order'
expect_fail "protocol includes store" protocol/frame.c '#include "broker/store/store.h"' 'against the layer order'
expect_fail "net includes the top" broker/net/session.c '#include "broker/config.h"' 'against the layer order'
expect_fail "lifecycle outside main" broker/metrics.c '#include "broker/broker.h"' 'only main may'
expect_fail "private header" broker/locks/lease.c '#include "broker/locks/waitq_int.h"' 'private to'
expect_fail "past the seam" broker/locks/watchdog.c '#include "broker/store/rpool.h"' 'only its seam'
expect_fail "missing header" broker/locks/lease.c '#include "broker/locks/nosuch.h"' 'does not exist'
expect_fail "a store named in locks" broker/locks/waitq_send.c '/* only with --redlock */' 'a store named in locks'
expect_fail "the mode asked in locks" broker/locks/lockops.c 'static int x(void) { return store_mode()[0]; }' 'a store named in locks'
expect_fail "cycle in a layer" broker/locks/opctx.h '#include "broker/locks/lockops.h"' 'loop'

[ "$fails" -eq 0 ] || exit 1
echo "deps-check selftest: 11 breaks caught, the untouched tree passes"
