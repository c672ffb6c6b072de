#!/bin/sh
# tests/packaging/deb.sh - the Debian package: builds it with
# deploy/deb/build.sh into a temporary directory from the release binaries
# (build/lockbrokerd and build/lockctl must exist: make them first), then
# checks, without installing anything into this system:
#   1. the file list, modes and owners (dpkg-deb --contents) and the control
#      fields (Depends from dpkg-shlibdeps, Recommends, conffiles, scripts);
#   2. the unpacked tree (dpkg-deb -x): md5sums, `lockbrokerd --version` and
#      `lockctl --version` against LOCKBROKER_VERSION, the man pages free of
#      man/groff warnings, the unit's ExecStart and --config paths present in
#      the package, the unit accepted by `systemd-analyze verify`;
#   3. lintian: no error or warning that deploy/deb/lintian-overrides does
#      not override;
#   4. as root: `dpkg --root` into an empty root with the maintainer scripts
#      run chrootless (DPKG_ROOT): the user made there by systemd-sysusers,
#      the unit enabled there by deb-systemd-helper, `dpkg --verify`, then a
#      purge that leaves nothing behind; and this system's users, unit links
#      and /etc unchanged;
#   5. a smoke run of the unpacked broker with the packaged config, as an
#      unprivileged user when run as root, against a private redis-server on
#      a Unix socket: it sends READY=1 to NOTIFY_SOCKET as systemd's
#      Type=notify expects, the unpacked lockctl pings it and runs a command
#      under a lock, and SIGTERM stops it with status 0 (no TCP port used).
# Needs: dpkg-dev, lintian, man-db, systemd (systemd-analyze,
# systemd-sysusers), redis-server, socat. Run from anywhere:
#   sh tests/packaging/deb.sh
set -eu

cd "$(dirname "$0")/../.."

fail() {
	echo "tests/packaging/deb.sh: FAIL: $*" >&2
	exit 1
}
step() { echo "deb.sh: $*"; }

for tool in dpkg dpkg-deb dpkg-shlibdeps lintian man systemd-analyze redis-server redis-cli socat md5sum; do
	command -v "$tool" >/dev/null 2>&1 ||
		fail "$tool is missing (apt-get install dpkg-dev lintian man-db systemd redis-server redis-tools socat)"
done
for b in build/lockbrokerd build/lockctl; do
	[ -x "$b" ] || fail "$b is missing: make build/lockbrokerd build/lockctl"
done

