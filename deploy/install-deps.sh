#!/bin/sh
# Installs, only when missing, every Debian package lockbroker needs to build,
# test and run. Safe to run again: it does nothing when all are present.
# FUZZ=1 (make fuzz-protocol) adds clang and its libFuzzer runtime, which
# nothing else needs. CLIENTS=1 (make test, make test-clients) adds what
# the client libraries' tests run on: python3, golang-go, nodejs, and
# openjdk-17-jdk-headless with junit5 (the Java client, built with javac).
# PACKAGING=1: the tools of tests/packaging/.
set -eu

PKGS="build-essential pkg-config xxd libuv1-dev libhiredis-dev libjansson-dev \
libcriterion-dev redis-server redis-tools socat curl"
if [ "${FUZZ:-}" = 1 ]; then
	PKGS="$PKGS clang libclang-rt-dev"
fi
if [ "${CLIENTS:-}" = 1 ]; then
	PKGS="$PKGS python3 golang-go nodejs openjdk-17-jdk-headless junit5"
fi
# UI=1 (make test, make test-ui): the browser the /ui test drives
# (tests/ui/: puppeteer-core from the npm registry, into build/).
if [ "${UI:-}" = 1 ]; then
	PKGS="$PKGS chromium nodejs"
	if ! command -v npm >/dev/null 2>&1; then
		PKGS="$PKGS npm"
	fi
fi
# PACKAGING=1 (make test, make test-packaging): what building and
# installing the packages takes (tests/packaging/).
if [ "${PACKAGING:-}" = 1 ]; then
	PKGS="$PKGS binutils dpkg-dev lintian systemd python3-venv python3-pip python3-pip-whl \
python3-setuptools python3-setuptools-whl python3-wheel python3-wheel-whl mypy"
	# npm comes with some nodejs builds (NodeSource's); Debian's is a
	# package of its own
	if ! command -v npm >/dev/null 2>&1; then
		PKGS="$PKGS npm"
	fi
fi

missing=""
for p in $PKGS; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing="$missing $p"
	fi
done

[ -z "$missing" ] && exit 0

echo "install-deps: installing:$missing" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
	SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
