#!/bin/sh
# tests/fuzz/run_protocol.sh - runs each libFuzzer target of the protocol
# layer (built by `make fuzz-protocol` into build/fuzz/) for SECONDS, one
# after the other, and fails when any of them found a crash, a sanitizer
# report, a leak or a slow input. The seed corpus tests/fuzz/corpus/TARGET
# is read, never written: what libFuzzer learns goes to build/fuzz/corpus/
# TARGET and is reused by the next run; a failing input is saved as
# build/fuzz/artifacts/TARGET-*. Each target's log is build/fuzz/TARGET.log.
# Usage: tests/fuzz/run_protocol.sh SECONDS TARGET...
set -eu
secs=$1
shift
top=$(cd "$(dirname "$0")/../.." && pwd)
out=$top/build/fuzz
mkdir -p "$out/artifacts"
failed=""
printf '%-8s %8s %12s %10s %8s %8s\n' target seconds execs execs/s cov ft
for t in "$@"; do
	mkdir -p "$out/corpus/$t"
	dict=""
	[ -f "$top/tests/fuzz/$t.dict" ] && dict="-dict=$top/tests/fuzz/$t.dict"
	# stdin from /dev/null: no target may wait on it. -timeout: an input
	# that takes 10 s is a finding (quadratic work on a request line).
	# shellcheck disable=SC2086
	if ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
	   UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	   "$out/fuzz_$t" -max_total_time="$secs" -timeout=10 -print_final_stats=1 \
	   -artifact_prefix="$out/artifacts/$t-" $dict \
	   "$out/corpus/$t" "$top/tests/fuzz/corpus/$t" </dev/null >"$out/$t.log" 2>&1; then
		rc=0
	else
		rc=$?
	fi
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/$t.log" | tail -1)
	rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$out/$t.log" | tail -1)
	last=$(grep -E '^#[0-9]+' "$out/$t.log" | tail -1)
	cov=$(printf '%s\n' "$last" | sed -n 's/.* cov: \([0-9]*\).*/\1/p')
	ft=$(printf '%s\n' "$last" | sed -n 's/.* ft: \([0-9]*\).*/\1/p')
	printf '%-8s %8s %12s %10s %8s %8s\n' "$t" "$secs" "${execs:--}" "${rate:--}" \
		"${cov:--}" "${ft:--}"
	if [ "$rc" -ne 0 ]; then
		failed="$failed $t"
		echo "fuzz_$t failed (exit $rc); the end of build/fuzz/$t.log:" >&2
		tail -40 "$out/$t.log" >&2
	fi
done
if [ -n "$failed" ]; then
	echo "fuzz-protocol: failed:$failed (inputs in build/fuzz/artifacts/)" >&2
	exit 1
fi
