#!/bin/sh
# tests/bench/clients.sh - the five client libraries side by side: for each
# of python, go, node, c and java, uncontended acquire+release cycles/s of
# the client against a raw-socket loop of its own language, from 1 and 16
# threads (goroutines, tasks), against one broker in one run. A benchmark,
# never part of `make test`. Run from the repository's top, under the
# clients' harness (a private Redis and broker; LOCKBROKER_URL):
#
#   make build/lockbrokerd
#   LB_BROKER_BIN=build/lockbrokerd sh tests/clients/with-broker.sh \
#       sh tests/bench/clients.sh [--rounds N] [--seconds S] [--only LIST]
#
#   --rounds N    rounds (default 3); each round runs every client's bench
#                 once, in the order python, go, node, c, java, so that all
#                 five see the same machine
#   --seconds S   length of one measured window (default 2)
#   --only LIST   a comma list of languages (default python,go,node,c,java)
#
# Each round runs each language's own benchmark (clients/*/README.md,
# "Benchmark") with one run of S seconds per variant, and keeps two of its
# variants: "client", the client as the README shows it, one client shared
# by every thread, and "raw", its raw-socket loop:
#
#   python  clients/python/bench.py --runs 1: client (one lockbroker.Client,
#           `with client.lock(name, wait_ms=0)`) and raw (a socket per
#           thread); its client/thread variant runs too but is not kept,
#           and redis-py is left out (LOCKBROKER_REDIS_PORT emptied)
#   go      clients/go/bench (built once into the temp dir with
#           GOCACHE=build/go-cache GOFLAGS=-mod=mod GOPROXY=off)
#           -runs 1 -modes raw,client: client (one Client, Lock + Release)
#           and raw (a connection per goroutine)
#   node    clients/node/bench.js --runs 1 --only acquire,raw: client
#           (client.acquire + lease.release on one connection) and raw (one
#           socket shared by every task, pipelined); withLock is left out,
#           as it turns AsyncLocalStorage on for the rest of the process
#   c       build/clients/c/bench --runs 1 (made if stale): client (one
#           lbc_client_t) and raw (a blocking socket per thread); its
#           client/thread variant runs too but is not kept
#   java    clients/java/build.sh bench --runs 1 (compiled each round into
#           the temp dir, LB_JAVA_BUILD, not build/java): client (one
#           LockBrokerClient, try-with-resources lock) and raw (a socket per
#           thread), after the bench's own 0.5 s warm-up of every variant;
#           its client/thread variant runs too but is not kept
#
# It prints each round's figures as they come, then one table: the median
# over the rounds of client and raw cycles/s, and client/raw (of the
# medians). A language whose toolchain is missing is skipped with a note; a
# failed run is reported with the tail of its output and left out of the
# medians. Exits 0 unless no run at all gave figures (or on a usage error,
# 2). BENCH_KEEP=1 keeps the temp dir (every run's output).
set -eu

top=$(cd "$(dirname "$0")/../.." && pwd)
. "$top/tests/bench/lib.sh" # bench_tmp, median, ratio

ROUNDS=3
SECS=2
ONLY=python,go,node,c,java
usage() {
	echo "usage: sh tests/bench/clients.sh [--rounds N] [--seconds S] [--only python,go,node,c,java]" >&2
	exit 2
}
while [ $# -gt 0 ]; do
	case $1 in
	--rounds) [ $# -ge 2 ] || usage; ROUNDS=$2; shift 2 ;;
	--seconds) [ $# -ge 2 ] || usage; SECS=$2; shift 2 ;;
	--only) [ $# -ge 2 ] || usage; ONLY=$2; shift 2 ;;
	-h | --help) usage ;;
	*) usage ;;
	esac
done
case $ROUNDS in '' | *[!0-9]*) usage ;; esac
[ "$ROUNDS" -ge 1 ] || usage
awk -v s="$SECS" 'BEGIN { exit !(s + 0 > 0 && s + 0 <= 600) }' || usage
LANGS=""
for l in $(echo "$ONLY" | tr ',' ' '); do
	case $l in
	python | go | node | c | java) LANGS="$LANGS $l" ;;
	*) echo "clients.sh: unknown language $l" >&2; usage ;;
	esac
done
[ -n "${LOCKBROKER_URL:-}" ] || {
	echo "clients.sh: LOCKBROKER_URL is not set: run it under tests/clients/with-broker.sh" >&2
	exit 2
}
cd "$top"
bench_tmp clients # $tmp, $res (lines: lang threads client|raw cycles/s round), trap
notes="$tmp/notes"
: >"$notes"
note() {
	echo "clients.sh: $*" >&2
	echo "$*" >>"$notes"
}

# ---- toolchains: a language that cannot run is skipped with a note --------
RUN=""
for l in $LANGS; do
	case $l in
	python)
		command -v python3 >/dev/null 2>&1 || { note "python: skipped, python3 is missing"; continue; }
		;;
	go)
		command -v go >/dev/null 2>&1 || { note "go: skipped, go is missing"; continue; }
		if ! (cd clients/go && env GOCACHE="$top/build/go-cache" GOFLAGS=-mod=mod GOPROXY=off \
			go build -o "$tmp/gobench" ./bench) >"$tmp/go.build.log" 2>&1; then
			tail -n 20 "$tmp/go.build.log" >&2
			note "go: skipped, go build ./bench failed"
			continue
		fi
		;;
	node)
		command -v node >/dev/null 2>&1 || { note "node: skipped, node is missing"; continue; }
		;;
	c)
		if ! make --no-print-directory build/clients/c/bench >"$tmp/c.build.log" 2>&1; then
			tail -n 20 "$tmp/c.build.log" >&2
			note "c: skipped, make build/clients/c/bench failed"
			continue
		fi
		;;
	java)
		if ! command -v javac >/dev/null 2>&1 || ! command -v java >/dev/null 2>&1; then
			note "java: skipped, javac or java is missing"
			continue
		fi
		;;
	esac
	RUN="$RUN $l"
