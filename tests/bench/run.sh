#!/bin/sh
# tests/bench/run.sh - one run of the lockbroker benchmark suite (issue 6).
# `make bench` builds build/lockbrokerd and build/lbbench, then runs this.
#
# It starts, in a private temp dir, one redis-server (Unix socket only) and
# two release-build brokers on it (A: Unix socket + a free TCP port, B: Unix
# socket), runs every scenario of build/lbbench and the peers (redis-benchmark
# on the broker's own scripts, redis-py's Lock) against that same Redis, one
# after the other, prints "name: value unit" lines as it goes and a summary
# table with the ratios of the issue's targets at the end. Everything it
# starts is stopped on exit (trap), also on Ctrl-C or failure.
#
# Knobs (environment):
#   BENCH_SECONDS  seconds per scenario (default 5): 3 windows of 0.6 x this,
#                  the median printed; BENCH_QUICK: one window of this (default 1)
#   BENCH_QUICK=1  short smoke run: one window per scenario, watchdog scale
#                  1,000 connections / 10,000 leases / 15 s (else 10,000 /
#                  100,000 / 60 s)
#   BENCH_KEEP=1   keep the temp dir (logs, results.txt)
set -eu

top=$(cd "$(dirname "$0")/../.." && pwd)
LBD="$top/build/lockbrokerd"
LB="$top/build/lbbench"
PY=/usr/bin/python3
QUICK=${BENCH_QUICK:-0}
[ "$QUICK" = 0 ] || [ "$QUICK" = 1 ] || QUICK=1

if [ "$QUICK" = 1 ]; then
	SECS=${BENCH_SECONDS:-1}
	REPS=1
	WIN=$SECS
	WD_CONNS=1000
	WD_SECS=15
else
	SECS=${BENCH_SECONDS:-5}
	REPS=3
	WIN=$(awk -v s="$SECS" 'BEGIN { printf "%.2f", s * 0.6 }')
	WD_CONNS=10000
	WD_SECS=60
fi
WD_LEASES=10
PYSECS=$(awk -v w="$WIN" -v r="$REPS" 'BEGIN { printf "%.2f", w * r }')

for f in "$LBD" "$LB"; do
	[ -x "$f" ] || { echo "run.sh: $f is missing: run 'make bench'" >&2; exit 1; }
done
for t in redis-server redis-cli redis-benchmark awk; do
	command -v "$t" >/dev/null 2>&1 || { echo "run.sh: $t is missing (make deps)" >&2; exit 1; }
done

# The redis-py peer needs Debian's python3-redis (for /usr/bin/python3).
if ! "$PY" -c 'import redis' >/dev/null 2>&1; then
	echo "run.sh: installing python3-redis for the redis-py peer" >&2
	SUDO=""
	[ "$(id -u)" -eq 0 ] || SUDO=sudo
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3-redis >/dev/null 2>&1 || true
fi
HAVE_PY=0
"$PY" -c 'import redis' >/dev/null 2>&1 && HAVE_PY=1

# 10,000 connections need 10,000+ descriptors in lbbench and in the broker.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
NOFILE=$(ulimit -n)
if [ "$NOFILE" != unlimited ] && [ "$NOFILE" -lt $((WD_CONNS + 200)) ]; then
	WD_CONNS=$((NOFILE - 200))
	echo "run.sh: fd limit $NOFILE: watchdog scale reduced to $WD_CONNS connections" >&2
fi

tmp=$(mktemp -d /tmp/lbbench.XXXXXX)
res="$tmp/results.txt"
: >"$res"
redis_pid=""
a_pid=""
b_pid=""
failures=0

