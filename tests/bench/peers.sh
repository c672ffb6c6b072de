#!/bin/sh
# tests/bench/peers.sh - lockbroker against dflockd, the in-memory lock
# server a user would pick for speed (github mtingers/dflockd), side by
# side in one run (issue 29; `make bench-peers`, `make bench-peers
# PEERS_STORE=redlock|cluster`).
#
# Usage: tests/bench/peers.sh [single|redlock|cluster]
#
# The store: single, one redis-server on a Unix socket; redlock, three
# redis-servers (--redlock); cluster, three masters without replicas
# (redis-cli --cluster create). Two brokers serve each measurement: "on"
# with batches (--redis-batch-max 64, the default), "off" without (0: each
# call alone, as before batches); dflockd on its own port.
#
# Uncontended, each connection on its own lock (lbbench uncontended; dfbench
# -workers C, each worker its own key), at 1, 16, 64 and 256 connections:
# for each, 3 rounds of one window each of on, off and dflockd, in turn;
# the medians are printed with the ratio to dflockd. For the lockbroker
# windows also, per acquire+release cycle: the script calls Redis ran
# (EVALSHA) and every command it counted (those the scripts call inside
# too), the CPU us of Redis (every node) and of the broker (from
# /proc/PID/stat), and for "on" the sizes of its batches (p50, p99 and the
# largest bucket from lockbroker_redis_batch_calls over its windows).
# Then a convoy (lbbench contended --hold-ms 1, 8 and 64 clients over two
# brokers) with batches and without: handoff p50/p99; and 4 brokers on the
# one store at 64 connections each (256 in all), 4 lbbench at once:
# aggregate cycles/s with and without batches. On one redis-server,
# redis-py's Lock too (1 and 8 processes, when python3-redis is there).
#
# dflockd is built from a snapshot: `fetch github:mtingers/dflockd`, then
# sh ../shared/peers/dflockd/build.sh /work/.mirror/mtingers+dflockd/repo \
#     build/peers/dflockd
# (DFLOCKD_DIR elsewhere). Without it the dflockd columns say n/a.
# Knobs: BENCH_SECONDS (window, default 2), PEERS_CONNS (default
# "1 16 64 256"), BENCH_KEEP=1 keeps the temp dir.
set -eu
cd "$(dirname "$0")/../.."
. tests/bench/lib.sh

STORE=${1:-single}
LBD=${LB_BROKER_BIN:-build/lockbrokerd}
LB=build/lbbench
DF=${DFLOCKD_DIR:-build/peers/dflockd}
SECS=${BENCH_SECONDS:-2}
CONNS=${PEERS_CONNS:-1 16 64 256}
bench_need peers.sh "$LBD" "$LB" -- redis-server redis-cli awk curl
have_df=0
[ -x "$DF/dflockd" ] && [ -x "$DF/dfbench" ] && have_df=1
bench_tmp peers
ulimit -n 65536 2>/dev/null || true

base=$((11000 + $$ % 20000)) # below the ephemeral range (32768-)
REDIS_PIDS=""
start_node() { # port [flags]
	np=$1
	shift
	mkdir -p "$tmp/node-$np"
	redis-server --port "$np" --bind 127.0.0.1 --dir "$tmp/node-$np" --save "" --appendonly no \
		--maxclients 20000 --logfile "$tmp/node-$np/log" "$@" &
	echo "redis-$np $!" >>"$PIDS_FILE"
	REDIS_PIDS="$REDIS_PIDS $!"
	wait_ping "$np"
}
NODES=""
case $STORE in
single)
	redis-server --port 0 --unixsocket "$tmp/redis.sock" --save "" --appendonly no \
		--maxclients 20000 --logfile "$tmp/redis.log" &
	echo "redis $!" >>"$PIDS_FILE"
	REDIS_PIDS=$!
	n=0
	until redis-cli -s "$tmp/redis.sock" ping >/dev/null 2>&1; do
		n=$((n + 1)); [ $n -le 200 ] || { echo "peers.sh: redis did not start" >&2; exit 1; }
		sleep 0.05
	done
	STORE_ARGS="--redis unix://$tmp/redis.sock"
	;;
redlock)
	list=""
	for k in 0 1 2; do
		p=$((base + k)); start_node "$p"; NODES="$NODES $p"
		list="$list${list:+,}redis://127.0.0.1:$p"
	done
	STORE_ARGS="--redlock $list"
	;;
cluster)
	seeds=""
	for k in 0 1 2; do
		p=$((base + k)); start_node "$p" --cluster-enabled yes --cluster-config-file "$tmp/node-$p/nodes.conf"
		NODES="$NODES $p"; seeds="$seeds 127.0.0.1:$p"
	done
	# shellcheck disable=SC2086
	redis-cli --cluster create $seeds --cluster-replicas 0 --cluster-yes >"$tmp/create.log" 2>&1 || {
		echo "peers.sh: redis-cli --cluster create failed" >&2; cat "$tmp/create.log" >&2; exit 1; }
	n=0
	until redis-cli -p "$base" cluster info 2>/dev/null | grep -q 'cluster_state:ok'; do
		n=$((n + 1)); [ $n -le 200 ] || { echo "peers.sh: the cluster is not ok" >&2; exit 1; }
		sleep 0.1
	done
	STORE_ARGS="--redis cluster://127.0.0.1:$base"
	;;
