#!/bin/sh
# Builds the Debian package lockbroker_VERSION_ARCH.deb with dpkg's own tools
# (dpkg-shlibdeps, dpkg-parsechangelog, dpkg-deb; no debhelper) from the
# release binaries build/lockbrokerd and build/lockctl, which must be built
# first (`make deb` does that, then runs this). Prints the .deb's path.
#
# Usage, from the repository top:  sh deploy/deb/build.sh [OUTDIR]
# OUTDIR (default build/deb) gets the .deb and, as scratch space, stage/
# (the package's tree) and shlibdeps/; all three are made afresh each run.
# OUTDIR may be anywhere but inside the tree outside build/.
#
# What goes where (Debian bookworm practice, as debhelper 13.11 does it):
#   /usr/sbin/lockbrokerd, /usr/bin/lockctl        stripped copies
#   /lib/systemd/system/lockbroker.service          from deploy/lockbroker.service.in
#   /usr/lib/sysusers.d/lockbroker.conf             deploy/lockbroker.sysusers
#   /etc/lockbroker/lockbroker.json                 deploy/lockbroker.json, a conffile
#   /usr/share/doc/lockbroker/                      copyright, changelog.gz (a native
#                                                   package), README.md.gz, PROTOCOL.md.gz,
#                                                   examples/lockbroker.secret.example
#   /usr/share/man/man8/lockbrokerd.8.gz, man1/lockctl.1.gz   from man/
#   /usr/share/lintian/overrides/lockbroker         deploy/deb/lintian-overrides, if any
# Depends comes from dpkg-shlibdeps on the binaries. The version is
# LOCKBROKER_VERSION (broker/base/version.h); the binaries, the top entry
# of deploy/deb/changelog and the man pages' .TH lines must say the same. File dates are clamped to that
# entry's date (SOURCE_DATE_EPOCH), so the same inputs give the same .deb.
set -eu

die() {
	echo "deploy/deb/build.sh: $*" >&2
	exit 1
}

if [ ! -f deploy/deb/build.sh ] || [ ! -f broker/base/version.h ]; then
	die "run me from the repository top"
fi
top=$(pwd -P)
d=deploy/deb

for tool in dpkg-deb dpkg-shlibdeps dpkg-parsechangelog strip gzip md5sum realpath; do
	command -v "$tool" >/dev/null 2>&1 ||
		die "$tool is missing (Debian packages: dpkg-dev, binutils, gzip, coreutils)"
done

out=${1:-build/deb}
out=${out%/}
abs=$(realpath -m "$out")
case "$abs/" in
"$top/build/"*) ;;
"$top/"*) die "OUTDIR $out is inside the tree but outside build/" ;;
esac

# ---- version: the tree, the binaries and the changelog agree -------------
ver=$(sed -n 's/^#define LOCKBROKER_VERSION "\(.*\)"$/\1/p' broker/base/version.h)
[ -n "$ver" ] || die "no LOCKBROKER_VERSION in broker/base/version.h"
for b in build/lockbrokerd build/lockctl; do
	[ -x "$b" ] || die "$b is missing: make build/lockbrokerd build/lockctl"
done
got=$(build/lockbrokerd --version)
[ "$got" = "lockbrokerd $ver" ] ||
	die "build/lockbrokerd says '$got', the tree says $ver: rebuild it"
got=$(build/lockctl --version)
case "$got" in
"lockctl (lockbroker) $ver,"*) ;;
*) die "build/lockctl says '$got', the tree says $ver: rebuild it" ;;
esac
clver=$(dpkg-parsechangelog -l "$d/changelog" -S Version)
[ "$clver" = "$ver" ] ||
	die "$d/changelog's top entry is $clver, the tree says $ver: add an entry for $ver"
for m in man/lockbrokerd.8 man/lockctl.1; do
	grep -q "^\.TH .* \"lockbroker $ver\"" "$m" ||
		die "$m's .TH line does not say \"lockbroker $ver\": update the page for $ver"
done
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(dpkg-parsechangelog -l "$d/changelog" -S Timestamp)}
export SOURCE_DATE_EPOCH
arch=$(dpkg --print-architecture)

# ---- the package's tree ---------------------------------------------------
stage=$out/stage
rm -rf "$stage" "$out/shlibdeps"
umask 022
for dir in DEBIAN usr/sbin usr/bin lib/systemd/system usr/lib/sysusers.d etc/lockbroker \
	usr/share/doc/lockbroker/examples usr/share/man/man1 usr/share/man/man8; do
	install -d -m 0755 "$stage/$dir"
done