. "$top/tests/bench/lib.sh" # stop_pid, ratio
cleanup() {
	trap - INT TERM EXIT
	stop_pid "$a_pid"
	stop_pid "$b_pid"
	stop_pid "$redis_pid"
	if [ "${BENCH_KEEP:-0}" = 1 ]; then
		echo "run.sh: kept $tmp" >&2
	else
		rm -rf "$tmp"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- the private Redis and the two brokers ----------------------------------
redis-server --port 0 --unixsocket "$tmp/redis.sock" --unixsocketperm 700 \
	--dir "$tmp" --save "" --appendonly no --daemonize no \
	--maxclients 20000 --logfile "$tmp/redis.log" &
redis_pid=$!
n=0
until redis-cli -s "$tmp/redis.sock" ping >/dev/null 2>&1; do
	n=$((n + 1))
	[ $n -le 100 ] || { echo "run.sh: redis-server did not start" >&2; cat "$tmp/redis.log" >&2; exit 1; }
	sleep 0.05
done

PORT_A=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
BROKER_FLAGS="--redis unix://$tmp/redis.sock --log-level warn --max-connections 20000 --shutdown-grace-ms 1000"
# shellcheck disable=SC2086
"$LBD" $BROKER_FLAGS --listen "unix://$tmp/a.sock" --listen "tcp://127.0.0.1:$PORT_A" 2>"$tmp/brokerA.log" &
a_pid=$!
# shellcheck disable=SC2086
"$LBD" $BROKER_FLAGS --listen "unix://$tmp/b.sock" 2>"$tmp/brokerB.log" &
b_pid=$!
EA="unix://$tmp/a.sock"
EB="unix://$tmp/b.sock"
ETA="tcp://127.0.0.1:$PORT_A"
if ! "$LB" ready -e "$EA" -e "$ETA" -e "$EB" -d 15; then
	echo "run.sh: the brokers did not answer" >&2
	tail -5 "$tmp/brokerA.log" "$tmp/brokerB.log" >&2
	exit 1
fi

# The broker's own scripts, exactly as deploy/embed-lua.sh builds them
# (byte for byte, so the SHA is the broker's).
sh "$top/deploy/embed-lua.sh" --text "$top/lua/lib/prelude.lua" "$top/lua/acquire.lua" >"$tmp/acquire.lua"
sh "$top/deploy/embed-lua.sh" --text "$top/lua/lib/prelude.lua" "$top/lua/release.lua" >"$tmp/release.lua"
ACQ_SHA=$(redis-cli -s "$tmp/redis.sock" -x SCRIPT LOAD <"$tmp/acquire.lua")
REL_SHA=$(redis-cli -s "$tmp/redis.sock" -x SCRIPT LOAD <"$tmp/release.lua")

PIDS="--pid brokerA=$a_pid --pid brokerB=$b_pid --pid redis=$redis_pid --pid lbbench=0"
COMMON="--redis-unix $tmp/redis.sock -d $WIN --reps $REPS"

# ---- helpers -------------------------------------------------------------------
emit() { # prints a result line and records it
	echo "$1"
	echo "$1" >>"$res"
}
runb() { # runs one measurement; its stdout lines are results
	if "$@" >"$tmp/out" 2>"$tmp/err"; then :; else
		echo "run.sh: FAILED ($?): $*" >&2
		failures=$((failures + 1))
	fi
	cat "$tmp/err" >&2
	cat "$tmp/out"
	cat "$tmp/out" >>"$res"
}
val() { # the value of a result line
	awk -v k="$1:" '$1 == k { print $2; exit }' "$res"
}
section() {
	echo
	echo "## $*"
}

echo "# lockbroker benchmark ($(date -u '+%Y-%m-%d %H:%M UTC'))"
echo "# machine: $(nproc) cpus, $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo), $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)"
echo "# $(redis-server --version | cut -d' ' -f1-3), $("$LBD" --version 2>&1 | head -1)"
echo "# tree: $(git -C "$top" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$top" status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo ' (with local changes)')"
echo "# load average at start: $(cut -d" " -f1-3 /proc/loadavg)"
echo "# mode: $([ "$QUICK" = 1 ] && echo quick || echo full), $REPS x $WIN s windows per scenario (median printed), fd limit $NOFILE"
echo "# two brokers (A: $EA + $ETA, B: $EB) on one redis-server ($tmp/redis.sock)"

# ---- broker overhead: 1 connection through the broker vs direct EVALSHA -------
section "overhead: acquire latency at 1 connection, broker vs direct EVALSHA (hiredis sync)"
# shellcheck disable=SC2086
runb "$LB" overhead -e "$EA" $COMMON $PIDS --acquire-sha "$ACQ_SHA" --release-sha "$REL_SHA" --label overhead

