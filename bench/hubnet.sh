#!/usr/bin/env bash
# ParamHub against the ring on 4 test hosts with 1 Gbit/s links (one rank
# per host), for K = 1, 2 and 4 dedicated hubs placed beside the ranks (hub
# h on host h), with `gorun bench`. Needs root (scripts/testhosts.sh); brings
# the hosts up and takes them down. Usage: bench/hubnet.sh [SIZES] [TARGET]
#   HUBS="1 2 4"  the hub counts, in this order
#   RATE=1gbit    the hosts' link rate
#   PARTITION=4MiB  gorun bench --partition: the largest partition
#   GORUN=path    the gorun binary to run (default: make build, bin/gorun);
#                 a list "old new" runs each in turn for every hub count
#                 (alternated, to compare builds on a noisy machine)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
tn=${TESTNET:-$repo/scripts/testhosts.sh}
sizes=${1:-4MiB,16MiB}
target=${2:-3s}
export TESTNET_DIR=${TESTNET_DIR:-/tmp/gorun-hub-bench}
gorun=${GORUN:-}
if [ -z "$gorun" ]; then
    make -C "$repo" build >/dev/null
    gorun=$repo/bin/gorun
fi
bash "$tn" up 4 --slots 1 --rate "${RATE:-1gbit}" >/dev/null
trap 'bash "$tn" down >/dev/null' EXIT
# shellcheck disable=SC1091
. "$TESTNET_DIR/env"
for k in ${HUBS:-1 2 4}; do
    for g in $gorun; do
        echo "## --hubs $k ($g)"
        "$g" bench --ssh "$TESTNET_SSH" -hostfile "$TESTNET_HOSTFILE" -np 4 \
            --hubs "$k" --sizes "$sizes" --target "$target" --partition "${PARTITION:-4MiB}"
        echo
    done
done
