#!/usr/bin/env bash
# Compare gorun's all-reduce with Open MPI (TCP only) and PyTorch's Gloo on
# this machine, in one sitting, so that only ratios are read.
#
#   bash bench/compare.sh [OUT]      (default results/compare/<date>-<commit>.md)
#
# Needs: openmpi-bin libopenmpi-dev python3-torch gcc (Debian). gorun runs
# examples/allreduce; Open MPI runs bench/mpi/allreduce_mpi.c (the same
# batches and median); Gloo runs bench/torch/allreduce.py through
# torch.distributed. Takes a few minutes.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
commit=$(git -C "$repo" rev-parse --short HEAD)
out=$(realpath -m "${1:-$repo/results/compare/$(date -u +%F)-$commit.md}")
mkdir -p "$(dirname "$out")"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
make -C "$repo" -s build >/dev/null
go build -o "$work/allreduce" "$repo/examples/allreduce"
mpicc.openmpi -O2 -o "$work/mpi_ompi" "$repo/bench/mpi/allreduce_mpi.c"
sizes=4KiB,1MiB,16MiB,64MiB
export OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_btl_tcp_if_include=lo
{
    echo "# gorun vs Open MPI (TCP) and Gloo, $(date -u +%Y-%m-%dT%H:%MZ)"
    echo
    echo "Same machine, same sitting. gorun: \`gorun -np N examples/allreduce -sizes $sizes -target 1s\`;"
    echo "Open MPI: \`mpirun --mca pml ob1 --mca btl tcp,self -np N bench/mpi/allreduce_mpi $sizes 1.0\`;"
    echo "Gloo: \`gorun -np N /usr/bin/python3 bench/torch/allreduce.py --backend gloo\`."
    echo
} > "$out"
for rep in $(seq "${REPS:-2}"); do
    for n in 2 4; do
        {
            echo "## N=$n (run $rep)"
            echo
            echo "gorun:"
            echo '```'
            "$repo/bin/gorun" --tag-output=false -np "$n" "$work/allreduce" -sizes "$sizes" -target 1s
            echo '```'
            echo "Open MPI over TCP (bytes, µs, busbw GB/s):"
            echo '```'
            mpirun --allow-run-as-root --oversubscribe -np "$n" --mca pml ob1 --mca btl tcp,self "$work/mpi_ompi" "$sizes" 1.0
            echo '```'
            echo "Gloo:"
            echo '```'
            PYTHONPATH="$repo/python" "$repo/bin/gorun" -q --tag-output=false -np "$n" /usr/bin/python3 \
                "$repo/bench/torch/allreduce.py" --backend gloo --sizes 4096,1048576,16777216,67108864 | grep size=
            echo '```'
            echo
        } >> "$out"
    done
done
echo "wrote $out"
