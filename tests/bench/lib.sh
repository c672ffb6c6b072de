# tests/bench/lib.sh - shell helpers shared by run.sh, ha.sh and cluster.sh
# (sourced). The multi-process scripts (ha.sh, cluster.sh) set $tmp, $res
# and $PIDS_FILE (name pid lines, in start order) with bench_tmp and record
# what they start there; bench_cleanup stops it all.

stop_pid() { # pid: TERM, then KILL after 10 s
	[ -n "$1" ] || return 0
	kill -TERM "$1" 2>/dev/null || return 0
	n=0
	while kill -0 "$1" 2>/dev/null && [ $n -lt 100 ]; do
		sleep 0.1
		n=$((n + 1))
	done
	kill -KILL "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
}

ratio() { # a b: a / b to 2 decimals, or n/a
	awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || a == "n/a" || b == "n/a" || b + 0 == 0) print "n/a"; else printf "%.2f\n", a / b }'
}

# Windows: QUICK=1 one of SECS (default 1) s, else REPS of 0.6 x SECS
# (default 5) s. Sets SECS, REPS and WIN; reps: REPS when not quick.
bench_windows() { # reps
	if [ "${BENCH_QUICK:-0}" = 1 ]; then
		SECS=${BENCH_SECONDS:-1}
		REPS=1
		WIN=$SECS
	else
		SECS=${BENCH_SECONDS:-5}
		REPS=$1
		WIN=$(awk -v s="$SECS" 'BEGIN { printf "%.2f", s * 0.6 }')
	fi
}

# Checks that each named file is executable and each tool is on PATH.
bench_need() { # script-name files... -- tools...
	who=$1
	shift
	while [ $# -gt 0 ] && [ "$1" != -- ]; do
		[ -x "$1" ] || { echo "$who: $1 is missing: run 'make bench'" >&2; exit 1; }
		shift
	done
	[ $# -gt 0 ] && shift
	for t in "$@"; do
		command -v "$t" >/dev/null 2>&1 || { echo "$who: $t is missing (make deps)" >&2; exit 1; }
	done
}

# A temp dir with results.txt and the pid list, removed on exit (kept with
# BENCH_KEEP=1) after everything in the pid list was stopped, newest first.
bench_tmp() { # script-name
	BENCH_WHO=$1
	tmp=$(mktemp -d "/tmp/lbbench-$1.XXXXXX")
	res="$tmp/results.txt"
	: >"$res"
	PIDS_FILE="$tmp/pids"
	: >"$PIDS_FILE"
	trap bench_cleanup EXIT
	trap 'exit 130' INT TERM
}
bench_cleanup() {
	trap - INT TERM EXIT
	for p in $(awk '{ print $2 }' "$PIDS_FILE" | tac); do
		stop_pid "$p"
	done
	if [ "${BENCH_KEEP:-0}" = 1 ]; then
		echo "$BENCH_WHO: kept $tmp" >&2
	else
		rm -rf "$tmp"
	fi
}

pid_of() { # name: the pid recorded for it
	awk -v n="$1" '$1 == n { p = $2 } END { print p }' "$PIDS_FILE"
}

wait_ping() { # port
	n=0
	until redis-cli -p "$1" ping >/dev/null 2>&1; do
		n=$((n + 1))
		[ $n -le 200 ] || { echo "$BENCH_WHO: nothing answers on port $1" >&2; exit 1; }
		sleep 0.05
	done
}

emit() { # prints a result line and records it in $res
	echo "$1"
	echo "$1" >>"$res"
}

median() { # values on stdin, one per line
	sort -n | awk '{ v[NR] = $1 } END { if (NR == 0) print "n/a"; else print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
