#!/bin/sh
# tests/deps_check.sh - the include graph of broker/ keeps its layers
# (`make deps-check`, run by `make test`). Layers, bottom to top:
#   0 broker/base/   heap, tables, timers, log, URLs, settings, shared state
#   1 protocol/      framing, request decoding, response encoding
#   2 broker/store/  the seam to Redis and its backend(s)
#   3 broker/locks/  leases, waiters, the watchdog, lock operations
#   4 broker/net/    listeners, sessions, the op table
#   5 broker/*.c     lifecycle (broker.c), config parsing, metrics: wiring
# A file may include headers of its own layer or lower ones, never of an
# upper one; protocol/ includes nothing of broker/; broker/broker.h (the
# lifecycle) is included by cmd/lockbrokerd/main.c alone; and no module (a
# .c with its .h) depends on itself through others: no include cycle. A
# module's private header (x_int.h) is included only by its own parts
# (x.c, x_*.c in the same folder). Above store/, the seam is all there is
# of it: store.h, lockscript.h (a lock's call) and scripts.h (the script
# ids); a backend's own headers (rpool.h, canary.h, redis_uv.h) stay inside.
# broker/locks/ names no store (redlock, sentinel, cluster, or the mode
# string): what it must know of one it reads from store_caps() (store.h).
# Prints every violation and exits 1 when there is one. Checks the tree it
# sits in, or the one given as $1 (tests/deps_check_selftest.sh).
set -eu
cd "${1:-$(dirname "$0")/..}"

layer() {
	case "$1" in
	broker/base/*) echo 0 ;;
	protocol/*) echo 1 ;;
	broker/store/*) echo 2 ;;
	broker/locks/*) echo 3 ;;
	broker/net/*) echo 4 ;;
	broker/*) echo 5 ;;
	*) echo 9 ;;
	esac
}

module() { echo "${1%.*}"; }

bad=0
edges=$(mktemp)
trap 'rm -f "$edges"' EXIT
for f in $(find broker protocol cmd -name '*.[ch]' | sort); do
	from=$(layer "$f")
	for inc in $(sed -n 's/^#include "\(\(broker\|protocol\)\/[^"]*\)".*/\1/p' "$f"); do
		to=$(layer "$inc")
		if [ ! -f "$inc" ]; then
			echo "deps-check: $f includes $inc, which does not exist"
			bad=1
			continue
		fi
		case "$f" in cmd/*) ;; *)
			if [ "$to" -gt "$from" ]; then
				echo "deps-check: $f (layer $from) includes $inc (layer $to): against the layer order"
				bad=1
			fi ;;
		esac
		if [ "$inc" = broker/broker.h ] && [ "$f" != cmd/lockbrokerd/main.c ] && [ "$f" != broker/broker.c ]; then
			echo "deps-check: $f includes broker/broker.h: only main may"
			bad=1
		fi
		case "$f:$inc" in
		broker/store/*) ;;
		*:broker/store/store.h | *:broker/store/lockscript.h | *:broker/store/scripts.h) ;;
		*:broker/store/*)
			echo "deps-check: $f includes $inc: above store/, only its seam (store.h, lockscript.h, scripts.h)"
			bad=1 ;;
		esac
		case "$inc" in *_int.h)
			owner=${inc%_int.h}
			case "$f" in "$owner".c | "$owner"_*.c | "$owner"_*.h) ;; *)
				echo "deps-check: $f includes $inc, private to ${owner}*.c"
				bad=1 ;;
			esac ;;
		esac
		a=$(module "$f")
		b=$(module "$inc")
		[ "$a" = "$b" ] || echo "$a $b" >>"$edges"
	done
done
named=$(grep -n -i -E 'redlock|sentinel|cluster|store_mode|"single"' $(find broker/locks -type f | sort) || true)
if [ -n "$named" ]; then
	printf '%s\n' "$named" | sed 's/^/deps-check: a store named in locks\/ (use store_caps): /'
	bad=1
fi
if ! tsort "$edges" >/dev/null 2>"$edges.err"; then
	sed 's/^/deps-check: /' "$edges.err"
	bad=1
fi
rm -f "$edges.err"
if [ "$bad" -ne 0 ]; then
	echo "deps-check: failed"
	exit 1
fi
echo "deps-check: $(sort -u "$edges" | wc -l) include edges, layers kept, no cycle"
