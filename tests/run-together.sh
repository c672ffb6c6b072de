#!/bin/sh
# tests/run-together.sh NAME 'COMMAND' [NAME 'COMMAND' ...]: runs each
# command (a shell command line) at the same time as the others, each with
# its output in a log of its own, and prints every log, whole, in the
# order given, once all are done. Exits non-zero when any command failed,
# naming those that did.
#
# Why: the Sentinel, Cluster and Redlock suites run one test at a time
# (their tests kill and freeze shared Redis processes) and spend most of
# their time waiting (failovers, TTLs, backoffs), not on the CPU; each
# starts its own Redis processes on free ports, so they can run beside
# each other and beside the integration suite. Run one after the other
# they made `make test` last about 15 minutes on a 2-core machine.
set -u

dir=$(mktemp -d "${TMPDIR:-/tmp}/lbtogether.XXXXXX")
pids=""
names=""
n=0
while [ $# -ge 2 ]; do
	n=$((n + 1))
	name=$1
	cmd=$2
	shift 2
	( sh -c "$cmd" >"$dir/$n.log" 2>&1; echo $? >"$dir/$n.rc" ) &
	pids="$pids $!"
	names="$names $name"
	echo "== started: $name"
done
for p in $pids; do
	wait "$p"
done
failed=""
k=0
for name in $names; do
	k=$((k + 1))
	echo "== $name"
	cat "$dir/$k.log"
	rc=$(cat "$dir/$k.rc" 2>/dev/null || echo 1)
	if [ "$rc" != 0 ]; then
		echo "== $name FAILED (exit status $rc)"
		failed="$failed $name"
	else
		echo "== $name passed"
	fi
done
# CI shows the tail of the output: name what failed once more, last.
k=0
for name in $names; do
	k=$((k + 1))
	rc=$(cat "$dir/$k.rc" 2>/dev/null || echo 1)
	[ "$rc" = 0 ] && continue
	echo "== $name: what failed"
	grep -E '\[FAIL\]|Assertion Failed|CRASH|ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error|Synthesis' \
	    "$dir/$k.log" | tail -n 25
done
rm -rf "$dir"
if [ -n "$failed" ]; then
	echo "failed:$failed" >&2
	exit 1
fi
