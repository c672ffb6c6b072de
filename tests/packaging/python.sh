#!/bin/sh
# tests/packaging/python.sh: the Python client installed the usual way,
# offline, as clients/python/README.md ("Install") says: in a fresh venv
# made by Debian's python3, `pip install --no-index --find-links
# /usr/share/python-wheels ./clients/python` builds it with pip's build
# isolation fed from Debian's wheels (python3-setuptools-whl,
# python3-wheel-whl); `import lockbroker` then comes from the venv, its
# __version__ is the installed distribution's version, and py.typed is
# installed; a connect to a socket that does not exist fails at once (and
# the broker of tests/clients/with-broker.sh, when run under it, answers a
# ping); if mypy is installed (Debian: mypy), `mypy --strict` passes
# clients/python/tests/typing_usage.py against the installed package.
# `python3 -m pip wheel --no-build-isolation` builds a wheel holding
# lockbroker/__init__.py, lockbroker/py.typed and METADATA with that
# version, and nothing of tests/ or bench.py.
#
# setuptools builds inside the source directory (build/, *.egg-info), so
# both builds run on a copy of clients/python in a temp dir: the tree is
# left as it was. $PYTHON is the interpreter that makes the venv (default
# Debian's /usr/bin/python3: Debian's setuptools wheel carries a Debian
# patch, install_layout, that fails under other builds of Python, e.g.
# pyenv's); $LB_PYTHON_WHEELS the wheels (default /usr/share/python-wheels).
# Run from the repository's top (or anywhere); exits non-zero on the first
# failure.
set -eu

top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/lbpypkg.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM
fail() { echo "packaging/python: $*" >&2; exit 1; }

python=${PYTHON:-/usr/bin/python3}
wheels=${LB_PYTHON_WHEELS:-/usr/share/python-wheels}
[ -x "$python" ] || fail "$python is missing (apt-get install python3)"
for w in setuptools wheel pip; do
	ls "$wheels/$w"-*.whl >/dev/null 2>&1 || fail "no $w wheel in $wheels" \
		"(apt-get install python3-setuptools-whl python3-wheel-whl python3-pip-whl)"
done