ver=$(sed -n 's/^#define LOCKBROKER_VERSION "\(.*\)"$/\1/p' broker/base/version.h)
arch=$(dpkg --print-architecture)
[ -n "$ver" ] || fail "no LOCKBROKER_VERSION in broker/base/version.h"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/lockbroker-deb.XXXXXX")
redis_pid=""
broker_pid=""
notify_pid=""
cleanup() {
	rc=$?
	trap - EXIT INT TERM
	for p in $broker_pid $notify_pid $redis_pid; do
		kill -TERM "$p" 2>/dev/null || true
	done
	for p in $broker_pid $notify_pid $redis_pid; do
		wait "$p" 2>/dev/null || true
	done
	rm -rf "$tmp"
	[ "$rc" -eq 0 ] && echo "deb.sh: ok"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# ---- build -----------------------------------------------------------------
step "building with deploy/deb/build.sh"
deb=$(sh deploy/deb/build.sh "$tmp/out") || fail "deploy/deb/build.sh failed"
[ "$(basename "$deb")" = "lockbroker_${ver}_${arch}.deb" ] ||
	fail "the package is $(basename "$deb"), expected lockbroker_${ver}_${arch}.deb"
[ -f "$deb" ] || fail "build.sh printed $deb, which does not exist"

# ---- 1. file list and control fields ---------------------------------------
step "checking the file list"
{
	cat <<'EOF'
drwxr-xr-x root/root ./
drwxr-xr-x root/root ./etc/
drwxr-xr-x root/root ./etc/lockbroker/
-rw-r--r-- root/root ./etc/lockbroker/lockbroker.json
drwxr-xr-x root/root ./lib/
drwxr-xr-x root/root ./lib/systemd/
drwxr-xr-x root/root ./lib/systemd/system/
-rw-r--r-- root/root ./lib/systemd/system/lockbroker.service
drwxr-xr-x root/root ./usr/
drwxr-xr-x root/root ./usr/bin/
-rwxr-xr-x root/root ./usr/bin/lockctl
drwxr-xr-x root/root ./usr/lib/
drwxr-xr-x root/root ./usr/lib/sysusers.d/
-rw-r--r-- root/root ./usr/lib/sysusers.d/lockbroker.conf
drwxr-xr-x root/root ./usr/sbin/
-rwxr-xr-x root/root ./usr/sbin/lockbrokerd
drwxr-xr-x root/root ./usr/share/
drwxr-xr-x root/root ./usr/share/doc/
drwxr-xr-x root/root ./usr/share/doc/lockbroker/
-rw-r--r-- root/root ./usr/share/doc/lockbroker/PROTOCOL.md.gz
-rw-r--r-- root/root ./usr/share/doc/lockbroker/README.md.gz
-rw-r--r-- root/root ./usr/share/doc/lockbroker/changelog.gz
-rw-r--r-- root/root ./usr/share/doc/lockbroker/copyright
drwxr-xr-x root/root ./usr/share/doc/lockbroker/examples/
-rw-r--r-- root/root ./usr/share/doc/lockbroker/examples/lockbroker.secret.example
drwxr-xr-x root/root ./usr/share/man/
drwxr-xr-x root/root ./usr/share/man/man1/
-rw-r--r-- root/root ./usr/share/man/man1/lockctl.1.gz
drwxr-xr-x root/root ./usr/share/man/man8/
-rw-r--r-- root/root ./usr/share/man/man8/lockbrokerd.8.gz
EOF
	if [ -f deploy/deb/lintian-overrides ]; then
		cat <<'EOF'
drwxr-xr-x root/root ./usr/share/lintian/
drwxr-xr-x root/root ./usr/share/lintian/overrides/
-rw-r--r-- root/root ./usr/share/lintian/overrides/lockbroker
EOF
	fi
} | LC_ALL=C sort >"$tmp/want"
dpkg-deb --contents "$deb" | awk '{ print $1, $2, $6 }' | LC_ALL=C sort >"$tmp/got"
if ! diff -u "$tmp/want" "$tmp/got" >"$tmp/diff"; then
	cat "$tmp/diff" >&2
	fail "dpkg-deb --contents differs from the expected list (- expected, + in the package)"
fi

step "checking the control fields"
field() { dpkg-deb --field "$deb" "$1"; }
[ "$(field Package)" = lockbroker ] || fail "Package is '$(field Package)'"
[ "$(field Version)" = "$ver" ] || fail "Version is '$(field Version)', the tree says $ver"
[ "$(field Architecture)" = "$arch" ] || fail "Architecture is '$(field Architecture)'"
depends=$(field Depends)
for lib in libc6 libhiredis0.14 libjansson4 libuv1; do
	case ", $depends," in
	*", $lib "* | *", $lib,"*) ;;
	*) fail "Depends lacks $lib: $depends" ;;
	esac
done
[ "$(field Recommends)" = redis-server ] || fail "Recommends is '$(field Recommends)'"
mkdir "$tmp/ctl"
dpkg-deb --control "$deb" "$tmp/ctl"
[ "$(cat "$tmp/ctl/conffiles")" = /etc/lockbroker/lockbroker.json ] ||
	fail "conffiles is not exactly /etc/lockbroker/lockbroker.json"
for s in postinst prerm postrm; do
	[ -x "$tmp/ctl/$s" ] || fail "no executable $s in the control area"
	sh -n "$tmp/ctl/$s" || fail "$s: syntax error"
done

# ---- 2. the unpacked tree ----------------------------------------------------
step "unpacking with dpkg-deb -x"
x=$tmp/x
dpkg-deb -x "$deb" "$x"
(cd "$x" && md5sum --quiet -c "$tmp/ctl/md5sums") || fail "md5sums do not match the files"
got=$("$x/usr/sbin/lockbrokerd" --version) || fail "the packaged lockbrokerd --version failed"
[ "$got" = "lockbrokerd $ver" ] || fail "the packaged lockbrokerd --version says '$got', expected 'lockbrokerd $ver'"
got=$("$x/usr/bin/lockctl" --version) || fail "the packaged lockctl --version failed"
case "$got" in
"lockctl (lockbroker) $ver,"*) ;;
*) fail "the packaged lockctl --version says '$got', expected 'lockctl (lockbroker) $ver, ...'" ;;
esac

