#!/usr/bin/env bash
# rootfs.sh: a Debian root made with debootstrap from Debian's own packages,
# holding what users of that release have (Open MPI, MPICH, mpi4py,
# PyTorch), and gorun's tests run inside it. Debian 13 (trixie) is the
# stable release: Open MPI 5 (a PMIx client only), MPICH 4.2, mpi4py 4,
# PyTorch 2.6.
#
#   sudo bash scripts/rootfs.sh make [RELEASE]           make or bring up to date
#   sudo bash scripts/rootfs.sh test [RELEASE] [PKG...]  go test PKGs inside it
#   sudo bash scripts/rootfs.sh run  [RELEASE] -- CMD... run CMD inside it
#
# RELEASE is trixie (the default). The root lives in
# ${GORUN_ROOTFS_DIR:-/srv/gorun-rootfs}/RELEASE and is kept between runs:
# `make` (which `test` and `run` do first) runs debootstrap only when there
# is no complete root, and installs what the package list below gained
# otherwise, so a second run on a machine costs seconds. `test` runs the
# packages that exercise the release's MPIs and PyTorch (./pmix ./pmi
# ./cmd/gorun ./python by default) with GORUN_REQUIRE_OPENMPI5=1,
# GORUN_REQUIRE_MPICH=1 and GORUN_REQUIRE_TORCH2=1, so that a missing piece
# fails instead of skipping; without packages named, the MPI programs on
# the test hosts (./e2e -run MPI: over SSH, per-node and under srun;
# GORUN_REQUIRE_TESTNET=1) first.
#
# Inside the root the repository is at /gorun (bind-mounted, read-write),
# this machine's Go at /usr/local/go and its module and build caches at
# their usual places; /proc, /sys and /dev (with /dev/shm) are the host's.
# Each run mounts these in a mount namespace of its own, so runs side by
# side do not unmount each other's, and nothing stays mounted after it; a
# lock keeps `make` from changing the root under a run.
# Needs root, debootstrap (installed if missing) and unshare (util-linux).
set -euo pipefail

