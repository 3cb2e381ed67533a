#!/usr/bin/env bash
# Compare gorun's all-reduce with Open MPI (TCP only) and PyTorch Gloo on
# this machine, in one sitting, so that only ratios are read.
#
#   bash bench/compare.sh [OUT]      (default results/compare-<date>.md)
#
# Needs: openmpi-bin libopenmpi-dev mpich libmpich-dev python3-torch iperf3 gcc (Debian), and
# ../shared/peers beside the repository. Takes about 10 minutes.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
peers=${PEERS:-$repo/../shared/peers}
out=$(realpath -m "${1:-$repo/results/compare-$(date -u +%Y%m%d-%H%M).md}") # the peers run elsewhere
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$peers"/. "$work"/
make -C "$repo" build >/dev/null
go build -o "$work/allreduce" "$repo/examples/allreduce"
sizes=4KiB,1MiB,16MiB,64MiB
{
    echo "# gorun vs Open MPI (TCP) and Gloo, $(date -u +%Y-%m-%dT%H:%MZ)"
    echo
    echo "Same machine, same sitting. Peers: \`ONLY=\"ompi-tcp gloo\" REPS=${REPS:-1} run_peers.sh\`;"
    echo "gorun: \`gorun -np N examples/allreduce -sizes $sizes -target 1s\` (median over ~50 ms batches, max over ranks)."
    echo
} > "$out"
for rep in $(seq "${GORUN_REPS:-2}"); do
    for n in 2 4; do
        echo "## gorun N=$n (run $rep)" >> "$out"
        echo '```' >> "$out"
        "$repo/bin/gorun" --tag-output=false -np "$n" "$work/allreduce" -sizes "$sizes" -target 1s >> "$out"
        echo '```' >> "$out"
    done
done
(cd "$work" && ONLY="ompi-tcp gloo" REPS="${REPS:-1}" NOTES="$work/peers.md" bash run_peers.sh > "${out%.md}.peers.log" 2>&1) || echo "peers failed: see ${out%.md}.peers.log"
sed -n '/^## Results/,/^<!--/p' "$work/peers.md" >> "$out" 2>/dev/null || cat "$work/peers.md" >> "$out"
echo "wrote $out"
