#!/bin/sh
# tests/bench/ha.sh - the Redis Sentinel benchmarks (issue 16). `make bench`
# runs it after run.sh; `make bench-ha` runs it alone.
#
# In a private temp dir it starts a master and a replica (loopback TCP, no
# persistence) and three sentinels (`redis-server --sentinel`, quorum 2,
# down-after-milliseconds 1000, failover-timeout 3000), and two release-build
# brokers on the sentinel:// URL: W0 (no WAIT) and W1
# (--redis-wait-replicas 1 --redis-wait-ms 500). It prints "name: value unit"
# lines:
#
#   ha.wN.cC.*          build/lbbench uncontended (acquire(wait_ms 0) +
#                       release, C connections) on broker WN; the windows of
#                       W0 and W1 alternate (W0, W1, W0, W1, ...), so both
#                       see the same machine, and the medians are printed
#   ratio.ha.*          W1 / W0 for acquire p50 and p99, and cycles/s
#   ha.failover.*       the master is SIGKILLed with a client probing broker
#                       W0 (acquire wait_ms 0 every 5 ms); the time from the
#                       kill to the first grant, per round and the median of
#                       BENCH_HA_ROUNDS (5). Between rounds the old master
#                       comes back as a replica of the new one.
#
# Knobs: BENCH_SECONDS, BENCH_QUICK as in run.sh; BENCH_HA_ROUNDS; BENCH_KEEP=1
# keeps the temp dir. Everything started is stopped on exit (trap).
set -eu

top=$(cd "$(dirname "$0")/../.." && pwd)
LBD="$top/build/lockbrokerd"
LB="$top/build/lbbench"
PY=/usr/bin/python3
ROUNDS=${BENCH_HA_ROUNDS:-5}
NAME=lbbench

. "$top/tests/bench/lib.sh"
bench_windows 3
bench_need ha.sh "$LBD" "$LB" -- redis-server redis-cli awk "$PY"
bench_tmp ha

