#!/usr/bin/env bash
# cleanroom.sh: run `make test` on a clone of this repository inside a fresh
# Debian 12 chroot that has only Go, gcc, make and git, as a new user's
# machine would; the test dependencies are installed by `make test` itself.
# Needs root and debootstrap (apt-get install debootstrap). Prints how long
# each phase took.
#
#   sudo bash scripts/cleanroom.sh [DIR]       (default /srv/gorun-cleanroom)
#
# The chroot gets this machine's Go (/usr/local/go, or GOROOT=...) and its
# CA bundle (for the Go module proxy behind a TLS-intercepting proxy), and
# /proc, /sys and /dev. Its root is bind-mounted onto itself so that
# `ip netns exec` (the end-to-end tests' test hosts) can remount it.
set -euo pipefail
R=${1:-/srv/gorun-cleanroom}
GOROOT=${GOROOT:-/usr/local/go}
repo=$(cd "$(dirname "$0")/.." && pwd)
[ "$(id -u)" = 0 ] || { echo "cleanroom: must run as root" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "cleanroom: apt-get install debootstrap" >&2; exit 1; }

unmount() {
    umount -R "$R/proc" "$R/sys" "$R/dev" 2>/dev/null || true
    mountpoint -q "$R" && umount -R "$R" 2>/dev/null || true
}
trap unmount EXIT
unmount
rm -rf "$R"

t0=$(date +%s)
debootstrap --variant=minbase bookworm "$R" http://deb.debian.org/debian >"$R.debootstrap.log" 2>&1 ||
    { echo "cleanroom: debootstrap failed: see $R.debootstrap.log" >&2; exit 1; }
t1=$(date +%s)
echo "debootstrap: $((t1 - t0)) s"

mount --bind "$R" "$R"
mount -t proc proc "$R/proc"
mount --rbind /sys "$R/sys" && mount --make-rslave "$R/sys"
mount --rbind /dev "$R/dev" && mount --make-rslave "$R/dev"
cp /etc/resolv.conf "$R/etc/resolv.conf"
cp -a "$GOROOT" "$R/usr/local/go"
chroot "$R" /bin/bash -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc make git ca-certificates >/dev/null'
[ -f /etc/ssl/certs/ca-certificates.crt ] && cp /etc/ssl/certs/ca-certificates.crt "$R/etc/ssl/certs/ca-certificates.crt"
t2=$(date +%s)
echo "Go, gcc, make, git: $((t2 - t1)) s"

git clone -q "$repo" "$R/root/gorun"
echo "testing $(git -C "$R/root/gorun" log --oneline -1)"
rc=0
chroot "$R" /bin/bash -c 'export PATH=/usr/local/go/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root; cd /root/gorun && make test' >"$R.maketest.log" 2>&1 || rc=$?
t3=$(date +%s)
echo "make test (installing the test dependencies included): $((t3 - t2)) s, exit $rc; log in $R.maketest.log"
exit "$rc"