# ---- peer: the raw scripts -----------------------------------------------------
section "peer: the broker's acquire/release scripts driven directly"
# lbbench rawlua: the same shape as uncontended@64 (64 connections, own lock
# names, acquire then release with the token it took) without the broker.
# shellcheck disable=SC2086
runb "$LB" rawlua $COMMON --pid redis=$redis_pid --pid lbbench=0 -c 64 --acquire-sha "$ACQ_SHA" --release-sha "$REL_SHA" --label rawlua.c64

# redis-benchmark (-c 64 -P 16): it replaces every __rand_int__ with its own
# random number, so the 7 keys of one call name 7 different fresh locks: the
# acquire stream runs the grant path on empty keys (the fast path, plus the
# check for model keys that a missing header costs, plus creating the key:
# more than an uncontended acquire of a lock used before). It cannot pass a token from
# an acquire to a release, so the release stream releases one re-entrant
# solo holder seeded with a count of 10^9: each call is the fast release's
# HMGET, TIME and one write (HSET of the count instead of HDEL of 'o'), the
# same calls as a real last release. The cycle rate is
# 1 / (1/acquire + 1/release).
KEYS7=""
for s in :h :i '' :q :w :d :s; do KEYS7="$KEYS7 lb:{rb:__rand_int__}$s"; done
HELD7=""
for s in :h :i '' :q :w :d :s; do HELD7="$HELD7 lb:{rb:held}$s"; done
# shellcheck disable=SC2086
redis-cli -s "$tmp/redis.sock" EVALSHA "$ACQ_SHA" 7 $HELD7 60000 benchrb lb: rb:held 5000 0 rbholder x 0 3600000 '' '' 0 0 1 10000 >/dev/null
redis-cli -s "$tmp/redis.sock" HSET "lb:{rb:held}" c 1000000000 >/dev/null
rb_rate() { # n, then the command: prints requests/s
	n=$1
	shift
	redis-benchmark -s "$tmp/redis.sock" -c 64 -P 16 -r 100000000 -n "$n" --csv "$@" 2>/dev/null |
		awk -F'","' 'END { gsub(/"/, "", $2); print $2 + 0 }'
}
rb_median() { # name, args...: runs REPS times, prints the median rate
	name=$1
	shift
	rates=""
	r=0
	while [ $r -lt "$REPS" ]; do
		# shellcheck disable=SC2086
		rates="$rates $(rb_rate "$RB_N" "$@")"
		r=$((r + 1))
	done
	echo "$rates" | tr ' ' '\n' | grep -v '^$' | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
# size -n for about one window: calibrate on 20,000 calls
# shellcheck disable=SC2086
cal=$(redis-benchmark -s "$tmp/redis.sock" -c 64 -P 16 -r 100000000 -n 20000 --csv \
	EVALSHA "$ACQ_SHA" 7 $KEYS7 60000 benchrb lb: rb:__rand_int__ 5000 0 __rand_int__ x 0 30000 '' '' 0 0 1 10000 2>/dev/null |
	awk -F'","' 'END { gsub(/"/, "", $2); print $2 + 0 }')
RB_N=$(awk -v r="$cal" -v w="$WIN" 'BEGIN { n = int(r * w); if (n < 20000) n = 20000; print n }')
# shellcheck disable=SC2086
acq_rate=$(rb_median acq EVALSHA "$ACQ_SHA" 7 $KEYS7 60000 benchrb lb: rb:__rand_int__ 5000 0 __rand_int__ x 0 30000 '' '' 0 0 1 10000)
# shellcheck disable=SC2086
rel_rate=$(rb_median rel EVALSHA "$REL_SHA" 7 $HELD7 60000 benchrb lb: rb:held 5000 0 rbholder 0)
# shellcheck disable=SC2086
if [ "$(redis-cli -s "$tmp/redis.sock" HGET "lb:{rb:held}" o)" != rbholder ]; then
	echo "run.sh: the seeded holder for the release stream is gone" >&2
	rel_rate=0
fi
emit "redisbench.requests_per_run: $RB_N calls"
emit "redisbench.acquire_per_s: $acq_rate calls/s"
emit "redisbench.release_per_s: $rel_rate calls/s"
emit "redisbench.cycles_per_s: $(awk -v a="$acq_rate" -v r="$rel_rate" 'BEGIN { if (a > 0 && r > 0) printf "%.1f", 1 / (1 / a + 1 / r); else print "n/a" }') cycles/s"

# ---- uncontended ----------------------------------------------------------------
for c in 1 16 64 256; do
	section "uncontended: $c connections to broker A, acquire(wait_ms 0) + release"
	# shellcheck disable=SC2086
	runb "$LB" uncontended -e "$EA" $COMMON $PIDS -c $c --label uncontended.c$c
done

# The same shape with two pings per cycle instead of acquire + release: what a
# broker round trip costs with no Redis behind it. No grant path that goes
# through this broker, even one that never asked Redis, is faster than this.
section "pingfloor: 64 connections to broker A, ping + ping (no Redis)"
# shellcheck disable=SC2086
runb "$LB" uncontended --ping -e "$EA" $COMMON $PIDS -c 64 --label pingfloor.c64

# ---- contended: convoy, hot loop, rw, semaphore over two brokers ---------------
for m in exclusive rw sem; do
	for shape in convoy hot; do
		hold=1
		[ $shape = hot ] && hold=0
		for c in 8 64; do
			label=$shape.c$c
			[ $m = exclusive ] || label=$m.$shape.c$c
			section "$label: $c clients on one lock ($m), half on each broker, hold $hold ms"
			# shellcheck disable=SC2086
			runb "$LB" contended -e "$EA" -e "$EB" $COMMON $PIDS -c $c --hold-ms $hold --mode $m --label $label
		done
	done
done

section "hot.unfair.c8: the hot loop with fair:false (barging allowed)"
# shellcheck disable=SC2086
runb "$LB" contended -e "$EA" -e "$EB" $COMMON $PIDS -c 8 --hold-ms 0 --unfair --label hot.unfair.c8

# ---- peer: redis-py's Lock -----------------------------------------------------
if [ "$HAVE_PY" = 1 ]; then
	PYRUN="$PY $top/tests/bench/redis_py_lock.py --socket $tmp/redis.sock --redis-pid $redis_pid --seconds $PYSECS"
	best=0
	for p in 1 2 4 8; do
		section "redis-py uncontended: $p processes, acquire(blocking=False) + release"
		# shellcheck disable=SC2086
		runb $PYRUN --shape uncontended --procs $p --label redispy.uncontended.p$p
		best=$(awk -v b="$best" -v v="$(val redispy.uncontended.p$p.cycles_per_s)" 'BEGIN { print (v + 0 > b + 0) ? v : b }')
	done
	emit "redispy.uncontended.best_cycles_per_s: $best cycles/s"
	for shape in convoy hot; do
		for sl in 0.1 0.001; do
			section "redis-py $shape: 8 processes on one lock, sleep=$sl"
			# shellcheck disable=SC2086
			runb $PYRUN --shape $shape --procs 8 --sleep $sl --hold-ms 1 --label redispy.$shape.c8.sleep$sl
		done
	done
else
	echo "run.sh: python3-redis unavailable: redis-py peer skipped" >&2
fi

# ---- watchdog scale -------------------------------------------------------------
section "watchdog: $WD_CONNS connections x $WD_LEASES leases on broker A (Unix + TCP), ttl 30000, $WD_SECS s"
# shellcheck disable=SC2086
runb "$LB" watchdog -e "$EA" -e "$ETA" --redis-unix "$tmp/redis.sock" --pid brokerA=$a_pid --pid redis=$redis_pid \
	-c "$WD_CONNS" --leases "$WD_LEASES" --ttl-ms 30000 -d "$WD_SECS" --reps 1 --label watchdog

# ---- summary ------------------------------------------------------------------------
un64=$(val uncontended.c64.cycles_per_s)
rbc=$(val redisbench.cycles_per_s)
raw=$(val rawlua.c64.cycles_per_s)
pyb=$(val redispy.uncontended.best_cycles_per_s)
emit "ratio.uncontended_c64_vs_redisbench: $(ratio "$un64" "$rbc") x"
emit "ratio.uncontended_c64_vs_rawlua_c64: $(ratio "$un64" "$raw") x"
emit "ratio.uncontended_c64_vs_redispy_best: $(ratio "$un64" "$pyb") x"
for c in 8 64; do
	emit "ratio.convoy_c${c}_longest_wait_vs_clients_x_hold: $(ratio "$(val convoy.c$c.wait_max_ms)" "$(val convoy.c$c.clients_x_hold_ms)") x"
done

# And the bound of the whole machine: the cycles/s uncontended@64 would reach
# if both cores ran at 100 % at the CPU each cycle cost in it (both brokers,
# Redis and lbbench, which share the 2 cores).
cpusum=$(awk -v a="$(val uncontended.c64.cpu_brokerA)" -v b="$(val uncontended.c64.cpu_brokerB)" \
	-v r="$(val uncontended.c64.cpu_redis)" -v l="$(val uncontended.c64.cpu_lbbench)" 'BEGIN { print a + b + r + l }')
cores=$(awk -v u="$un64" -v c="$cpusum" -v n="$(nproc)" 'BEGIN {
	if (u == "" || c + 0 <= 0) print "n/a"; else printf "%.0f\n", u * n * 100 / c }')
emit "bound.uncontended_c64_cpu_sum: $cpusum %"
emit "bound.uncontended_c64_all_cores_busy: $cores cycles/s"

row() { # what, lockbroker, peer, ratio, target, verdict
	printf '| %-46s | %-14s | %-22s | %-7s | %-9s | %-5s |\n' "$1" "$2" "$3" "$4" "$5" "$6"
}
check() { # value op target
	awk -v v="$1" -v op="$2" -v t="$3" 'BEGIN {
		if (v == "" || v == "n/a") { print "-"; exit }
		ok = (op == "<=") ? (v + 0 <= t + 0) : (op == ">=") ? (v + 0 >= t + 0) : (v + 0 == t + 0)
		print ok ? "PASS" : "MISS" }'
}
us2ms() { awk -v v="$1" 'BEGIN { if (v == "" || v == "n/a") print "n/a"; else printf "%.3f\n", v / 1000 }'; }