free_port() {
	"$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
start_node() { # port [master port]
	mkdir -p "$tmp/node-$1"
	if [ $# -gt 1 ]; then set -- "$1" --replicaof 127.0.0.1 "$2"; fi
	port=$1
	shift
	redis-server --port "$port" --bind 127.0.0.1 --unixsocket "$tmp/node-$port.sock" \
		--dir "$tmp/node-$port" --save "" --appendonly no --daemonize no \
		--logfile "$tmp/node-$port.log" "$@" &
	echo "node-$port $!" >>"$PIDS_FILE"
	wait_ping "$port"
}
sentinel_master() { # sentinel port: the master port it names
	redis-cli -p "$1" SENTINEL get-master-addr-by-name "$NAME" 2>/dev/null | sed -n 2p
}

N1=$(free_port)
N2=$(free_port)
start_node "$N1"
start_node "$N2" "$N1"
SENTINELS=""
URL_HOSTS=""
for i in 1 2 3; do
	p=$(free_port)
	mkdir -p "$tmp/sentinel-$i"
	cat >"$tmp/sentinel-$i/sentinel.conf" <<EOF
port $p
bind 127.0.0.1
dir $tmp/sentinel-$i
sentinel monitor $NAME 127.0.0.1 $N1 2
sentinel down-after-milliseconds $NAME 1000
sentinel failover-timeout $NAME 3000
sentinel parallel-syncs $NAME 1
EOF
	redis-server "$tmp/sentinel-$i/sentinel.conf" --sentinel --logfile "$tmp/sentinel-$i.log" &
	echo "sentinel-$i $!" >>"$PIDS_FILE"
	SENTINELS="$SENTINELS $p"
	URL_HOSTS="$URL_HOSTS${URL_HOSTS:+,}127.0.0.1:$p"
done
for p in $SENTINELS; do wait_ping "$p"; done

# Healthy: every sentinel names master m, knows 2 other sentinels and sees
# the other node as a replica that is not down, and m has that replica online.
wait_healthy() { # timeout s
	end=$(($(date +%s) + $1))
	while :; do
		ok=1
		m=""
		for p in $SENTINELS; do
			mp=$(sentinel_master "$p")
			[ -n "$mp" ] || { ok=0; break; }
			[ -z "$m" ] || [ "$m" = "$mp" ] || ok=0
			m=$mp
			redis-cli -p "$p" SENTINEL master "$NAME" | awk 'prev == "num-other-sentinels" { print; exit } { prev = $0 }' |
				grep -qx 2 || ok=0
			redis-cli -p "$p" SENTINEL replicas "$NAME" | awk 'prev == "flags" { print } { prev = $0 }' |
				grep -qx slave || ok=0
		done
		if [ $ok = 1 ] && redis-cli -p "$m" INFO replication | grep -q 'state=online'; then
			echo "$m"
			return 0
		fi
		[ "$(date +%s)" -lt "$end" ] || { echo "ha.sh: the Sentinel set is not healthy after $1 s" >&2; return 1; }
		sleep 0.1
	done
}
M=$(wait_healthy 60)

SURL="sentinel://$URL_HOSTS/$NAME"
FLAGS="--redis $SURL --log-level warn --max-connections 4096 --shutdown-grace-ms 500"
# shellcheck disable=SC2086
"$LBD" $FLAGS --listen "unix://$tmp/w0.sock" 2>"$tmp/w0.log" &
echo "broker-w0 $!" >>"$PIDS_FILE"
# shellcheck disable=SC2086
"$LBD" $FLAGS --redis-wait-replicas 1 --redis-wait-ms 500 --listen "unix://$tmp/w1.sock" 2>"$tmp/w1.log" &
echo "broker-w1 $!" >>"$PIDS_FILE"
E0="unix://$tmp/w0.sock"
E1="unix://$tmp/w1.sock"
if ! "$LB" ready -e "$E0" -e "$E1" -d 20; then
	echo "ha.sh: the brokers did not answer" >&2
	tail -5 "$tmp/w0.log" "$tmp/w1.log" >&2
	exit 1
fi

echo
echo "# lockbroker HA benchmark ($(date -u '+%Y-%m-%d %H:%M UTC')), $(nproc) cpus, load $(cut -d" " -f1-3 /proc/loadavg)"
echo "# master :$M, replica, 3 sentinels (redis-server --sentinel); W0 no WAIT, W1 --redis-wait-replicas 1 --redis-wait-ms 500"
echo "# $REPS window(s) of $WIN s per broker and size, W0 and W1 alternating; medians"

# ---- acquire latency with and without WAIT ---------------------------------------
failures=0
for c in 1 16; do
	echo
	echo "## uncontended: $c connection(s), acquire(wait_ms 0) + release, W0 vs W1"
	r=1
	while [ $r -le "$REPS" ]; do
		for w in 0 1; do
			eval "ep=\$E$w"
			# shellcheck disable=SC2154
			if ! "$LB" uncontended -e "$ep" -c "$c" -d "$WIN" --reps 1 --warmup 0.3 \
				--pid "broker=$(pid_of broker-w$w)" --pid "redis=$(pid_of node-$M)" \
				--redis-unix "$tmp/node-$M.sock" --label "w$w" >"$tmp/out" 2>"$tmp/err"; then
				echo "ha.sh: lbbench failed on W$w" >&2
				cat "$tmp/err" >&2
				failures=$((failures + 1))
			fi
			sed "s/^w$w\./ha.w$w.c$c.r$r./" "$tmp/out" >>"$tmp/windows"
		done
		r=$((r + 1))
	done
	for w in 0 1; do
		for k in cycles_per_s acquire_p50_us acquire_p99_us cpu_broker cpu_redis; do
			v=$(awk -v p="ha.w$w.c$c.r" -v k=".$k:" 'index($1, p) == 1 && substr($1, length($1) - length(k) + 1) == k { print $2 }' "$tmp/windows" | median)
			emit "ha.w$w.c$c.$k: $v"
		done
	done
	for k in acquire_p50_us acquire_p99_us cycles_per_s; do
		a=$(awk -v k="ha.w1.c$c.$k:" '$1 == k { print $2 }' "$res")
		b=$(awk -v k="ha.w0.c$c.$k:" '$1 == k { print $2 }' "$res")
		emit "ratio.ha.wait1_vs_wait0.c$c.$k: $(ratio "$a" "$b") x"
	done
done

# ---- kill the master: time to the first grant on the new one ------------------------
cat >"$tmp/probe.py" <<'EOF'
# Kills the master (pid argv[2]) and tries a lock through the broker at the
# Unix socket argv[1] every 5 ms; prints the ms from the kill to the grant.
import json, os, signal, socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
f = s.makefile("rwb")
seq = 0
def acquire(lock):
    global seq
    seq += 1
    f.write((json.dumps({"id": seq, "op": "acquire", "lock": lock, "ttl_ms": 10000,
                         "wait_ms": 0}) + "\n").encode())
    f.flush()
    while True:
        m = json.loads(f.readline())
        if m.get("id") == seq:
            return m
if not acquire("probe-warm").get("ok"):
    sys.exit("the broker does not grant before the kill")
t0 = time.monotonic()
os.kill(int(sys.argv[2]), signal.SIGKILL)
n = 0
while time.monotonic() - t0 < 60:
    n += 1
    if acquire("probe-%d-%d" % (os.getpid(), n)).get("ok"):
        print("%.0f" % ((time.monotonic() - t0) * 1000))
        sys.exit(0)
    time.sleep(0.005)
sys.exit("no grant within 60 s of the kill")
EOF
echo
echo "## failover: master SIGKILLed, W0 probed every 5 ms; $ROUNDS rounds"
all=""
round=1
while [ $round -le "$ROUNDS" ]; do
	old=$M
	ms=$("$PY" "$tmp/probe.py" "$tmp/w0.sock" "$(pid_of node-$old)") || {
		echo "ha.sh: round $round: the probe failed" >&2
		failures=$((failures + 1))
		break
	}
	wait "$(pid_of node-$old)" 2>/dev/null || true
	emit "ha.failover.round$round.first_grant_ms: $ms ms"
	all="$all $ms"
	# the old master back, as a replica of the new one
	end=$(($(date +%s) + 60))
	until new=$(sentinel_master "$(echo $SENTINELS | cut -d' ' -f1)") && [ -n "$new" ] && [ "$new" != "$old" ]; do
		[ "$(date +%s)" -lt "$end" ] || { echo "ha.sh: no new master" >&2; exit 1; }
		sleep 0.1
	done
	start_node "$old" "$new"
	M=$(wait_healthy 60)
	round=$((round + 1))
done
emit "ha.failover.first_grant_median_ms: $(echo "$all" | tr ' ' '\n' | grep -v '^$' | median) ms"
emit "ha.failover.rounds: $(echo "$all" | wc -w) rounds"
emit "ha.w0.failovers_seen: $(grep -c 'redis master switched' "$tmp/w0.log" || true) switches"

if [ "$failures" -gt 0 ]; then
	echo "ha.sh: $failures measurement(s) failed" >&2
	exit 1
fi
