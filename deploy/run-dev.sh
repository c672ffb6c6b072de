#!/bin/sh
# `make run`: a private redis-server and lockbrokerd in the foreground.
# Redis keeps its socket and data under .run/ (git-ignored) and listens on
# no TCP port; the broker listens on tcp://127.0.0.1:7380 and on
# .run/lockbroker.sock. Ctrl-C stops both.
# Extra broker flags can be given in LOCKBROKERD_FLAGS.
set -eu

top=$(cd "$(dirname "$0")/.." && pwd)
run="$top/.run"
mkdir -p "$run"

redis_pid=""
broker_pid=""
cleanup() {
	trap - INT TERM EXIT
	[ -n "$broker_pid" ] && kill -TERM "$broker_pid" 2>/dev/null && wait "$broker_pid" 2>/dev/null
	[ -n "$redis_pid" ] && kill -TERM "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null
	echo "run-dev: stopped" >&2
}
trap cleanup INT TERM EXIT

rm -f "$run/redis.sock"
redis-server --port 0 --unixsocket "$run/redis.sock" --unixsocketperm 700 \
	--dir "$run" --save "" --appendonly no --daemonize no \
	--logfile "$run/redis.log" &
redis_pid=$!

tries=0
until redis-cli -s "$run/redis.sock" ping >/dev/null 2>&1; do
	tries=$((tries + 1))
	if [ "$tries" -gt 100 ]; then
		echo "run-dev: redis-server did not start; see $run/redis.log" >&2
		exit 1
	fi
	sleep 0.05
done
echo "run-dev: redis-server ready on unix://$run/redis.sock" >&2

# shellcheck disable=SC2086
"$top/build/lockbrokerd" --redis "unix://$run/redis.sock" \
	--listen tcp://127.0.0.1:7380 --listen "unix://$run/lockbroker.sock" \
	${LOCKBROKERD_FLAGS:-} &
broker_pid=$!
echo "run-dev: lockbrokerd on tcp://127.0.0.1:7380 and unix://$run/lockbroker.sock (Ctrl-C stops)" >&2
wait "$broker_pid" || true
broker_pid=""