section "summary (lockbroker vs peers; targets of issue 6)"
row "metric" "lockbroker" "peer" "ratio" "target" "check"
row "----------------------------------------------" "--------------" "----------------------" "-------" "---------" "-----"
r=$(ratio "$un64" "$rbc")
row "uncontended cycles/s @64 vs redis-benchmark" "$un64" "$rbc (raw Lua)" "$r" ">= 0.50" "$(check "$r" '>=' 0.5)"
r=$(ratio "$un64" "$raw")
row "uncontended cycles/s @64 vs lbbench rawlua @64" "$un64" "$raw (raw Lua)" "$r" "(info)" "-"
r=$(ratio "$un64" "$pyb")
row "uncontended cycles/s @64 vs redis-py best" "$un64" "$pyb (best of 1-8 p)" "$r" ">= 3" "$(check "$r" '>=' 3)"
# The 3x target against the scripts' own ceiling: above 1, no broker, however
# fast, reaches it without cheaper scripts (see tests/bench/README.md).
py3=$(awk -v p="$pyb" 'BEGIN { if (p == "" || p == "n/a") print "n/a"; else printf "%.0f\n", 3 * p }')
row "3 x redis-py best vs the raw Lua ceiling" "$py3" "$rbc (raw Lua)" "$(ratio "$py3" "$rbc")" "(info)" "-"
# The same from the run itself: the cycles/s uncontended@64 would reach with
# Redis at 100 % of its one core, at the Redis CPU each cycle cost.
cap=$(awk -v u="$un64" -v c="$(val uncontended.c64.cpu_redis)" 'BEGIN {
	if (u == "" || c == "" || c + 0 <= 0) print "n/a"; else printf "%.0f\n", u * 100 / c }')
