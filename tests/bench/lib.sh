# tests/bench/lib.sh - shell helpers shared by run.sh and ha.sh (sourced).

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
