#!/bin/sh
# tests/bench/redlock.sh - the Redlock benchmarks (issue 18). `make bench`
# runs it after cluster.sh; `make bench-redlock` runs it alone.
#
# In a private temp dir it starts one plain Redis (S) and five more (R1..R5),
# all loopback TCP without persistence, and release-build brokers: s1, s2
# on redis://S; r1, r2 with --redlock over R1..R3 (N=3); f1 with --redlock
# over R1..R5 (N=5, its own key prefix). The windows of the modes alternate
# (single, N=3, N=5, single, ...), so all see the same machine, and the
# medians are printed as "name: value unit" lines:
#
#   rl.{single,n3,n5}.cC.*   build/lbbench uncontended (acquire(wait_ms 0)
#                       + release, C connections, each on its own lock
#                       names) on s1 / r1 / f1: cycles/s, acquire p50/p99,
#                       the broker's CPU per cycle
#   rl.{single,n3}.convoy.*  build/lbbench contended, 8 clients on one lock
#                       over two brokers, holding 1 ms: handoff p50/p99
#   ratio.rl.*          N=3 / single and N=5 / single
#
# Knobs: BENCH_SECONDS, BENCH_QUICK as in run.sh; BENCH_KEEP=1 keeps the
# temp dir. Everything started is stopped on exit (trap).
set -eu

top=$(cd "$(dirname "$0")/../.." && pwd)
LBD="$top/build/lockbrokerd"
LB="$top/build/lbbench"
PY=/usr/bin/python3

. "$top/tests/bench/lib.sh"
bench_windows 5
bench_need redlock.sh "$LBD" "$LB" -- redis-server redis-cli awk "$PY"
bench_tmp redlock

free_port() {
	"$PY" -c '
import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}
start_node() { # port
	mkdir -p "$tmp/node-$1"
	redis-server --port "$1" --bind 127.0.0.1 --dir "$tmp/node-$1" --save "" \
		--appendonly no --daemonize no --logfile "$tmp/node-$1.log" &
	echo "node-$1 $!" >>"$PIDS_FILE"
	wait_ping "$1"
}

S=$(free_port)
start_node "$S"
NODES=""
for i in 1 2 3 4 5; do
	p=$(free_port)
	start_node "$p"
	NODES="$NODES $p"
done
url_list() { # count: the first count nodes as a --redlock list
	echo $NODES | tr ' ' '\n' | head -n "$1" | sed 's|^|redis://127.0.0.1:|' | paste -sd, -
}
R3=$(url_list 3)
R5=$(url_list 5)

FLAGS="--log-level warn --max-connections 4096 --shutdown-grace-ms 500 --pool 4"
for b in s1 s2 r1 r2 f1; do
	case $b in
	s*) set -- --redis "redis://127.0.0.1:$S" ;;
	r*) set -- --redlock "$R3" ;;
	f*) set -- --redlock "$R5" --prefix "lb5:" ;;
	esac
	# shellcheck disable=SC2086
	"$LBD" $FLAGS "$@" --listen "unix://$tmp/$b.sock" 2>"$tmp/$b.log" &
	echo "broker-$b $!" >>"$PIDS_FILE"