# Release binaries, stripped as dh_strip strips executables (the debug
# information stays in build/).
install -m 0755 build/lockbrokerd "$stage/usr/sbin/lockbrokerd"
install -m 0755 build/lockctl "$stage/usr/bin/lockctl"
strip --remove-section=.comment --remove-section=.note \
	"$stage/usr/sbin/lockbrokerd" "$stage/usr/bin/lockctl"

# The unit as `make install` makes it, with Debian's paths.
sed -e 's|@BINDIR@|/usr/sbin|g' -e 's|@SYSCONFDIR@|/etc|g' \
	deploy/lockbroker.service.in >"$stage/lib/systemd/system/lockbroker.service"
chmod 0644 "$stage/lib/systemd/system/lockbroker.service"
if grep -n '@[A-Z_]*@' "$stage/lib/systemd/system/lockbroker.service" >&2; then
	die "deploy/lockbroker.service.in has a placeholder this script does not fill"
fi
install -m 0644 deploy/lockbroker.sysusers "$stage/usr/lib/sysusers.d/lockbroker.conf"
install -m 0644 deploy/lockbroker.json "$stage/etc/lockbroker/lockbroker.json"

doc=$stage/usr/share/doc/lockbroker
install -m 0644 "$d/copyright" "$doc/copyright"
install -m 0644 deploy/lockbroker.secret.example "$doc/examples/lockbroker.secret.example"
gz() { # SRC DEST: gzip -9 without name or date, mode 0644
	gzip -9nc "$1" >"$2"
	chmod 0644 "$2"
}
gz "$d/changelog" "$doc/changelog.gz"
gz README.md "$doc/README.md.gz"
gz protocol/PROTOCOL.md "$doc/PROTOCOL.md.gz"
gz man/lockbrokerd.8 "$stage/usr/share/man/man8/lockbrokerd.8.gz"
gz man/lockctl.1 "$stage/usr/share/man/man1/lockctl.1.gz"
if [ -f "$d/lintian-overrides" ]; then
	install -d -m 0755 "$stage/usr/share/lintian/overrides"
	install -m 0644 "$d/lintian-overrides" "$stage/usr/share/lintian/overrides/lockbroker"
fi

# ---- control area ----------------------------------------------------------
for s in postinst prerm postrm; do
	install -m 0755 "$d/$s" "$stage/DEBIAN/$s"
done
printf '/etc/lockbroker/lockbroker.json\n' >"$stage/DEBIAN/conffiles"
chmod 0644 "$stage/DEBIAN/conffiles"

# dpkg-shlibdeps wants a debian/control naming the package in its working
# directory; it finds the package's root by the stage's DEBIAN/.
mkdir -p "$out/shlibdeps/debian"
printf 'Source: lockbroker\n\nPackage: lockbroker\nArchitecture: any\n' \
	>"$out/shlibdeps/debian/control"
absstage=$(realpath "$stage")
depends=$(cd "$out/shlibdeps" &&
	dpkg-shlibdeps -O "$absstage/usr/sbin/lockbrokerd" "$absstage/usr/bin/lockctl")
depends=${depends#shlibs:Depends=}
[ -n "$depends" ] || die "dpkg-shlibdeps found no dependencies"
rm -rf "$out/shlibdeps"

# Installed-Size as dpkg-gencontrol counts it: KiB per file, rounded up, and
# 1 for every directory or other entry.
size=$(cd "$stage" && find . -path ./DEBIAN -prune -o ! -name . -printf '%y %s\n' |
	awk '$1 == "f" { n += int(($2 + 1023) / 1024); next } { n++ } END { print n + 0 }')

sed -e "s|@VERSION@|$ver|" -e "s|@ARCH@|$arch|" -e "s|@DEPENDS@|$depends|" \
	-e "s|@INSTALLED_SIZE@|$size|" "$d/control.in" >"$stage/DEBIAN/control"
chmod 0644 "$stage/DEBIAN/control"

# md5sums of every file but the conffiles (dpkg keeps theirs itself), as
# dh_md5sums writes it.
conf=$(realpath "$out")/conffiles.rel
sed 's|^/||' "$stage/DEBIAN/conffiles" >"$conf"
(cd "$stage" && find . -path ./DEBIAN -prune -o -type f -print | sed 's|^\./||' |
	grep -v -x -F -f "$conf" | LC_ALL=C sort | xargs md5sum) >"$stage/DEBIAN/md5sums"
rm -f "$conf"
chmod 0644 "$stage/DEBIAN/md5sums"

deb=$out/lockbroker_${ver}_${arch}.deb
dpkg-deb --root-owner-group -Zxz --build "$stage" "$deb" >/dev/null
echo "$deb"