row "3 x redis-py best vs Redis-bound @64 ceiling" "$py3" "$cap (Redis 100 %)" "$(ratio "$py3" "$cap")" "(info)" "-"
row "3 x redis-py best vs all-cores-busy @64 bound" "$py3" "$cores ($(nproc) cores 100 %)" "$(ratio "$py3" "$cores")" "(info)" "-"
pf=$(val pingfloor.c64.cycles_per_s)
row "3 x redis-py best vs the no-Redis floor @64" "$py3" "$pf (ping + ping)" "$(ratio "$py3" "$pf")" "(info)" "-"
for c in 8 64; do
	p50=$(us2ms "$(val convoy.c$c.handoff_p50_us)")
	p99=$(us2ms "$(val convoy.c$c.handoff_p99_us)")
	py50=$(us2ms "$(val redispy.convoy.c8.sleep0.001.handoff_other_p50_us)")
	py99=$(us2ms "$(val redispy.convoy.c8.sleep0.001.handoff_other_p99_us)")
	[ $c = 8 ] || { py50="-"; py99="-"; }
	row "convoy handoff p50 ms, $c clients, 2 brokers" "$p50" "$py50 (py, to other)" "" "<= 0.3" "$(check "$p50" '<=' 0.3)"
	row "convoy handoff p99 ms, $c clients, 2 brokers" "$p99" "$py99 (py, to other)" "" "<= 1" "$(check "$p99" '<=' 1)"
	f=$(val convoy.c$c.fifo_pct)
	pyf=$(val redispy.convoy.c8.sleep0.001.fifo_pct)
	[ $c = 8 ] || pyf="-"
	row "convoy FIFO % (0.2 ms send races), $c clients" "$f" "$pyf" "" "100" "$(check "$f" '>=' 100)"
	e=$(val convoy.c$c.evalsha_per_acq)
	pye=$(val redispy.convoy.c8.sleep0.001.redis_calls_per_acq)
	[ $c = 8 ] || pye="-"
	row "EVALSHA per contended acquisition, $c clients" "$e" "$pye (all cmds, py)" "" "<= 3" "$(check "$e" '<=' 3)"
	w=$(val convoy.c$c.wait_max_ms)
	ch=$(val convoy.c$c.clients_x_hold_ms)
	row "convoy longest wait ms vs clients x hold, $c" "$w" "$ch (clients x hold)" "$(ratio "$w" "$ch")" "(info)" "-"