*) echo "usage: peers.sh [single|redlock|cluster]" >&2; exit 2 ;;
esac

rcli() { # args: on every node (single: the socket)
	if [ "$STORE" = single ]; then redis-cli -s "$tmp/redis.sock" "$@"; else
		for p in $NODES; do redis-cli -p "$p" "$@"; done; fi
}
# "evalsha all": commands Redis counted, summed over the nodes
redis_calls() {
	rcli info commandstats | tr -d '\r' | awk -F'[:=,]' '
		/^cmdstat_/ { all += $3; if ($1 == "cmdstat_evalsha") ev += $3 }
		END { printf "%d %d\n", ev, all }'
}
ticks() { # pids: utime+stime, summed (clock ticks)
	t=0
	for p in "$@"; do t=$((t + $(awk '{ print $14 + $15 }' "/proc/$p/stat"))); done
	echo "$t"
}
HZ=$(getconf CLK_TCK)

port=$((base + 100))
start_broker() { # name batch-max
	lp=$port mp=$((port + 1)); port=$((port + 2))
	# shellcheck disable=SC2086
	"$LBD" $STORE_ARGS --listen "tcp://127.0.0.1:$lp" --metrics "tcp://127.0.0.1:$mp" \
		--log-level warn --max-connections 20000 --redis-batch-max "$2" 2>"$tmp/$1.log" &
	echo "$1 $!" >>"$PIDS_FILE"
	eval "EP_$1=tcp://127.0.0.1:$lp MP_$1=$mp PID_$1=$!"
}
start_broker on 64
start_broker off 0
start_broker on2 64
start_broker off2 0
"$LB" ready -e "$EP_on" -e "$EP_off" -e "$EP_on2" -e "$EP_off2" -d 15 >/dev/null
if [ $have_df = 1 ]; then
	dfport=$port; port=$((port + 1))
	"$DF/dflockd" --port "$dfport" >"$tmp/dflockd.log" 2>&1 &
	echo "dflockd $!" >>"$PIDS_FILE"
	sleep 0.5
fi

batch_hist() { # metrics port: "le count" lines of lockbroker_redis_batch_calls
	curl -s "http://127.0.0.1:$1/metrics" | awk -F'[{}" ]' '/^lockbroker_redis_batch_calls_bucket/ { print $3, $NF }'
}
# p50 p99 max of the batch sizes between two histogram dumps
batch_quantiles() { # before after
	paste -d ' ' "$1" "$2" | awk '{ le[NR] = $1; c[NR] = $4 - $2 } END {
		n = c[NR]; if (n == 0) { print "n/a n/a n/a"; exit }
		p50 = p99 = mx = ""
		for (k = 1; k <= NR; k++) {
			if (p50 == "" && c[k] >= n * 0.5) p50 = le[k]
			if (p99 == "" && c[k] >= n * 0.99) p99 = le[k]
			if (mx == "" && c[k] == n) mx = le[k]
		}
		print p50, p99, mx }'
}

# One lockbroker window: prints "cycles/s evalsha/cycle calls/cycle
# redis_us/cycle broker_us/cycle".
lb_window() { # name conns
	eval "ep=\$EP_$1 bp=\$PID_$1"
	set -- $(redis_calls)
	e0=$1 a0=$2
	r0=$(ticks $REDIS_PIDS) b0=$(ticks "$bp")
	cps=$("$LB" uncontended -e "$ep" -c "$conns" -d "$SECS" --reps 1 --warmup 0.3 --label u 2>/dev/null |
		awk '/cycles_per_s/ { print $2; exit }')
	set -- $(redis_calls)
	r1=$(ticks $REDIS_PIDS) b1=$(ticks "$bp")
	# counts cover the warmup too: per cycle over (SECS + 0.3) s
	awk -v c="$cps" -v s="$SECS" -v de="$(($1 - e0))" -v da="$(($2 - a0))" \
		-v dr="$((r1 - r0))" -v db="$((b1 - b0))" -v hz="$HZ" 'BEGIN {
		n = c * (s + 0.3); if (n <= 0) { print "n/a n/a n/a n/a n/a"; exit }
		printf "%s %.3f %.2f %.1f %.1f\n", c, de / n, da / n, dr / hz * 1e6 / n, db / hz * 1e6 / n }'
}
df_window() { # conns
	[ $have_df = 1 ] || { echo n/a; return; }
	if [ "$1" = 1 ]; then ops=$((10000 * SECS)); else ops=$((50000 * SECS)); fi
	rounds=$((ops / $1)); [ $rounds -ge 50 ] || rounds=50
	"$DF/dfbench" -servers "127.0.0.1:$dfport" -workers "$1" -rounds "$rounds" 2>&1 |
		awk '/throughput/ { print $2; exit }'
}
col() { # file column: the median
	awk -v k="$2" '{ print $k }' "$1" | grep -v n/a | median
}

