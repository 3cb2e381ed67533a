#!/usr/bin/env bash
# rootfs.sh: a Debian root made with debootstrap from Debian's own packages,
# holding what users of that release have (Open MPI, MPICH, mpi4py,
# PyTorch), and gorun's tests run inside it. Debian 13 (trixie) is the
# stable release: Open MPI 5 (a PMIx client only), MPICH 4.2, mpi4py 4,
# PyTorch 2.6.
#
#   sudo bash scripts/rootfs.sh make [RELEASE]           make or refresh the root
#   sudo bash scripts/rootfs.sh test [RELEASE] [PKG...]  go test PKGs inside it
#   sudo bash scripts/rootfs.sh run  [RELEASE] -- CMD... run CMD inside it
#
# RELEASE is trixie (the default). The root lives in
# ${GORUN_ROOTFS_DIR:-/srv/gorun-rootfs}/RELEASE and is kept between runs:
# `make` (and `test`, which makes it first) rebuilds it only when the
# package list below changed or the root is incomplete, so a second run on
# a machine costs seconds. `test` runs the packages that exercise the
# release's MPIs and PyTorch (./pmix ./pmi ./cmd/gorun ./python by default)
# with GORUN_REQUIRE_OPENMPI5=1, GORUN_REQUIRE_MPICH=1 and
# GORUN_REQUIRE_TORCH2=1, so that a missing piece fails instead of skipping.
#
# Inside the root the repository is at /gorun (bind-mounted, read-write),
# this machine's Go at /usr/local/go and its module and build caches at
# their usual places; /proc, /sys and /dev (with /dev/shm) are the host's.
# Needs root and debootstrap (apt-get install debootstrap).
set -euo pipefail

cmd=${1:-make}
shift || true
release=trixie
if [ $# -gt 0 ] && [ "$1" != -- ] && [[ "$1" != ./* ]]; then
    release=$1
    shift
fi
case "$release" in
    trixie) ;;
    *) echo "rootfs: release $release: only trixie (Debian 13) is known" >&2; exit 2 ;;
esac
base=${GORUN_ROOTFS_DIR:-/srv/gorun-rootfs}
R=$base/$release
repo=$(cd "$(dirname "$0")/.." && pwd)
GOROOT=${GOROOT:-$(go env GOROOT 2>/dev/null || echo /usr/local/go)}

# What the tests use inside the root: the release's MPIs (with their
# compilers and the PMIx headers, for a bare PMIx client), mpi4py,
# PyTorch, and what `go test` needs (gcc for cgo, git for the module cache).
pkgs=(openmpi-bin libopenmpi-dev libpmix-dev mpich libmpich-dev python3-mpi4py
    python3-torch gcc libc6-dev make git procps ca-certificates)
stamp="$release ${pkgs[*]}"

[ "$(id -u)" = 0 ] || { echo "rootfs: must run as root" >&2; exit 1; }

unmount() {
    for m in "$R/gorun" "$R/usr/local/go" "$R/root/go" "$R/root/.cache/go-build" "$R/dev" "$R/sys" "$R/proc"; do
        mountpoint -q "$m" 2>/dev/null && umount -R "$m" 2>/dev/null || true
    done
}

make_root() {
    if [ -f "$R/.gorun-rootfs" ] && [ "$(cat "$R/.gorun-rootfs")" = "$stamp" ]; then
        return 0
    fi
    command -v debootstrap >/dev/null || {
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null </dev/null ||
            { echo "rootfs: apt-get install debootstrap" >&2; exit 1; }
    }
    unmount
    rm -rf "$R"
    mkdir -p "$base"
    local t0 t1 t2
    t0=$(date +%s)
    debootstrap --variant=minbase --include=ca-certificates "$release" "$R" http://deb.debian.org/debian \
        >"$R.debootstrap.log" 2>&1 ||
        { echo "rootfs: debootstrap failed: see $R.debootstrap.log" >&2; exit 1; }
    t1=$(date +%s)
    cp /etc/resolv.conf "$R/etc/resolv.conf"
    mount -t proc proc "$R/proc"
    chroot "$R" /bin/bash -c "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ${pkgs[*]}" \
        >"$R.packages.log" 2>&1 </dev/null || {
        umount "$R/proc"
        echo "rootfs: installing packages failed: see $R.packages.log" >&2
        exit 1
    }
    umount "$R/proc"
    t2=$(date +%s)
    echo "$stamp" >"$R/.gorun-rootfs"
    echo "rootfs: $release made in $R (debootstrap $((t1 - t0)) s, packages $((t2 - t1)) s)" >&2
}

mount_root() {
    unmount
    mount -t proc proc "$R/proc"
    mount --rbind /sys "$R/sys" && mount --make-rslave "$R/sys"
    mount --rbind /dev "$R/dev" && mount --make-rslave "$R/dev"
    mkdir -p "$R/gorun" "$R/usr/local/go" "$R/root/go" "$R/root/.cache/go-build"
    mount --bind "$repo" "$R/gorun"
    mount --bind "$GOROOT" "$R/usr/local/go"
    local gopath gocache
    gopath=$(go env GOPATH 2>/dev/null || echo /root/go)
    gocache=$(go env GOCACHE 2>/dev/null || echo /root/.cache/go-build)
    mkdir -p "$gopath" "$gocache"
    mount --bind "$gopath" "$R/root/go"
    mount --bind "$gocache" "$R/root/.cache/go-build"
    [ -f /etc/ssl/certs/ca-certificates.crt ] && cp /etc/ssl/certs/ca-certificates.crt "$R/etc/ssl/certs/ca-certificates.crt"
    cp /etc/resolv.conf "$R/etc/resolv.conf"
}

in_root() {
    trap unmount EXIT
    mount_root
    chroot "$R" /usr/bin/env -i HOME=/root PATH=/usr/local/go/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        GOFLAGS="${GOFLAGS:-}" GOPROXY="$(go env GOPROXY 2>/dev/null || true)" GOTOOLCHAIN=local \
        TERM=dumb "$@"
}

case "$cmd" in
    make)
        make_root
        ;;
    run)
        [ "${1:-}" = -- ] && shift
        make_root
        in_root "$@"
        ;;
    test)
        make_root
        [ $# -gt 0 ] || set -- ./pmix ./pmi ./cmd/gorun ./python
        in_root /bin/bash -c "cd /gorun && GORUN_REQUIRE_OPENMPI5=1 GORUN_REQUIRE_MPICH=1 GORUN_REQUIRE_TORCH2=1 \
            go test -count=1 -timeout 20m ${GORUN_ROOTFS_TESTFLAGS:-} $*"
        ;;
    *)
        echo "usage: $0 make|test|run [RELEASE] ..." >&2
        exit 2
        ;;
esac
