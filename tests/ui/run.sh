#!/bin/sh
# tests/ui/run.sh: the /ui page in a real browser (make test-ui). Starts a
# private redis-server and lockbrokerd with --metrics, on free loopback
# ports in a temp dir, runs tests/ui/ui_test.js (puppeteer-core driving
# Debian's chromium, headless) against them, and stops everything after
# (trap). Fails when the test fails or the broker does not exit cleanly
# (the sanitizer build reports leaks in its exit status).
#
# Needs: chromium and nodejs with npm (Debian packages), and puppeteer-core
# from the npm registry, installed here into build/ui-node/ (never into the
# tree) at the version pinned below.
#
# Environment: LB_BROKER_BIN (default build/san/lockbrokerd), CHROMIUM_BIN
# (default /usr/bin/chromium), LB_KEEP_TMP=1 keeps the temp dir (the logs).
# The test leaves screenshots of the page in build/ui-test/.
set -eu

PUPPETEER_VERSION=24.43.1 # the last line that runs on Node 18 and 20

top=$(cd "$(dirname "$0")/../.." && pwd)
bin=${LB_BROKER_BIN:-$top/build/san/lockbrokerd}
chromium=${CHROMIUM_BIN:-/usr/bin/chromium}
nodedir=$top/build/ui-node
t0=$(date +%s)

[ -x "$bin" ] || { echo "ui: $bin is missing (make build/san/lockbrokerd)" >&2; exit 2; }
[ -x "$chromium" ] || { echo "ui: $chromium is missing (apt-get install chromium)" >&2; exit 2; }
command -v node >/dev/null || { echo "ui: node is missing (apt-get install nodejs)" >&2; exit 2; }

have=$(node -e "try { console.log(require('$nodedir/node_modules/puppeteer-core/package.json').version) } catch (e) {}")
if [ "$have" != "$PUPPETEER_VERSION" ]; then
	command -v npm >/dev/null || { echo "ui: npm is missing (apt-get install npm)" >&2; exit 2; }
	echo "ui: installing puppeteer-core@$PUPPETEER_VERSION into build/ui-node/" >&2
	mkdir -p "$nodedir"
	npm install --prefix "$nodedir" --no-audit --no-fund --loglevel=error \
		"puppeteer-core@$PUPPETEER_VERSION" >&2
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/lbui.XXXXXX")
rpid=""
bpid=""
cleanup() {
	trap - INT TERM EXIT
	[ -n "$bpid" ] && kill -TERM "$bpid" 2>/dev/null || true
	[ -n "$rpid" ] && kill -TERM "$rpid" 2>/dev/null || true
	[ -n "$rpid" ] && wait "$rpid" 2>/dev/null || true
	[ "${LB_KEEP_TMP:-}" = 1 ] && echo "ui: kept $tmp" >&2 || rm -rf "$tmp"
}
trap cleanup INT TERM EXIT

free_port() {
	node -e 'const s = require("net").createServer().listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); })'
}
wait_for() { # what command...
	what=$1
	shift
	n=0
	until "$@" >/dev/null 2>&1; do
		n=$((n + 1))
		if [ "$n" -gt 200 ]; then
			echo "ui: $what did not start" >&2
			for f in "$tmp"/*.log; do tail -n 20 "$f" >&2; done
			exit 2
		fi
		sleep 0.05
	done
}

rport=$(free_port)
redis-server --port "$rport" --bind 127.0.0.1 --dir "$tmp" --save "" --appendonly no \
	--daemonize no --logfile "$tmp/redis.log" &
rpid=$!
wait_for redis-server redis-cli -p "$rport" ping

bport=$(free_port)
mport=$(free_port)
"$bin" --redis "redis://127.0.0.1:$rport" --listen "tcp://127.0.0.1:$bport" \
	--metrics "tcp://127.0.0.1:$mport" --log-level warn 2>"$tmp/broker.log" &
bpid=$!
wait_for lockbrokerd curl -sf "http://127.0.0.1:$mport/readyz"

status=0
LB_BROKER_HOST=127.0.0.1 LB_BROKER_PORT=$bport LB_UI_URL="http://127.0.0.1:$mport/ui" \
	CHROMIUM_BIN=$chromium LB_UI_OUT=$top/build/ui-test NODE_PATH=$nodedir/node_modules \
	node "$top/tests/ui/ui_test.js" || status=$?

# The broker must stop cleanly: exit 0, so no leak and no sanitizer report.
kill -TERM "$bpid"
bstatus=0
wait "$bpid" || bstatus=$?
bpid=""
if [ "$bstatus" -ne 0 ]; then
	echo "ui: lockbrokerd exited with status $bstatus" >&2
	tail -n 40 "$tmp/broker.log" >&2
	[ "$status" -ne 0 ] || status=1
fi
echo "ui: $(($(date +%s) - t0)) s in all (browser test and setup)" >&2
exit "$status"
