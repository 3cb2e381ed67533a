#!/usr/bin/env bash
# Interleave gorun and Open MPI (TCP only) all-reduce sweeps run by run, so
# that drift of the machine hits both alike. Prints busbw per size.
#   bash bench/interleave.sh [ROUNDS]    (default 3; N=2 and N=4 each round)
# Needs openmpi-bin and libopenmpi-dev, and ../shared/peers/mpi_allreduce.c.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
rounds=${1:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
make -C "$repo" build >/dev/null
go build -o "$work/allreduce" "$repo/examples/allreduce"
mpicc.openmpi -O2 -o "$work/mpi_allreduce" "$repo/../shared/peers/mpi_allreduce.c"
export OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_btl_tcp_if_include=lo
sizes="4096 1048576 16777216 67108864"
for r in $(seq "$rounds"); do
    for n in 2 4; do
        printf 'round %s N=%s gorun: ' "$r" "$n"
        "$repo/bin/gorun" --tag-output=false -np "$n" "$work/allreduce" -sizes 4KiB,1MiB,16MiB,64MiB -target 1s |
            awk '/iB/ {printf "%s %sus %s GB/s | ", $1, $2, $5} END {print ""}'
        printf 'round %s N=%s ompi-tcp: ' "$r" "$n"
        # shellcheck disable=SC2086
        mpirun --allow-run-as-root --oversubscribe -np "$n" --mca pml ob1 --mca btl tcp,self \
            "$work/mpi_allreduce" 1.0 $sizes 2>/dev/null |
            awk '/^ *[0-9]/ {printf "%s %sus %s GB/s | ", $1, $4, $7} END {print ""}'
    done
done
