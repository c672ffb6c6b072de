#!/bin/sh
# clients/c/tests/run.sh [CRITERION ARGS...]: runs the C client's test
# binary (build/clients/c/tests, the ASan+UBSan build) under
# tests/clients/with-broker.sh, and fails when a sanitizer reported
# anything: Criterion runs each test in a worker whose LeakSanitizer
# report does not change the test's verdict, so the report is looked for
# in the output. Run from the top of the tree.
set -eu

bin=build/clients/c/tests
[ -x "$bin" ] || { echo "clients/c/tests/run.sh: $bin is missing (make build/clients/c/tests)" >&2; exit 2; }
# as `make test` sets them (libcriterion's own small leak is suppressed)
: "${ASAN_OPTIONS:=detect_leaks=1:abort_on_error=0:strict_string_checks=1}"
: "${LSAN_OPTIONS:=suppressions=$PWD/tests/lsan.supp:print_suppressions=0}"
: "${UBSAN_OPTIONS:=print_stacktrace=1:halt_on_error=1}"
export ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS
out=$(mktemp "${TMPDIR:-/tmp}/lbc-tests.XXXXXX")
trap 'rm -f "$out"' EXIT INT TERM
status=0
"$bin" "$@" >"$out" 2>&1 || status=$?
cat "$out"
if grep -Eq 'ERROR: (Address|Leak|Thread|Memory)Sanitizer|runtime error:' "$out"; then
	echo "clients/c/tests/run.sh: a sanitizer reported errors (above)" >&2
	[ "$status" -ne 0 ] || status=1
fi
exit "$status"