done
row "rw convoy handoff p50 / p99 ms, 64 clients" "$(us2ms "$(val rw.convoy.c64.handoff_p50_us)") / $(us2ms "$(val rw.convoy.c64.handoff_p99_us)")" \
	"$(us2ms "$(val rw.convoy.c64.handoff_cross_broker_p50_us)") (cross-broker p50)" "" "(info)" "-"
row "hot loop fair:false grants/s / retake %" "$(val hot.unfair.c8.grants_per_s) / $(val hot.unfair.c8.retake_pct)" \
	"" "" "(info)" "-"
row "hot loop grants/s, 8 clients / retake %" "$(val hot.c8.grants_per_s) / $(val hot.c8.retake_pct)" \
	"$(val redispy.hot.c8.sleep0.001.grants_per_s) / $(val redispy.hot.c8.sleep0.001.retake_pct) (py)" \
	"$(ratio "$(val hot.c8.grants_per_s)" "$(val redispy.hot.c8.sleep0.001.grants_per_s)")" "(info)" "-"
o=$(val overhead.overhead_p50_us)
row "acquire p50 us @1 conn: broker - direct" "+$o" "$(val overhead.direct_acquire_p50_us) (direct)" "" "<= +100" "$(check "$o" '<=' 100)"
rss=$(val watchdog.rss_max_brokerA)
row "watchdog $WD_CONNS conns: broker RSS MiB" "$rss" "" "" "<= 256" "$(check "$rss" '<=' 256)"
cpu=$(val watchdog.cpu_brokerA)
row "watchdog: broker CPU % / Redis CPU %" "$cpu" "$(val watchdog.cpu_redis) (redis)" "" "<= 20" "$(check "$cpu" '<=' 20)"
row "watchdog: renewals/s (expected)" "$(val watchdog.renewals_per_s)" "$(val watchdog.expected_renewals_per_s) (expected)" "" "(info)" "-"
lost=$(val watchdog.lost)
row "watchdog: lost leases" "$lost" "" "" "0" "$(check "$lost" '==' 0)"

if [ "$failures" -gt 0 ]; then
	echo "run.sh: $failures measurement(s) failed" >&2
	exit 1
fi