step "checking the man pages"
for m in usr/share/man/man8/lockbrokerd.8.gz usr/share/man/man1/lockctl.1.gz; do
	w=$(LC_ALL=C.UTF-8 MANROFFSEQ='' MANWIDTH=80 man --warnings -E UTF-8 -l -Tutf8 -Z "$x/$m" 2>&1 >/dev/null) ||
		fail "man cannot format $m"
	[ -z "$w" ] || fail "$m: man/groff warnings: $w"
done

step "checking the systemd unit"
unit=$x/lib/systemd/system/lockbroker.service
execstart=$(sed -n 's/^ExecStart=//p' "$unit")
# shellcheck disable=SC2086 # split into words as systemd does (no quotes in it)
set -- $execstart
[ "$1" = /usr/sbin/lockbrokerd ] || fail "the unit's ExecStart runs $1, not /usr/sbin/lockbrokerd"
[ -x "$x$1" ] || fail "the unit's ExecStart binary $1 is not in the package"
config=""
while [ $# -gt 1 ]; do
	[ "$1" = --config ] && config=$2
	shift
done
[ -n "$config" ] || fail "the unit's ExecStart has no --config"
[ -f "$x$config" ] || fail "the unit's --config $config is not in the package"
grep -qx 'User=lockbroker' "$unit" || fail "the unit does not run as User=lockbroker"
grep -q '^u lockbroker ' "$x/usr/lib/sysusers.d/lockbroker.conf" ||
	fail "the sysusers.d file does not create the user lockbroker"
# systemd-analyze checks ExecStart against this system's files: point it at
# the unpacked binary, and its check of Documentation=man:... pages at the
# unpacked man pages. Unknown keys are only warnings: any output fails.
sed "s|^ExecStart=/usr/sbin/lockbrokerd|ExecStart=$x/usr/sbin/lockbrokerd|" "$unit" >"$tmp/lockbroker.service"
if ! out=$(MANPATH=$x/usr/share/man systemd-analyze verify "$tmp/lockbroker.service" 2>&1) ||
	[ -n "$out" ]; then
	fail "systemd-analyze verify: $out"
fi

# ---- 3. lintian ----------------------------------------------------------------
step "running lintian"
if ! lintian --fail-on error,warning --display-info "$deb" >"$tmp/lintian" 2>&1; then
	grep -v 'running with root privileges' "$tmp/lintian" >&2 || true
	fail "lintian reports errors or warnings (fix them, or override one in deploy/deb/lintian-overrides with a comment saying why)"
fi
grep -v 'running with root privileges' "$tmp/lintian" | sed 's/^/deb.sh:   lintian: /' || true

# ---- 4. dpkg --root, maintainer scripts chrootless -----------------------------
host_state() {
	getent passwd lockbroker || true
	getent group lockbroker || true
	ls -d /etc/lockbroker /etc/systemd/system/multi-user.target.wants/lockbroker.service \
		/var/lib/systemd/deb-systemd-helper-enabled/lockbroker.service.dsh-also \
		/lib/systemd/system/lockbroker.service /usr/sbin/lockbrokerd 2>/dev/null || true
	dpkg-query -W -f='${Status}\n' lockbroker 2>/dev/null || true
}
if [ "$(id -u)" -ne 0 ]; then
	step "SKIP dpkg --root install and purge: needs root (systemd-sysusers --root, file owners)"
else
	step "installing with dpkg --root into an empty root"
	host_state >"$tmp/host.before"
	root=$tmp/root
	mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates"
	: >"$root/var/lib/dpkg/status"
	dpkgr() {
		dpkg --root="$root" --force-not-root --force-script-chrootless --force-depends \
			--log=/dev/null "$@" >"$tmp/dpkg.log" 2>&1 || {
			cat "$tmp/dpkg.log" >&2
			fail "dpkg --root $*"
		}
	}
	dpkgr --install "$deb"
	dpkg --root="$root" --verify lockbroker || fail "dpkg --verify finds changed files"
	[ "$(dpkg-query --admindir="$root/var/lib/dpkg" -W -f='${Status}' lockbroker)" = "install ok installed" ] ||
		fail "the package is not 'install ok installed' in the root"
	grep -q '^lockbroker:' "$root/etc/passwd" || fail "postinst made no lockbroker user in the root (systemd-sysusers)"
	[ -L "$root/etc/systemd/system/multi-user.target.wants/lockbroker.service" ] ||
		fail "postinst did not enable lockbroker.service in the root (deb-systemd-helper)"
	step "purging it"
	dpkgr --purge lockbroker
	for f in etc/lockbroker usr/sbin/lockbrokerd lib/systemd/system/lockbroker.service \
		etc/systemd/system/multi-user.target.wants/lockbroker.service \
		var/lib/systemd/deb-systemd-helper-enabled/lockbroker.service.dsh-also; do
		if [ -e "$root/$f" ] || [ -L "$root/$f" ]; then
			fail "/$f is still in the root after the purge"
		fi
	done
	host_state >"$tmp/host.after"
	diff -u "$tmp/host.before" "$tmp/host.after" >&2 ||
		fail "installing into the root changed this system (above)"
fi

# ---- 5. smoke run of the unpacked broker ---------------------------------------
step "starting the unpacked lockbrokerd with the packaged config"
run=$tmp/run
mkdir -m 0777 "$run"
as_user=""
if [ "$(id -u)" -eq 0 ] && getent passwd nobody >/dev/null && command -v setpriv >/dev/null; then
	# The unit runs the broker as an unprivileged user: so does this.
	chmod 0755 "$tmp"
	as_user="setpriv --reuid=nobody --regid=nogroup --clear-groups --"
fi
redis-server --port 0 --unixsocket "$run/redis.sock" --unixsocketperm 777 --dir "$run" \
	--save "" --appendonly no --daemonize no --logfile "$run/redis.log" &
redis_pid=$!
socat -u "UNIX-RECV:$run/notify,mode=0777" "OPEN:$run/notify.log,creat,append" &
notify_pid=$!
tries=0
until [ -S "$run/notify" ] && redis-cli -s "$run/redis.sock" ping >/dev/null 2>&1; do
	tries=$((tries + 1))
	[ $tries -le 100 ] || fail "redis-server or the notify socket did not come up"
	sleep 0.1
done
NOTIFY_SOCKET=$run/notify $as_user "$x/usr/sbin/lockbrokerd" --config "$x$config" \
	--redis "unix://$run/redis.sock" --listen "unix://$run/lockbroker.sock" \
	2>"$run/broker.log" &
broker_pid=$!
tries=0
# Each message is one datagram, written to the log without a separator.
until grep -q 'READY=1' "$run/notify.log" 2>/dev/null; do
	tries=$((tries + 1))
	if [ $tries -gt 100 ] || ! kill -0 "$broker_pid" 2>/dev/null; then
		cat "$run/broker.log" >&2
		fail "the packaged lockbrokerd sent no READY=1 within 10 s"
	fi
	sleep 0.1
done
lc() { "$x/usr/bin/lockctl" --broker "unix://$run/lockbroker.sock" "$@"; }
lc ping >/dev/null || fail "the packaged lockctl cannot ping the packaged broker"
# shellcheck disable=SC2016 # the command's shell expands it
got=$(lc run --no-wait --ttl 5s deb-smoke -- sh -c 'echo "fence=$LOCKBROKER_FENCE"') ||
	fail "lockctl run under the packaged broker failed"
case "$got" in
fence=[0-9]*) ;;
*) fail "lockctl run printed '$got', expected fence=N" ;;
esac
kill -TERM "$broker_pid"
rc=0
wait "$broker_pid" || rc=$?
broker_pid=""
if [ "$rc" -ne 0 ]; then
	cat "$run/broker.log" >&2
	fail "the packaged lockbrokerd exited $rc on SIGTERM, expected 0"
fi
tries=0
until grep -q 'STOPPING=1' "$run/notify.log"; do
	tries=$((tries + 1))
	[ $tries -le 20 ] || fail "the packaged lockbrokerd sent no STOPPING=1 on SIGTERM"
	sleep 0.1
done
