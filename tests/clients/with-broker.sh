#!/bin/sh
# tests/clients/with-broker.sh CMD [ARGS...]: runs CMD (a client's test
# suite) against a private redis-server and two lockbrokerd, all on free
# loopback ports in a temp dir, and stops everything after (trap). The
# command's exit status is this script's. CMD finds them in the
# environment:
#
#   LOCKBROKER_URL          tcp://127.0.0.1:P, the broker without auth
#   LOCKBROKER_UNIX_URL     unix://DIR/lb.sock, the same broker
#   LOCKBROKER_AUTH_URL     tcp://127.0.0.1:Q, a broker that wants hello's auth
#   LOCKBROKER_AUTH_SECRET  its secret; LOCKBROKER_AUTH_FILE, the file holding it
#   LOCKBROKER_REDIS_HOST, LOCKBROKER_REDIS_PORT   the redis-server (the
#                           keys of lock NAME are "lb:{NAME}" and
#                           "lb:{NAME}:*": a test deletes them to make a
#                           lease lost behind the broker's back)
#   LOCKBROKER_BIN          the lockbrokerd binary (a test that needs a
#                           broker to die starts its own: --redis
#                           redis://HOST:PORT --listen tcp://127.0.0.1:0 is
#                           refused, so it picks a free port)
#   LOCKBROKER_TMP          the temp dir (removed after)
#
# The broker binary is $LB_BROKER_BIN if set, else build/lockbrokerd.
set -eu

top=$(cd "$(dirname "$0")/../.." && pwd)
bin=${LB_BROKER_BIN:-$top/build/lockbrokerd}
[ -x "$bin" ] || { echo "with-broker.sh: $bin is missing (make build/lockbrokerd)" >&2; exit 2; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/lbclients.XXXXXX")
pids=""
cleanup() {
	trap - INT TERM EXIT
	for p in $pids; do kill -TERM "$p" 2>/dev/null || true; done
	for p in $pids; do wait "$p" 2>/dev/null || true; done
	[ "${LB_KEEP_TMP:-}" = 1 ] && echo "with-broker.sh: kept $tmp" >&2 || rm -rf "$tmp"
}
trap cleanup INT TERM EXIT

free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}
wait_for() { # what command...
	what=$1
	shift
	n=0
	until "$@" >/dev/null 2>&1; do
		n=$((n + 1))
		if [ "$n" -gt 200 ]; then
			echo "with-broker.sh: $what did not start" >&2
			for f in "$tmp"/*.log; do tail -n 20 "$f" >&2; done
			exit 2
		fi
		sleep 0.05
	done
}

rport=$(free_port)
redis-server --port "$rport" --bind 127.0.0.1 --dir "$tmp" --save "" --appendonly no \
	--daemonize no --logfile "$tmp/redis.log" &
pids="$pids $!"
wait_for redis-server redis-cli -p "$rport" ping

secret=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
printf '%s\n' "$secret" >"$tmp/auth.secret"
bport=$(free_port)
aport=$(free_port)
"$bin" --redis "redis://127.0.0.1:$rport" --listen "tcp://127.0.0.1:$bport" \
	--listen "unix://$tmp/lb.sock" --log-level warn 2>"$tmp/broker.log" &
pids="$pids $!"
"$bin" --redis "redis://127.0.0.1:$rport" --listen "tcp://127.0.0.1:$aport" \
	--auth-file "$tmp/auth.secret" --log-level warn 2>"$tmp/broker-auth.log" &
pids="$pids $!"
# Ready when a try is granted (ping says "redis":"up" a little before the
# scripts are loaded and an acquire stops answering unavailable); the
# probe's lease ends with its session.
probe='{"op":"acquire","id":1,"lock":"with-broker:probe","wait_ms":0}'
wait_for lockbrokerd sh -c "printf '%s\n' '$probe' | socat -t1 - TCP:127.0.0.1:$bport | grep -q '\"lease\"'"
probe_auth='{"op":"acquire","id":1,"lock":"with-broker:probe-auth","wait_ms":0}'
wait_for "lockbrokerd (auth)" sh -c "printf '{\"op\":\"hello\",\"id\":0,\"auth\":\"$secret\"}\n%s\n' '$probe_auth' | socat -t1 - TCP:127.0.0.1:$aport | grep -q '\"lease\"'"

export LOCKBROKER_URL="tcp://127.0.0.1:$bport"
export LOCKBROKER_UNIX_URL="unix://$tmp/lb.sock"
export LOCKBROKER_AUTH_URL="tcp://127.0.0.1:$aport"
export LOCKBROKER_AUTH_SECRET="$secret"
export LOCKBROKER_AUTH_FILE="$tmp/auth.secret"
export LOCKBROKER_REDIS_HOST=127.0.0.1
export LOCKBROKER_REDIS_PORT="$rport"
export LOCKBROKER_BIN="$bin"
export LOCKBROKER_TMP="$tmp"
status=0
"$@" || status=$?
exit "$status"
