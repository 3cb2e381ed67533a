#!/usr/bin/env bash
# The whole suite beside other work on this host, run after run: a clone
# of this repository (at COMMIT, default HEAD) runs
# `go test -race -count=1 ./...` (packages in parallel, as `make test`
# runs them, with the SSH, MPICH and Open MPI tests required) beside HOGS
# busy processes (spinning shell loops, default 4), RUNS times in a row
# (default 5), stopping at the first failure. A test that fails under load
# is a bug: this is how the suite shows it.
#
#   sudo bash scripts/loaded.sh [RUNS] [COMMIT]
#   HOGS=2 sudo bash scripts/loaded.sh 1
#
# Prints one line a run ("run N commit C hogs H rc R M min") and keeps
# each run's output in OUT (default a new temporary directory), whose
# path it prints first. Needs root (the test hosts) and what `make test`
# needs (scripts/testdeps.sh). Run nothing else beside it: its point is a
# load that is known.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
runs=${1:-5}
commit=${2:-HEAD}
hogs=${HOGS:-4}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
echo "loaded: output in $out"
src=$(mktemp -d)
pids=()
cleanup() {
    kill "${pids[@]}" 2>/dev/null
    (cd "$src" && bash scripts/testhosts.sh down) >/dev/null 2>&1
    rm -rf "$src"
}
trap cleanup EXIT
git clone -q "$repo" "$src" && git -C "$src" checkout -q "$commit" || exit 1
short=$(git -C "$src" rev-parse --short HEAD)
for n in $(seq 1 "$runs"); do
    pids=()
    for _ in $(seq 1 "$hogs"); do
        sh -c 'while :; do :; done' &
        pids+=($!)
    done
    start=$(date +%s)
    (cd "$src" && GORUN_REQUIRE_TESTNET=1 GORUN_REQUIRE_MPICH=1 GORUN_REQUIRE_OPENMPI=1 \
        go test -race -count=1 -timeout 45m ./...) >"$out/run-$n.log" 2>&1
    rc=$?
    kill "${pids[@]}" 2>/dev/null
    wait "${pids[@]}" 2>/dev/null
    secs=$(($(date +%s) - start))
    echo "run $n commit $short hogs $hogs rc $rc $((secs / 60)).$((secs % 60 * 10 / 60)) min" | tee -a "$out/summary"
    (cd "$src" && bash scripts/testhosts.sh down) >/dev/null 2>&1
    rm -f /dev/shm/gorun-* 2>/dev/null
    if [ "$rc" != 0 ]; then
        grep -E '^(--- FAIL|FAIL)' "$out/run-$n.log" | head -20
        exit "$rc"
    fi
done
