#!/bin/sh
# `make run`: a private redis-server and lockbrokerd in the foreground.
# Redis keeps its socket and data under .run/ (git-ignored) and also
# listens on 127.0.0.1:6379 when that port is free (the examples/ programs
# keep their counter there; when another Redis has the port, they use
# that one); the broker listens on tcp://127.0.0.1:7380 and on
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

# 6379 free? (redis-cli fails to connect when nothing listens there)
port=0
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
	port=6379
fi

rm -f "$run/redis.sock"
redis-server --port "$port" --bind 127.0.0.1 --unixsocket "$run/redis.sock" --unixsocketperm 700 \
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
if [ "$port" = 6379 ]; then
	echo "run-dev: redis-server ready on unix://$run/redis.sock and 127.0.0.1:6379" >&2
else
	echo "run-dev: redis-server ready on unix://$run/redis.sock (127.0.0.1:6379 is another Redis's)" >&2
fi

# shellcheck disable=SC2086
"$top/build/lockbrokerd" --redis "unix://$run/redis.sock" \
	--listen tcp://127.0.0.1:7380 --listen "unix://$run/lockbroker.sock" \
	${LOCKBROKERD_FLAGS:-} &
broker_pid=$!
echo "run-dev: lockbrokerd on tcp://127.0.0.1:7380 and unix://$run/lockbroker.sock (Ctrl-C stops)" >&2
wait "$broker_pid" || true
broker_pid=""
