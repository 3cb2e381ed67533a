#!/usr/bin/env bash
# Node-aware against flat ring on 2 test hosts x 2 ranks with 1 Gbit/s
# links (scripts/testhosts.sh), interleaved run by run. Prints busbw per run
# and the ratio node-aware / flat from the same round.
#   bash bench/nodeaware.sh [ROUNDS] [SIZES]     (defaults: 3, 16MiB)
#   COLL=reducescatter|allgather|broadcast picks the collective (all-reduce
#   by default); HOSTS and RATE change the test network.
# Needs root; brings the hosts up and takes them down.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
tn=${TESTNET:-$repo/scripts/testhosts.sh}
rounds=${1:-3}
sizes=${2:-16MiB}
export TESTNET_DIR=${TESTNET_DIR:-/tmp/gorun-nodeaware-bench}
make -C "$repo" build >/dev/null
go build -o "$repo/bin/allreduce" "$repo/examples/allreduce"
bash "$tn" up "${HOSTS:-2}" --slots 2 --rate "${RATE:-1gbit}" >/dev/null
trap 'bash "$tn" down >/dev/null' EXIT
# shellcheck disable=SC1091
. "$TESTNET_DIR/env"
np=$((2 * ${HOSTS:-2}))
run() { # algo
    "$repo/bin/gorun" --tag-output=false --ssh "$TESTNET_SSH" -hostfile "$TESTNET_HOSTFILE" -np "$np" \
        "$repo/bin/allreduce" -coll "${COLL:-allreduce}" -algo "$1" -sizes "$sizes" -target "${TARGET:-3s}" |
        awk '/iB/ {printf "%s %s ", $1, $5} END {print ""}'
}
for r in $(seq "$rounds"); do
    na=$(run hierarchical)
    flat=$(run ring)
    echo "round $r node-aware: $na"
    echo "round $r flat ring:  $flat"
    paste <(echo "$na" | tr ' ' '\n' | paste - -) <(echo "$flat" | tr ' ' '\n' | paste - -) |
        awk -v r="$r" -v c="${COLL:-allreduce}" 'NF == 4 && $4 > 0 {printf "round %s %s %s node-aware/flat busbw: %.2f\n", r, $1, c, $2 / $4}'
done