done
if ! "$LB" ready -e "unix://$tmp/s1.sock" -e "unix://$tmp/s2.sock" -e "unix://$tmp/r1.sock" \
	-e "unix://$tmp/r2.sock" -e "unix://$tmp/f1.sock" -d 20; then
	echo "redlock.sh: the brokers did not answer" >&2
	tail -5 "$tmp"/*.log >&2
	exit 1
fi

field() { # file key: the value of "key:"
	awk -v k="$2:" '$1 == k { print $2 }' "$1"
}
per_cycle_us() { # cpu% cycles/s: CPU µs per cycle
	awk -v c="$1" -v n="$2" 'BEGIN { if (c == "" || n == "" || n + 0 == 0) print "n/a"; else printf "%.2f\n", c / 100 / n * 1e6 }'
}
median_of() { # prefix key: the median over the windows
	awk -v p="$1" -v k=".$2:" 'index($1, p) == 1 && substr($1, length($1) - length(k) + 1) == k { print $2 }' "$tmp/windows" | median
}

echo
echo "# lockbroker Redlock benchmark ($(date -u '+%Y-%m-%d %H:%M UTC')), $(nproc) cpus, load $(cut -d" " -f1-3 /proc/loadavg)"
echo "# single: one redis-server; n3 / n5: --redlock over 3 / 5 redis-servers"
echo "# $REPS window(s) of $WIN s per mode and size, modes alternating; medians"

failures=0

# ---- uncontended -----------------------------------------------------------------
for c in 1 16; do
	echo
	echo "## uncontended: $c connection(s), acquire(wait_ms 0) + release, single vs Redlock"
	r=1
	while [ $r -le "$REPS" ]; do
		for m in single n3 n5; do
			case $m in
			single) b=s1 ;;
			n3) b=r1 ;;
			n5) b=f1 ;;
			esac
			if ! "$LB" uncontended -e "unix://$tmp/$b.sock" --pid "broker=$(pid_of broker-$b)" \
				-c "$c" -d "$WIN" --reps 1 --warmup 0.3 --label w >"$tmp/out" 2>"$tmp/err"; then
				echo "redlock.sh: lbbench failed on $m" >&2
				cat "$tmp/err" >&2
				failures=$((failures + 1))
				continue
			fi
			n=$(field "$tmp/out" w.cycles_per_s)
			{
				echo "rl.$m.c$c.r$r.cycles_per_s: $n"
				echo "rl.$m.c$c.r$r.acquire_p50_us: $(field "$tmp/out" w.acquire_p50_us)"
				echo "rl.$m.c$c.r$r.acquire_p99_us: $(field "$tmp/out" w.acquire_p99_us)"
				echo "rl.$m.c$c.r$r.broker_cpu_us_per_cycle: $(per_cycle_us "$(field "$tmp/out" w.cpu_broker)" "$n")"
			} >>"$tmp/windows"
		done
		r=$((r + 1))
	done
	for m in single n3 n5; do
		for k in cycles_per_s acquire_p50_us acquire_p99_us broker_cpu_us_per_cycle; do
			v=$(median_of "rl.$m.c$c.r" "$k")
			u="us"
			[ $k = cycles_per_s ] && u="cycles/s"
			emit "rl.$m.c$c.$k: $v $u"
		done
	done
	for m in n3 n5; do
		for k in cycles_per_s acquire_p50_us acquire_p99_us broker_cpu_us_per_cycle; do
			a=$(awk -v k="rl.$m.c$c.$k:" '$1 == k { print $2 }' "$res")
			b=$(awk -v k="rl.single.c$c.$k:" '$1 == k { print $2 }' "$res")
			emit "ratio.rl.${m}_vs_single.c$c.$k: $(ratio "$a" "$b") x"
		done
	done
done

# ---- convoy: handoff latency over two brokers --------------------------------------
echo
echo "## convoy: 8 clients on one lock over two brokers, hold 1 ms, single vs Redlock N=3"
r=1
while [ $r -le "$REPS" ]; do
	for m in single n3; do
		case $m in
		single) e1=s1 e2=s2 ;;
		n3) e1=r1 e2=r2 ;;
		esac
		if ! "$LB" contended -e "unix://$tmp/$e1.sock" -e "unix://$tmp/$e2.sock" -c 8 --hold-ms 1 \
			-d "$WIN" --reps 1 --warmup 0.3 --label w >"$tmp/out" 2>"$tmp/err"; then
			echo "redlock.sh: lbbench contended failed on $m" >&2
			cat "$tmp/err" >&2
			failures=$((failures + 1))
			continue
		fi
		for k in grants_per_s handoff_p50_us handoff_p99_us fifo_pct violations; do
			echo "rl.$m.convoy.r$r.$k: $(field "$tmp/out" "w.$k")" >>"$tmp/windows"
		done
	done
	r=$((r + 1))
done
for m in single n3; do
	for k in grants_per_s handoff_p50_us handoff_p99_us fifo_pct violations; do
		emit "rl.$m.convoy.$k: $(median_of "rl.$m.convoy.r" "$k")"
	done
done
for k in grants_per_s handoff_p50_us handoff_p99_us; do
	a=$(awk -v k="rl.n3.convoy.$k:" '$1 == k { print $2 }' "$res")
	b=$(awk -v k="rl.single.convoy.$k:" '$1 == k { print $2 }' "$res")
	emit "ratio.rl.n3_vs_single.convoy.$k: $(ratio "$a" "$b") x"
done
for b in r1 r2 f1; do
	n=$(grep -c 'level=error' "$tmp/$b.log" || true)
	emit "rl.$b.errors_logged: $n lines"
done

if [ "$failures" -gt 0 ]; then
	echo "redlock.sh: $failures measurement(s) failed" >&2
	exit 1
fi
