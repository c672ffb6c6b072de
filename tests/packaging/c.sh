#!/bin/sh
# tests/packaging/c.sh: the C client installed as a user gets it (issue
# 28): `make install-lbclient PREFIX=...` puts liblbclient.so (soname
# liblbclient.so.0), liblbclient.a, lbclient.h and lbclient.pc in place;
# the shared library exports lbclient.h's functions and nothing else;
# examples/c/counter.c builds against the installed tree with
# `pkg-config --cflags --libs lbclient` only (shared and --static), and,
# under tests/clients/with-broker.sh, runs. DESTDIR stages without
# touching PREFIX. Run from anywhere; exits non-zero on the first failure.
set -eu

top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
fail() { echo "packaging/c: $*" >&2; exit 1; }

make=${MAKE:-make}
$make --no-print-directory -s install-lbclient PREFIX="$tmp/prefix" >/dev/null
lib=$tmp/prefix/lib
for f in lib/liblbclient.so lib/liblbclient.so.0 lib/liblbclient.a include/lbclient.h \
	lib/pkgconfig/lbclient.pc; do
	[ -e "$tmp/prefix/$f" ] || fail "make install-lbclient did not install $f"
done
soname=$(readelf -d "$lib/liblbclient.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = liblbclient.so.0 ] || fail "soname is '$soname', want liblbclient.so.0"

# exported = declared, both ways
grep -oE '\blbc_[a-z_]+\(' clients/c/lbclient.h | tr -d '(' | sort -u >"$tmp/declared"
nm -D --defined-only "$lib/liblbclient.so" | awk '$2 == "T" { sub(/@.*/, "", $3); print $3 }' |
	sort -u >"$tmp/exported"
if ! cmp -s "$tmp/declared" "$tmp/exported"; then
	diff "$tmp/declared" "$tmp/exported" >&2 || true
	fail "liblbclient.so exports other functions than lbclient.h declares (< declared, > exported)"
fi

export PKG_CONFIG_PATH="$lib/pkgconfig"
[ "$(pkg-config --modversion lbclient)" = "$(sed -n 's/^#define LBC_VERSION "\(.*\)"/\1/p' clients/c/lbclient.h)" ] ||
	fail "pkg-config --modversion lbclient is not LBC_VERSION"
# shellcheck disable=SC2046
cc -std=c11 -o "$tmp/counter" examples/c/counter.c $(pkg-config --cflags --libs lbclient) ||
	fail "counter.c does not build with pkg-config's flags"
LD_LIBRARY_PATH=$lib ldd "$tmp/counter" | grep -q "liblbclient.so.0 => $lib/liblbclient.so.0" ||
	fail "the counter is not linked against the installed liblbclient.so.0"
# shellcheck disable=SC2046
cc -std=c11 -o "$tmp/counter-static" examples/c/counter.c \
	$(pkg-config --cflags lbclient) "$lib/liblbclient.a" $(pkg-config --static --libs-only-other lbclient) ||
	fail "counter.c does not build against liblbclient.a"
if ldd "$tmp/counter-static" | grep -q liblbclient; then
	fail "the static counter still wants liblbclient.so"
fi

if [ -n "${LOCKBROKER_URL:-}" ]; then
	redis="$LOCKBROKER_REDIS_HOST:$LOCKBROKER_REDIS_PORT"
	LD_LIBRARY_PATH=$lib "$tmp/counter" --iterations 5 --url "$LOCKBROKER_URL" --redis "$redis" ||
		fail "the installed counter did not run"
	"$tmp/counter-static" --iterations 5 --url "$LOCKBROKER_URL" --redis "$redis" ||
		fail "the static counter did not run"
fi

# DESTDIR stages under PREFIX's paths, and the .pc names PREFIX
$make --no-print-directory -s install-lbclient PREFIX=/opt/lbc DESTDIR="$tmp/stage" >/dev/null
[ -e "$tmp/stage/opt/lbc/lib/liblbclient.so.0" ] || fail "DESTDIR: no stage/opt/lbc/lib/liblbclient.so.0"
grep -q '^prefix=/opt/lbc$' "$tmp/stage/opt/lbc/lib/pkgconfig/lbclient.pc" || fail "DESTDIR: the .pc does not name PREFIX"
[ ! -e /opt/lbc ] || [ -e "$tmp/stage/opt/lbc" ] || fail "DESTDIR installed into /opt/lbc"
echo "packaging/c: ok (liblbclient.so.0, .a, lbclient.h, lbclient.pc; counter built with pkg-config only)"
