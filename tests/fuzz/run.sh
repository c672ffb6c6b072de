#!/bin/sh
# tests/fuzz/run.sh - runs lua_model_fuzz.py over SEEDS seeds of STEPS calls
# against a private redis-server (Unix socket, temp dir) with the scripts
# assembled exactly as the build embeds them. Not part of make test: run
# it after changing lua/ (make fuzz).
# Usage: tests/fuzz/run.sh [SEEDS] [STEPS]
set -eu
seeds=${1:-20}
steps=${2:-2500}
top=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
cleanup() {
	[ -f "$tmp/redis.pid" ] && kill "$(cat "$tmp/redis.pid")" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT INT TERM
redis-server --port 0 --unixsocket "$tmp/redis.sock" --save "" --appendonly no \
	--dir "$tmp" --daemonize yes --pidfile "$tmp/redis.pid" >/dev/null
i=0
while [ ! -S "$tmp/redis.sock" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
for n in acquire release extend reenter heartbeat withdraw inspect proclaim; do
	sh "$top/deploy/embed-lua.sh" --text "$top/lua/lib/prelude.lua" "$top/lua/$n.lua" >"$tmp/$n.lua"
done
for n in batch batch_slots; do
	sh "$top/deploy/embed-lua.sh" --text "$top/lua/lib/prelude.lua" "$top/lua/$n.lua" >"$tmp/$n.lua"
done
fails=0
s=1
while [ $s -le "$seeds" ]; do
	# Each seed alone and inside batches (lua/batch.lua), as the broker
	# sends the calls of one loop turn, and as it sends them to a Redis
	# Cluster master (lua/batch_slots.lua: keys passed as args).
	for mode in alone batched slots; do
		if ! python3 "$top/tests/fuzz/lua_model_fuzz.py" "$tmp/redis.sock" "$tmp" "$s" "$steps" "$mode"; then
			fails=$((fails + 1))
		fi
	done
	s=$((s + 1))
done
echo "lua_model_fuzz: $seeds seeds x $steps calls, alone, batched and batched by slots, $fails runs failed"
[ "$fails" -eq 0 ]
