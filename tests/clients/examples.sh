#!/bin/sh
# tests/clients/examples.sh: the examples/ programs of every language that
# is there, run at once on one lock ("counter") against the brokers of
# tests/clients/with-broker.sh (run it under that script), half of them
# over TCP and half over the Unix socket. Each increments the counter in
# Redis under the lock and checks the fences; the counter must end at the
# sum of their iterations exactly, and every one must exit 0.
set -eu

top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
: "${LOCKBROKER_URL:?run under tests/clients/with-broker.sh}"
n=${EXAMPLE_ITERATIONS:-40}
redis="$LOCKBROKER_REDIS_HOST:$LOCKBROKER_REDIS_PORT"
rcli() { redis-cli -h "$LOCKBROKER_REDIS_HOST" -p "$LOCKBROKER_REDIS_PORT" "$@"; }
rcli DEL counter:value fence:last >/dev/null

pids=""
names=""
url=$LOCKBROKER_URL
start() { # name command...
	name=$1
	shift
	"$@" >"$LOCKBROKER_TMP/example-$name.log" 2>&1 &
	pids="$pids $!"
	names="$names $name"
	# the next one on the other transport
	if [ "$url" = "$LOCKBROKER_URL" ]; then url=$LOCKBROKER_UNIX_URL; else url=$LOCKBROKER_URL; fi
}

if [ -f examples/python/counter.py ]; then
	start python python3 examples/python/counter.py --iterations "$n" --url "$url" --redis "$redis"
fi
if [ -f examples/node/counter.js ]; then
	start node node examples/node/counter.js --iterations "$n" --url "$url" --redis "$redis"
fi
if [ -f examples/go/counter/main.go ]; then
	(cd examples/go/counter && go build -o "$LOCKBROKER_TMP/counter-go" .)
	start go "$LOCKBROKER_TMP/counter-go" -iterations "$n" -url "$url" -redis "$redis"
fi
if [ -x build/clients/c/counter ]; then
	start c build/clients/c/counter --iterations "$n" --url "$url" --redis "$redis"
fi
if [ -f examples/java/Counter.java ] && command -v javac >/dev/null 2>&1; then
	# the client's jar (build/java/), then the counter as a single-file program
	sh clients/java/build.sh jar >/dev/null
	start java java -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -cp build/java/lockbroker-0.1.0.jar \
		examples/java/Counter.java --iterations "$n" --url "$url" --redis "$redis"
fi

failed=0
count=0
set -- $names
for p in $pids; do
	name=$1
	shift
	count=$((count + 1))
	if ! wait "$p"; then
		echo "examples: $name failed:" >&2
		cat "$LOCKBROKER_TMP/example-$name.log" >&2
		failed=1
	fi
done
[ "$count" -gt 0 ] || { echo "examples: none there yet"; exit 0; }
value=$(rcli GET counter:value)
want=$((count * n))
echo "examples:$names: $count programs x $n iterations: counter $value (want $want)"
[ "$value" = "$want" ] || { echo "examples: the counter is $value, not $want: updates were lost" >&2; failed=1; }
exit "$failed"
