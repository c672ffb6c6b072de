#!/bin/sh
# tests/clients/run-all.sh: every client library's tests (clients/*/),
# each against its own private redis-server and brokers
# (tests/clients/with-broker.sh). `make test-clients` runs it, and `make
# test` after the broker's own tests. A client whose directory is not
# there yet is skipped, saying so. Exits non-zero when any suite failed.
set -eu

top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
wb="sh tests/clients/with-broker.sh"
failed=""

run() { # name command...
	name=$1
	shift
	echo "== clients: $name"
	if "$@"; then
		echo "== clients: $name passed"
	else
		echo "== clients: $name FAILED" >&2
		failed="$failed $name"
	fi
}

if [ -d clients/python/tests ]; then
	run python $wb python3 -m unittest discover -s clients/python/tests -t clients/python
else
	echo "== clients: python: not there yet"
fi
if [ -f clients/go/go.mod ]; then
	# The module has no dependencies; its build cache stays in build/.
	mkdir -p "$top/build/go-cache"
	run go env GOCACHE="$top/build/go-cache" GOFLAGS=-mod=mod GOPROXY=off \
		$wb sh -c 'cd clients/go && go vet ./... && go test -count=1 ./...'
else
	echo "== clients: go: not there yet"
fi
if [ -d clients/node/test ]; then
	run node $wb node --test clients/node/test/
else
	echo "== clients: node: not there yet"
fi

if [ -f clients/c/lbclient.h ]; then
	# The library's tests (its ASan+UBSan build; a sanitizer report fails
	# them) and the counter example, which examples.sh runs below.
	if ${MAKE:-make} --no-print-directory build/clients/c/tests build/clients/c/counter; then
		run c $wb sh clients/c/tests/run.sh --jobs 2
	else
		echo "== clients: c: build FAILED" >&2
		failed="$failed c"
	fi
else
	echo "== clients: c: not there yet"
fi

if [ -f clients/java/build.sh ]; then
	# javac, jar and JUnit 5's console launcher (Debian openjdk-17-jdk-headless,
	# junit5), no Maven; classes and the jar go to build/java/.
	run java $wb sh clients/java/build.sh test
else
	echo "== clients: java: not there yet"
fi

# The examples/ programs of every language together on one lock.
run examples env GOCACHE="$top/build/go-cache" GOFLAGS=-mod=mod GOPROXY=off \
	$wb sh tests/clients/examples.sh

if [ -n "$failed" ]; then
	echo "clients: failed:$failed" >&2
	exit 1
fi