echo "# peers.sh: store $STORE; lockbroker with batches (on) and without (off) vs dflockd; $(nproc) cores; windows of ${SECS} s, 3 rounds, medians"
echo "# conns | on cycles/s | off cycles/s | dflockd ops/s | on/df | off/df | on: EVALSHA/cycle, Redis cmds/cycle, Redis us/cycle, broker us/cycle | off: the same | on: batch p50/p99/max"
for conns in $CONNS; do
	: >"$tmp/on.$conns"; : >"$tmp/off.$conns"; : >"$tmp/df.$conns"
	batch_hist "$MP_on" >"$tmp/h0"
	for round in 1 2 3; do
		lb_window on "$conns" >>"$tmp/on.$conns"
		lb_window off "$conns" >>"$tmp/off.$conns"
		df_window "$conns" >>"$tmp/df.$conns"
	done
	batch_hist "$MP_on" >"$tmp/h1"
	on=$(col "$tmp/on.$conns" 1) off=$(col "$tmp/off.$conns" 1) df=$(col "$tmp/df.$conns" 1)
	emit "$STORE c=$conns | $on | $off | $df | $(ratio "$on" "$df") | $(ratio "$off" "$df") | $(col "$tmp/on.$conns" 2) $(col "$tmp/on.$conns" 3) $(col "$tmp/on.$conns" 4) $(col "$tmp/on.$conns" 5) | $(col "$tmp/off.$conns" 2) $(col "$tmp/off.$conns" 3) $(col "$tmp/off.$conns" 4) $(col "$tmp/off.$conns" 5) | $(batch_quantiles "$tmp/h0" "$tmp/h1" | tr ' ' /)"
done

if [ "$STORE" = single ] && ! /usr/bin/python3 -c 'import redis' 2>/dev/null; then
	SUDO=""
	[ "$(id -u)" -eq 0 ] || SUDO=sudo
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3-redis >/dev/null 2>&1 || true
fi
if [ "$STORE" = single ] && /usr/bin/python3 -c 'import redis' 2>/dev/null; then
	echo "# redis-py's Lock on the same redis-server, uncontended, acquire(blocking=False) + release, 3 windows, medians"
	for procs in 1 8; do
		: >"$tmp/py.$procs"
		for round in 1 2 3; do
			/usr/bin/python3 tests/bench/redis_py_lock.py --socket "$tmp/redis.sock" \
				--redis-pid "$REDIS_PIDS" --seconds "$SECS" --shape uncontended --procs "$procs" \
				--label py 2>/dev/null | awk '/cycles_per_s/ { print $2; exit }' >>"$tmp/py.$procs"
		done
		emit "$STORE redis-py procs=$procs | $(median <"$tmp/py.$procs") cycles/s"
	done
fi

echo "# convoy: one lock, --hold-ms 1, clients over two brokers: handoff p50/p99 us, medians of 3 rounds"
for clients in 8 64; do
	: >"$tmp/cv.on"; : >"$tmp/cv.off"
	for round in 1 2 3; do
		for mode in on off; do
			eval "e1=\$EP_$mode e2=\$EP_${mode}2"
			"$LB" contended -e "$e1" -e "$e2" -c "$clients" -d "$SECS" --reps 1 --warmup 0.3 \
				--hold-ms 1 --label cv 2>/dev/null |
				awk '/handoff_p50_us/ { p = $2 } /handoff_p99_us/ { q = $2 } END { print p, q }' >>"$tmp/cv.$mode"
		done
	done
	emit "$STORE convoy c=$clients | on p50 $(col "$tmp/cv.on" 1) p99 $(col "$tmp/cv.on" 2) | off p50 $(col "$tmp/cv.off" 1) p99 $(col "$tmp/cv.off" 2)"
done

echo "# 4 brokers on the one store, 64 connections each (256), 4 lbbench at once: aggregate cycles/s, medians of 3 rounds"
start_broker on3 64; start_broker on4 64; start_broker off3 0; start_broker off4 0
"$LB" ready -e "$EP_on3" -e "$EP_on4" -e "$EP_off3" -e "$EP_off4" -d 15 >/dev/null
: >"$tmp/agg.on"; : >"$tmp/agg.off"
for round in 1 2 3; do
	for mode in on off; do
		jobs=""
		for b in "$mode" "${mode}2" "${mode}3" "${mode}4"; do
			eval "ep=\$EP_$b"
			"$LB" uncontended -e "$ep" -c 64 -d "$SECS" --reps 1 --warmup 0.3 --label u \
				>"$tmp/agg.$b.out" 2>/dev/null &
			jobs="$jobs $!"
		done
		for j in $jobs; do wait "$j" || true; done
		cat "$tmp"/agg."$mode"*.out | awk '/cycles_per_s/ { s += $2 } END { print s }' >>"$tmp/agg.$mode"
	done
done
on=$(median <"$tmp/agg.on") off=$(median <"$tmp/agg.off")
emit "$STORE 4 brokers x 64 | on $on | off $off | on/off $(ratio "$on" "$off")"