cmd=${1:-make}
shift || true
release=trixie
if [ $# -gt 0 ] && [ "$1" != -- ] && [[ "$1" != ./* ]] && [[ "$1" != -* ]]; then
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
# PyTorch with its headers, g++ and setuptools (gorun.torch's native fast path is
# built against it), python3-venv (python/'s wheel test installs gorun's
# wheel in a venv), what `go test` needs (gcc for cgo, git for the module cache),
# the real Fashion-MNIST (the trainers' tests learn it), pytest and
# packaging (scripts/horovod-suite.sh runs Horovod's tests with them), and sshd,
# iproute2, iptables and Slurm for the test hosts (./e2e's MPI
# tests over SSH, per-node and under srun, in network namespaces made from
# inside the root).
pkgs=(openmpi-bin libopenmpi-dev libpmix-dev mpich libmpich-dev python3-mpi4py
    python3-numpy python3-torch python3-setuptools python3-venv gcc g++ libc6-dev libtorch-dev pybind11-dev make git procps ca-certificates
    openssh-server openssh-client iproute2 iptables util-linux
    slurmctld slurmd slurm-client munge dataset-fashion-mnist python3-pytest python3-packaging)

[ "$(id -u)" = 0 ] || { echo "rootfs: must run as root" >&2; exit 1; }
mkdir -p "$base"
exec 9>"$base/.lock"

# make_root brings the root up to date; the caller holds the lock
# exclusively.
make_root() {
    if [ ! -f "$R/.gorun-rootfs-base" ]; then
        command -v debootstrap >/dev/null || {
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null </dev/null ||
                { echo "rootfs: apt-get install debootstrap" >&2; exit 1; }
        }
        rm -rf "$R"
        local t0 t1
        t0=$(date +%s)
        debootstrap --variant=minbase --include=ca-certificates "$release" "$R" http://deb.debian.org/debian \
            >"$R.debootstrap.log" 2>&1 ||
            { echo "rootfs: debootstrap failed: see $R.debootstrap.log" >&2; exit 1; }
        t1=$(date +%s)
        echo "$release" >"$R/.gorun-rootfs-base"
        echo "rootfs: debootstrap $release in $R: $((t1 - t0)) s" >&2
    fi
    if [ -f "$R/.gorun-rootfs" ] && [ "$(cat "$R/.gorun-rootfs")" = "${pkgs[*]}" ]; then
        return 0
    fi
    local t0 t1
    t0=$(date +%s)
    cp /etc/resolv.conf "$R/etc/resolv.conf"
    unshare -m --propagation private /bin/bash -c "mount -t proc proc '$R/proc' && chroot '$R' /bin/bash -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ${pkgs[*]}'" \
        >"$R.packages.log" 2>&1 </dev/null ||
        { echo "rootfs: installing packages failed: see $R.packages.log" >&2; exit 1; }
    echo "${pkgs[*]}" >"$R/.gorun-rootfs"
    t1=$(date +%s)
    echo "rootfs: packages of $R: $((t1 - t0)) s" >&2
}

# in_root runs its arguments inside the root, in a mount namespace of its
# own, holding the lock shared.
in_root() {
    local gopath gocache
    gopath=$(go env GOPATH 2>/dev/null || echo /root/go)
    gocache=$(go env GOCACHE 2>/dev/null || echo /root/.cache/go-build)
    mkdir -p "$gopath" "$gocache"
    [ -f /etc/ssl/certs/ca-certificates.crt ] && cp /etc/ssl/certs/ca-certificates.crt "$R/etc/ssl/certs/ca-certificates.crt"
    cp /etc/resolv.conf "$R/etc/resolv.conf"
    mkdir -p "$R/gorun" "$R/usr/local/go" "$R/root/go" "$R/root/.cache/go-build"
    # The root is a mount point of its own, so that `ip netns exec` (the
    # test hosts') can remount /sys inside it.
    unshare -m --propagation private /usr/bin/env \
        R="$R" REPO="$repo" GOROOT_HOST="$GOROOT" GOPATH_HOST="$gopath" GOCACHE_HOST="$gocache" \
        GOPROXY_HOST="$(go env GOPROXY 2>/dev/null || true)" GOFLAGS_HOST="${GOFLAGS:-}" \
        /bin/bash -c '
set -e
mount --bind "$R" "$R"
mount -t proc proc "$R/proc"
mount --rbind /sys "$R/sys"
mount --rbind /dev "$R/dev"
mount --bind "$REPO" "$R/gorun"
mount --bind "$GOROOT_HOST" "$R/usr/local/go"
mount --bind "$GOPATH_HOST" "$R/root/go"
mount --bind "$GOCACHE_HOST" "$R/root/.cache/go-build"
exec chroot "$R" /usr/bin/env -i HOME=/root PATH=/usr/local/go/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    GOFLAGS="$GOFLAGS_HOST" GOPROXY="$GOPROXY_HOST" GOTOOLCHAIN=local TERM=dumb "$@"
' rootfs "$@"
}

flock -x 9
make_root
case "$cmd" in
    make) exit 0 ;;
esac
flock -s 9
case "$cmd" in
    run)
        [ "${1:-}" = -- ] && shift
        in_root "$@"
        ;;
    test)
        if [ $# -eq 0 ]; then
            # The MPI tests on the test hosts (./e2e -run MPI: over SSH,
            # per-node, under srun) run first, alone: the package's
            # TestMain brings the hosts up.
            in_root /bin/bash -c "cd /gorun && GORUN_REQUIRE_OPENMPI5=1 GORUN_REQUIRE_MPICH=1 GORUN_REQUIRE_TESTNET=1 \
                go test -count=1 -timeout 20m -run MPI ./e2e"
            set -- ./pmix ./pmi ./cmd/gorun ./python
        fi
        in_root /bin/bash -c "cd /gorun && GORUN_REQUIRE_OPENMPI5=1 GORUN_REQUIRE_MPICH=1 GORUN_REQUIRE_TORCH2=1 \
            go test -count=1 -timeout 20m ${GORUN_ROOTFS_TESTFLAGS:-} $*"
        ;;
    *)
        echo "usage: $0 make|test|run [RELEASE] ..." >&2
        exit 2
        ;;
esac
