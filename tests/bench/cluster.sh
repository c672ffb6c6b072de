#!/bin/sh
# tests/bench/cluster.sh - the Redis Cluster benchmarks (issue 17). `make
# bench` runs it after ha.sh; `make bench-cluster` runs it alone.
#
# In a private temp dir it starts one plain Redis (S) and a 3-master Redis
# Cluster without replicas (K; `redis-cli --cluster create`), all loopback
# TCP without persistence, and two release-build brokers on each: S1, S2 on
# redis://, K1, K2 on cluster:// (--pool 4: 12 connections over the
# masters), and S3 on redis:// with --pool 12, as many connections as K1
# has, to tell the cost of routing from that of more connections. The windows of S and K alternate (S, K,
# S, K, ...), so both see the same machine, and the medians are printed as
# "name: value unit" lines:
#
#   cl.{single,single12,cluster}.cC.*  build/lbbench uncontended (acquire(wait_ms 0)
#                       + release, C connections, each on its own lock
#                       names: spread over every slot) on S1 / S3 / K1, with the
#                       broker's and each Redis's CPU
#   cl.*.cC.broker_cpu_us_per_cycle   broker CPU per cycle (µs)
#   cl.cluster.cC.mN_cpu_us_per_cycle each master's CPU per cycle; their
#                       sum against the single Redis's says what a shard
#                       costs
#   cl.{single,cluster}.convoy.*  build/lbbench contended, 8 clients on one
#                       lock over two brokers, holding 1 ms: handoff p50/p99
#   ratio.cl.*          cluster / single (both --pool 4), and cluster /
#                       single12 (S3: --pool 12, the same connections)
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
bench_need cluster.sh "$LBD" "$LB" -- redis-server redis-cli awk "$PY"
bench_tmp cluster

# A free port whose cluster bus port (+10000) is free too.
free_port() {
	"$PY" -c '
import random, socket
for _ in range(200):
    p = random.randint(20000, 22767)
    try:
        for q in (p, p + 10000):
            s = socket.socket(); s.bind(("127.0.0.1", q)); s.close()
        print(p); break
    except OSError:
        pass'
}
start_node() { # port [redis-server flags]
	port=$1
	shift
	mkdir -p "$tmp/node-$port"
	redis-server --port "$port" --bind 127.0.0.1 --dir "$tmp/node-$port" --save "" \
		--appendonly no --daemonize no --logfile "$tmp/node-$port.log" "$@" &
	echo "node-$port $!" >>"$PIDS_FILE"
	wait_ping "$port"
}

S=$(free_port)
start_node "$S"
MASTERS=""
SEEDS=""
for i in 1 2 3; do
	p=$(free_port)
	start_node "$p" --cluster-enabled yes --cluster-config-file "$tmp/node-$p/nodes.conf" \
		--cluster-node-timeout 2000
	MASTERS="$MASTERS $p"
	SEEDS="$SEEDS${SEEDS:+ }127.0.0.1:$p"
done
# shellcheck disable=SC2086
redis-cli --cluster create $SEEDS --cluster-replicas 0 --cluster-yes >"$tmp/create.log" 2>&1 || {
	echo "cluster.sh: redis-cli --cluster create failed" >&2
	cat "$tmp/create.log" >&2
	exit 1
}
end=$(($(date +%s) + 30))
for p in $MASTERS; do
	until redis-cli -p "$p" CLUSTER INFO | grep -q 'cluster_state:ok'; do
		[ "$(date +%s)" -lt "$end" ] || { echo "cluster.sh: the cluster is not ok after 30 s" >&2; exit 1; }
		sleep 0.1
	done
done

