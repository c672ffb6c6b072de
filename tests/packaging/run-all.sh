#!/bin/sh
# tests/packaging/run-all.sh: every package a user installs, built and
# installed as that user would (issue 28): the C client with pkg-config
# (c.sh), the Python package with pip (python.sh), the Node package with
# npm (node.sh), the daemon's .deb (deb.sh). Each script is run if it is
# there, under tests/clients/with-broker.sh (c.sh runs its counter on the
# broker). `make test` and `make test-packaging` run it. Exits non-zero
# when any failed.
set -eu

top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
failed=""
for part in c python node deb; do
	script=tests/packaging/$part.sh
	[ -f "$script" ] || continue
	echo "== packaging: $part"
	if sh tests/clients/with-broker.sh sh "$script"; then
		echo "== packaging: $part passed"
	else
		echo "== packaging: $part FAILED" >&2
		failed="$failed $part"
	fi
done
if [ -n "$failed" ]; then
	echo "failed packaging:$failed" >&2
	exit 1
fi
