#!/usr/bin/env bash
# Installs the Debian packages `make test` needs; the one list of them.
#
#   bash scripts/testdeps.sh           install what is missing (as root), or
#                                      say what to run and exit 1 (not root)
#   bash scripts/testdeps.sh --print   only print the missing packages
#
# Silent, and exit 0, when nothing is missing. Used by `make test` (its
# `deps` target) and by .ci/run.
#
# TESTDEPS_EXTRA="pkg ..." adds packages to the list, e.g. one that is not
# installed, to try the paths above:
#   TESTDEPS_EXTRA=no-such-pkg setpriv --reuid=65534 --regid=65534 \
#       --clear-groups bash scripts/testdeps.sh    # prints the line, exit 1
set -euo pipefail

# openssh-server, openssh-client, iproute2, util-linux, procps: the SSH
#   end-to-end tests' hosts (scripts/testhosts.sh: sshd in network
#   namespaces, tc for their links); iptables: their delay shaping
#   (testhosts.sh --delay queues packets to scripts/delayline);
# dataset-fashion-mnist: the real Fashion-MNIST the trainers' tests learn;
# mpich, libmpich-dev: MPICH programs run under gorun's PMI-1;
# openmpi-bin, libopenmpi-dev: Open MPI 4 programs, through gorun's PMI-1
#   library; libpmix-dev: the PMIx client that stands in for Open MPI 5;
# python3-mpi4py, python3-numpy: mpi4py programs on Open MPI under gorun;
# python3-torch: Debian's PyTorch (at /usr/bin/python3), which the gorun
#   backend's tests (python/) run DDP and every operation on;
# g++, libtorch-dev, pybind11-dev, python3-setuptools (torch.utils.cpp_extension imports it): gorun.torch's native fast path
#   (python/csrc), built against Debian's PyTorch;
# python3-venv: the fresh venv (with its own pip) that python/'s wheel test
#   installs gorun's wheel into;
# slurmctld, slurmd, slurm-client, munge: a real Slurm on the test hosts
#   (testhosts.sh slurm), under which gorun starts its agents with srun.
pkgs=(openssh-server openssh-client iproute2 iptables util-linux procps
    dataset-fashion-mnist mpich libmpich-dev openmpi-bin libopenmpi-dev
    libpmix-dev python3-mpi4py python3-numpy python3-torch g++ libtorch-dev pybind11-dev python3-setuptools python3-venv slurmctld slurmd slurm-client munge)
# shellcheck disable=SC2206 # split on purpose: a space-separated list
pkgs+=(${TESTDEPS_EXTRA:-})

print_only=0
case "${1:-}" in
    "") ;;
    --print) print_only=1 ;;
    *) echo "usage: $0 [--print]" >&2; exit 2 ;;
esac

if ! command -v dpkg >/dev/null 2>&1; then
    # Not Debian: nothing to check with; the tests say what they miss.
    echo "testdeps: no dpkg here; the tests need the equivalents of: ${pkgs[*]}" >&2
    exit 0
fi

missing=()
for p in "${pkgs[@]}"; do
    # Not just dpkg -s's exit code: it is 0 for a removed package whose
    # config files remain.
    status=$(dpkg -s "$p" 2>/dev/null | sed -n 's/^Status: //p') || true
    [ "$status" = "install ok installed" ] || missing+=("$p")
done

if [ "$print_only" = 1 ]; then
    [ ${#missing[@]} -eq 0 ] || echo "${missing[*]}"
    exit 0
fi
[ ${#missing[@]} -gt 0 ] || exit 0

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "testdeps: the tests need packages that are missing; run: sudo apt-get install -y ${missing[*]}" >&2
    exit 1
fi

echo "testdeps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq </dev/null
apt-get install -y -qq "${missing[@]}" </dev/null >/dev/null