# the copy: what clients/python holds, less what a build there left
cp -R clients/python "$tmp/src"
rm -rf "$tmp/src/build" "$tmp/src/dist" "$tmp/src"/*.egg-info
find "$tmp/src" -name __pycache__ -prune -exec rm -rf {} +

"$python" -m venv "$tmp/venv" >"$tmp/venv.log" 2>&1 || {
	cat "$tmp/venv.log" >&2
	fail "$python -m venv failed (apt-get install python3-venv)"
}
py=$tmp/venv/bin/python3
vpip() { "$py" -m pip --no-cache-dir --disable-pip-version-check --no-input "$@"; }

if ! vpip install --no-index --find-links "$wheels" "$tmp/src" >"$tmp/install.log" 2>&1; then
	tail -n 30 "$tmp/install.log" >&2
	fail "pip install --no-index --find-links $wheels ./clients/python failed (with $python)"
fi

# The import, from the venv only (not this tree: run elsewhere, no PYTHONPATH).
version=$(cd "$tmp" && unset PYTHONPATH && "$py" -c '
import importlib.metadata, importlib.resources, os, sys
import lockbroker
where = os.path.dirname(lockbroker.__file__)
if not where.startswith(sys.prefix + os.sep):
    sys.exit(f"lockbroker was imported from {where}, not from the venv")
version = importlib.metadata.version("lockbroker")
if lockbroker.__version__ != version:
    sys.exit(f"lockbroker.__version__ is {lockbroker.__version__!r}, "
             f"the installed distribution {version!r}")
if not importlib.resources.files("lockbroker").joinpath("py.typed").is_file():
    sys.exit("py.typed is not installed beside the package")
files = {str(f) for f in importlib.metadata.files("lockbroker") or ()}
if "lockbroker/py.typed" not in files:
    sys.exit("py.typed is not in the distribution RECORD")
print(version)
') || fail "the installed package is not right (above)"
src_version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' clients/python/lockbroker/_core.py)
[ "$version" = "$src_version" ] ||
	fail "installed version $version, but clients/python/lockbroker/_core.py says $src_version"

# The installed client at work: a socket that does not exist fails at once
# (not after connect_timeout); a broker, when there is one, answers.
(cd "$tmp" && unset PYTHONPATH && "$py" -c '
import sys, time
import lockbroker
client = lockbroker.Client("unix:///nonexistent/lockbroker.sock")
t0 = time.monotonic()
try:
    client.ping()
    sys.exit("a ping to a socket that does not exist was answered")
except lockbroker.Disconnected:
    pass
if time.monotonic() - t0 > 1:
    sys.exit(f"a refused connect took {time.monotonic() - t0:.1f} s to fail")
client.close()
if len(sys.argv) > 1:
    with lockbroker.Client(sys.argv[1]) as client:
        client.ping()
' ${LOCKBROKER_URL:+"$LOCKBROKER_URL"}) || fail "the installed client does not work (above)"

# Its types, as a user's type checker sees them (py.typed): mypy --strict on
# clients/python/tests/typing_usage.py against the installed package (a copy
# checked outside this tree, so mypy cannot find the sources here instead).
if command -v mypy >/dev/null 2>&1; then
	mkdir "$tmp/types"
	cp clients/python/tests/typing_usage.py "$tmp/types/usage.py"
	(cd "$tmp/types" && unset PYTHONPATH MYPYPATH &&
		mypy --strict --no-incremental --cache-dir=/dev/null --python-executable "$py" usage.py) \
		>"$tmp/mypy.log" 2>&1 || {
		cat "$tmp/mypy.log" >&2
		fail "mypy --strict finds the installed package's types wanting (above)"
	}
	typed="py.typed, mypy --strict"
else
	echo "packaging/python: mypy is not installed (apt-get install mypy): types not checked" >&2
	typed="py.typed; mypy not run"
fi

# The wheel, built without isolation with the venv's own setuptools and
# wheel (Debian's, from $wheels), as Debian's python3 with python3-setuptools
# and python3-wheel builds it.
vpip install --no-index --find-links "$wheels" setuptools wheel >"$tmp/tools.log" 2>&1 || {
	tail -n 30 "$tmp/tools.log" >&2
	fail "cannot install setuptools and wheel from $wheels into the venv"
}
rm -rf "$tmp/src/build" "$tmp/src"/*.egg-info
if ! (PATH=$tmp/venv/bin:$PATH && cd "$tmp" &&
	python3 -m pip wheel --no-build-isolation --no-deps --no-index --no-cache-dir \
		-w "$tmp/dist" "$tmp/src") >"$tmp/wheel.log" 2>&1; then
	tail -n 30 "$tmp/wheel.log" >&2
	fail "python3 -m pip wheel --no-build-isolation ./clients/python failed"
fi
set -- "$tmp/dist/lockbroker-$version-py3-none-any.whl"
[ -f "$1" ] || fail "no lockbroker-$version-py3-none-any.whl; the build made: $(ls "$tmp/dist")"
"$py" - "$1" "$version" <<'EOF' || fail "the wheel's contents are not right (above)"
import sys, zipfile
whl, version = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(whl) as z:
    names = set(z.namelist())
    meta = f"lockbroker-{version}.dist-info/METADATA"
    missing = {"lockbroker/__init__.py", "lockbroker/py.typed", meta} - names
    if missing:
        sys.exit(f"the wheel lacks {sorted(missing)}; it holds {sorted(names)}")
    ours = ("lockbroker/", f"lockbroker-{version}.dist-info/")
    stray = sorted(n for n in names if not n.startswith(ours))
    if stray:
        sys.exit(f"the wheel holds more than the package: {stray}")
    headers = z.read(meta).decode("utf-8").split("\n\n", 1)[0].splitlines()
    if f"Version: {version}" not in headers or "Name: lockbroker" not in headers:
        sys.exit(f"METADATA does not say Name: lockbroker, Version: {version}")
EOF
echo "packaging/python: ok (pip install offline into a fresh venv: lockbroker $version," \
	"$typed; wheel $(basename "$1"))"
