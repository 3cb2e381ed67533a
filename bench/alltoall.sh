#!/usr/bin/env bash
# All-to-all on one host: gorun's AllToAll against Open MPI's MPI_Alltoall
# with no flags (its shared memory), same sitting, run by run.
#
#   bash bench/alltoall.sh [OUT]     (default results/collectives/alltoall-<date>-<commit>.md)
#
# Needs openmpi-bin libopenmpi-dev (Debian). REPS (default 3) pairs of
# runs per N; NS (default "2 4 8"); SIZES (one rank's whole send buffer).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
commit=$(git -C "$repo" rev-parse --short HEAD)
out=$(realpath -m "${1:-$repo/results/collectives/alltoall-$(date -u +%Y-%m-%d)-$commit.md}")
mkdir -p "$(dirname "$out")"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
make -C "$repo" build >/dev/null
go build -o "$work/allreduce" "$repo/examples/allreduce"
mpicc.openmpi -O2 -o "$work/a2a" "$repo/bench/mpi/alltoall_mpi.c"
sizes=${SIZES:-1KiB,16KiB,64KiB,256KiB,1MiB,4MiB}
target=${TARGET:-0.5}
root=()
[ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
gorun_run() { # n -> "bytes us" lines
    "$repo/bin/gorun" --tag-output=false -np "$1" "$work/allreduce" -coll alltoall -sizes "$sizes" -target "${target}s" |
        awk '!/^#/ && $1 != "size" {print $1, $2}'
}
ompi_run() {
    mpirun.openmpi "${root[@]}" --oversubscribe -np "$1" "$work/a2a" "$sizes" "$target"
}
{
    echo "# All-to-all on one host: gorun vs Open MPI, $(date -u +%Y-%m-%dT%H:%MZ), commit $commit"
    echo
    echo "Size is one rank's whole send buffer (size/N to each rank). Time per call, median"
    echo "over batches, slowest rank. Ratio = Open MPI's time / gorun's (above 1: gorun faster),"
    echo "per pair of runs in the same sitting. Commands:"
    echo "\`gorun -np N examples/allreduce -coll alltoall -sizes $sizes -target ${target}s\` and"
    echo "\`mpirun --oversubscribe -np N bench/mpi/alltoall_mpi $sizes $target\` (Open MPI $(mpirun.openmpi --version 2>/dev/null | head -1 | awk '{print $NF}'), no flags)."
    echo
    echo "| N | size | gorun us | Open MPI us | ratio |"
    echo "|---|---|---|---|---|"
} > "$out"
for n in ${NS:-2 4 8}; do
    for rep in $(seq "${REPS:-3}"); do
        gorun_run "$n" > "$work/g"
        ompi_run "$n" > "$work/o"
        paste -d' ' "$work/g" "$work/o" | awk -v n="$n" '{printf "| %d | %s | %.1f | %.1f | %.2f |\n", n, $1, $2, $4, $4/$2}' >> "$out"
    done
done
echo "wrote $out"