FLAGS="--log-level warn --max-connections 4096 --shutdown-grace-ms 500"
KURL="cluster://$(echo "$SEEDS" | tr ' ' ',')"
for b in s1 s2 s3 k1 k2; do
	pool=4
	case $b in
	s3) url="redis://127.0.0.1:$S" pool=12 ;;
	s*) url="redis://127.0.0.1:$S" ;;
	k*) url=$KURL ;;
	esac
	# shellcheck disable=SC2086
	"$LBD" $FLAGS --pool $pool --redis "$url" --listen "unix://$tmp/$b.sock" 2>"$tmp/$b.log" &
	echo "broker-$b $!" >>"$PIDS_FILE"
done
if ! "$LB" ready -e "unix://$tmp/s1.sock" -e "unix://$tmp/s2.sock" -e "unix://$tmp/s3.sock" -e "unix://$tmp/k1.sock" \
	-e "unix://$tmp/k2.sock" -d 20; then
	echo "cluster.sh: the brokers did not answer" >&2
	tail -5 "$tmp"/*.log >&2
	exit 1
fi

field() { # file key: the value of "key:"
	awk -v k="$2:" '$1 == k { print $2 }' "$1"
}
per_cycle_us() { # cpu% cycles/s: CPU µs per cycle
	awk -v c="$1" -v n="$2" 'BEGIN { if (c == "" || n == "" || n + 0 == 0) print "n/a"; else printf "%.2f\n", c / 100 / n * 1e6 }'
}

echo
echo "# lockbroker Redis Cluster benchmark ($(date -u '+%Y-%m-%d %H:%M UTC')), $(nproc) cpus, load $(cut -d" " -f1-3 /proc/loadavg)"
echo "# single: one redis-server; cluster: 3 masters, no replicas; 2 brokers on each"
echo "# $REPS window(s) of $WIN s per mode and size, single and cluster alternating; medians"

failures=0
M1=$(echo $MASTERS | cut -d' ' -f1)
M2=$(echo $MASTERS | cut -d' ' -f2)
M3=$(echo $MASTERS | cut -d' ' -f3)

# ---- uncontended: cycles/s, broker and Redis CPU per cycle -------------------------
for c in 1 16; do
	echo
	echo "## uncontended: $c connection(s), acquire(wait_ms 0) + release, single vs cluster"
	r=1
	while [ $r -le "$REPS" ]; do
		for m in single single12 cluster; do
			if [ $m = single ]; then
				set -- -e "unix://$tmp/s1.sock" --pid "broker=$(pid_of broker-s1)" \
					--pid "m1=$(pid_of node-$S)"
			elif [ $m = single12 ]; then
				set -- -e "unix://$tmp/s3.sock" --pid "broker=$(pid_of broker-s3)" \
					--pid "m1=$(pid_of node-$S)"
			else
				set -- -e "unix://$tmp/k1.sock" --pid "broker=$(pid_of broker-k1)" \
					--pid "m1=$(pid_of node-$M1)" --pid "m2=$(pid_of node-$M2)" \
					--pid "m3=$(pid_of node-$M3)"
			fi
			if ! "$LB" uncontended "$@" -c "$c" -d "$WIN" --reps 1 --warmup 0.3 --label w \
				>"$tmp/out" 2>"$tmp/err"; then
				echo "cluster.sh: lbbench failed on $m" >&2
				cat "$tmp/err" >&2
				failures=$((failures + 1))
				continue
			fi
			n=$(field "$tmp/out" w.cycles_per_s)
			{
				echo "cl.$m.c$c.r$r.cycles_per_s: $n"
				echo "cl.$m.c$c.r$r.acquire_p50_us: $(field "$tmp/out" w.acquire_p50_us)"
				echo "cl.$m.c$c.r$r.acquire_p99_us: $(field "$tmp/out" w.acquire_p99_us)"
				echo "cl.$m.c$c.r$r.broker_cpu_us_per_cycle: $(per_cycle_us "$(field "$tmp/out" w.cpu_broker)" "$n")"
				sum=0
				for k in 1 2 3; do
					v=$(field "$tmp/out" "w.cpu_m$k")
					[ -n "$v" ] || continue
					u=$(per_cycle_us "$v" "$n")
					echo "cl.$m.c$c.r$r.m${k}_cpu_us_per_cycle: $u"
					sum=$(awk -v a="$sum" -v b="$u" 'BEGIN { printf "%.2f\n", a + b }')
				done
				echo "cl.$m.c$c.r$r.redis_cpu_us_per_cycle: $sum"
			} >>"$tmp/windows"
		done
		r=$((r + 1))
	done
	for m in single single12 cluster; do
		for k in cycles_per_s acquire_p50_us acquire_p99_us broker_cpu_us_per_cycle \
			redis_cpu_us_per_cycle m1_cpu_us_per_cycle m2_cpu_us_per_cycle m3_cpu_us_per_cycle; do
			v=$(awk -v p="cl.$m.c$c.r" -v k=".$k:" 'index($1, p) == 1 && substr($1, length($1) - length(k) + 1) == k { print $2 }' "$tmp/windows" | median)
			[ "$v" = n/a ] && continue
			u="us"
			[ $k = cycles_per_s ] && u="cycles/s"
			emit "cl.$m.c$c.$k: $v $u"
		done
	done
	for k in cycles_per_s acquire_p50_us acquire_p99_us broker_cpu_us_per_cycle redis_cpu_us_per_cycle; do
		a=$(awk -v k="cl.cluster.c$c.$k:" '$1 == k { print $2 }' "$res")
		b=$(awk -v k="cl.single.c$c.$k:" '$1 == k { print $2 }' "$res")
		emit "ratio.cl.cluster_vs_single.c$c.$k: $(ratio "$a" "$b") x"
		b=$(awk -v k="cl.single12.c$c.$k:" '$1 == k { print $2 }' "$res")
		emit "ratio.cl.cluster_vs_single12.c$c.$k: $(ratio "$a" "$b") x"
	done
done

# ---- convoy: handoff latency over two brokers ------------------------------------------
echo
echo "## convoy: 8 clients on one lock over two brokers, hold 1 ms, single vs cluster"
r=1
while [ $r -le "$REPS" ]; do
	for m in single cluster; do
		case $m in
		single) e1=s1 e2=s2 ;;
		cluster) e1=k1 e2=k2 ;;
		esac
		if ! "$LB" contended -e "unix://$tmp/$e1.sock" -e "unix://$tmp/$e2.sock" -c 8 --hold-ms 1 \
			-d "$WIN" --reps 1 --warmup 0.3 --label w >"$tmp/out" 2>"$tmp/err"; then
			echo "cluster.sh: lbbench contended failed on $m" >&2
			cat "$tmp/err" >&2
			failures=$((failures + 1))
			continue
		fi
		for k in grants_per_s handoff_p50_us handoff_p99_us fifo_pct violations; do
			echo "cl.$m.convoy.r$r.$k: $(field "$tmp/out" "w.$k")" >>"$tmp/windows"
		done
	done
	r=$((r + 1))
done
for m in single cluster; do
	for k in grants_per_s handoff_p50_us handoff_p99_us fifo_pct violations; do
		v=$(awk -v p="cl.$m.convoy.r" -v k=".$k:" 'index($1, p) == 1 && substr($1, length($1) - length(k) + 1) == k { print $2 }' "$tmp/windows" | median)
		emit "cl.$m.convoy.$k: $v"
	done
done
for k in grants_per_s handoff_p50_us handoff_p99_us; do
	a=$(awk -v k="cl.cluster.convoy.$k:" '$1 == k { print $2 }' "$res")
	b=$(awk -v k="cl.single.convoy.$k:" '$1 == k { print $2 }' "$res")
	emit "ratio.cl.cluster_vs_single.convoy.$k: $(ratio "$a" "$b") x"
done
for b in k1 k2; do
	n=$(grep -c 'level=error' "$tmp/$b.log" || true)
	emit "cl.cluster.$b.errors_logged: $n lines"
done

if [ "$failures" -gt 0 ]; then
	echo "cluster.sh: $failures measurement(s) failed" >&2
	exit 1
fi