done
[ -n "$RUN" ] || { echo "clients.sh: no client can run" >&2; exit 1; }

version() {
	case $1 in
	python) python3 -c 'import platform; print("Python " + platform.python_version())' ;;
	go) go version | awk '{ print $3 }' ;;
	node) echo "Node $(node --version)" ;;
	c) cc --version | head -n 1 ;;
	java) java -version 2>&1 | head -n 1 ;;
	esac
}

# ---- one bench run: its output in $log, its figures appended to $res ------
# Prints "lang threads variant cycles/s" lines from a bench's output.
parse() { # lang log
	case $1 in
	python | java) # run 1: raw             1 threads      6195 cycles/s ...
		awk -v l="$1" '$1 == "run" && $5 == "threads" && ($3 == "raw" || $3 == "client") { print l, $4, $3, $6 }' "$2" ;;
	go) # raw               1         6195         6195         6195
		awk -v l="$1" '($1 == "raw" || $1 == "client") && $2 ~ /^[0-9]+$/ && NF == 5 { print l, $2, $1, $3 }' "$2" ;;
	node) #   runs, 1 task(s), client acquire: 6195
		awk -v l="$1" '$1 == "runs," && $4 == "raw:" { print l, $2, "raw", $5 }
			$1 == "runs," && $4 == "client" && $5 == "acquire:" { print l, $2, "client", $6 }' "$2" ;;
	c) #    1 thread(s) raw            run 1:      6195 cycles/s ...
		awk -v l="$1" '$2 == "thread(s)" && $4 == "run" && ($3 == "raw" || $3 == "client") { print l, $1, $3, $6 }' "$2" ;;
	esac
}

run_one() { # lang round
	log="$tmp/$1.r$2.log"
	st=0
	case $1 in
	python)
		LOCKBROKER_REDIS_PORT='' python3 clients/python/bench.py --runs 1 --seconds "$SECS" >"$log" 2>&1 || st=$?
		;;
	go)
		"$tmp/gobench" -runs 1 -duration "${SECS}s" -modes raw,client >"$log" 2>&1 || st=$?
		;;
	node)
		node clients/node/bench.js --runs 1 --seconds "$SECS" --only acquire,raw >"$log" 2>&1 || st=$?
		;;
	c)
		build/clients/c/bench --runs 1 --seconds "$SECS" >"$log" 2>&1 || st=$?
		;;
	java)
		LB_JAVA_BUILD="$tmp/java" sh clients/java/build.sh bench --runs 1 --seconds "$SECS" >"$log" 2>&1 || st=$?
		;;
	esac
	got=$(parse "$1" "$log")
	if [ "$st" -ne 0 ] || [ "$(printf '%s\n' "$got" | grep -c .)" -ne 4 ]; then
		tail -n 15 "$log" >&2
		note "$1: round $2 failed (exit $st, $(printf '%s\n' "$got" | grep -c .) of 4 figures): left out"
		return 0
	fi
	printf '%s\n' "$got" | awk -v r="$2" '{ print $0, r }' >>"$res"
	printf '%s\n' "$got" | awk '{ printf "  %-6s %2d threads %-6s %7.0f cycles/s\n", $1, $2, $3, $4 }'
}

# ---- the rounds ------------------------------------------------------------
t0=$(date +%s)
echo "clients.sh: $(date -u '+%Y-%m-%d %H:%M UTC'), $ROUNDS round(s) of $SECS s windows, broker $LOCKBROKER_URL (${LOCKBROKER_BIN:-?})"
echo "machine: $(nproc) CPUs, $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null), load average $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"
for l in $RUN; do
	echo "$l: $(version "$l")"
done
r=1
while [ "$r" -le "$ROUNDS" ]; do
	echo "round $r:"
	for l in $RUN; do
		run_one "$l" "$r"
	done
	r=$((r + 1))
done
t1=$(date +%s)

# ---- the table -------------------------------------------------------------
fig() { # lang threads variant: the median over the rounds, or n/a
	v=$(awk -v l="$1" -v t="$2" -v k="$3" '$1 == l && $2 == t && $3 == k { print $4 }' "$res" | median)
	[ "$v" = n/a ] && echo n/a || printf '%.0f\n' "$v"
}
runs() { # lang threads variant: each round's figure
	awk -v l="$1" -v t="$2" -v k="$3" '$1 == l && $2 == t && $3 == k { printf "%s%.0f", s, $4; s = " " }
		END { if (s == "") printf "-" }' "$res"
}
echo
echo "medians over $ROUNDS round(s), one $SECS s window per variant and round;"
echo "load average at the end $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null); wall time $((t1 - t0)) s"
echo
echo "| language | threads | client cycles/s | raw cycles/s | client/raw |"
echo "|---|---|---|---|---|"
for l in $RUN; do
	for t in 1 16; do
		c=$(fig "$l" "$t" client)
		w=$(fig "$l" "$t" raw)
		echo "| $l | $t | $c | $w | $(ratio "$c" "$w") |"
	done
done
echo
echo "each round (client; raw):"
for l in $RUN; do
	for t in 1 16; do
		printf '  %-6s %2d threads: %s; %s\n' "$l" "$t" "$(runs "$l" "$t" client)" "$(runs "$l" "$t" raw)"
	done
done
if [ -s "$notes" ]; then
	echo
	echo "notes:"
	sed 's/^/  /' "$notes"
fi
[ -s "$res" ] || { echo "clients.sh: no figures at all" >&2; exit 1; }
exit 0
