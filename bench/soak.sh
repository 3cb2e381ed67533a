#!/usr/bin/env bash
# Random-fault soaks of an elastic job on test hosts (scripts/testhosts.sh):
# 8 ranks on 4 hosts under gorun --elastic --max-restarts, struck from
# outside for 60 s per run by a fault every 2 to 5 s (kills, freezes, a
# restarted rank struck again while it joins, a host cut off the network
# for 3 s), then 5 s without. Prints a table, a row per run: faults by
# kind, restarts, steps, ranks out at the end, the longest time a rank
# stayed out, gorun's exit and the verdict (exit 1 if a run did not heal).
#   bash bench/soak.sh [RUNS] [FOR]        (defaults: 10, 60s)
#   SEED, HOSTS, SLOTS and RATE change the seed and the test network;
#   ARGS passes more flags to bench/soak (e.g. ARGS="-faults kill,cut -v").
# Needs root; brings the hosts up and takes them down.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
tn=$repo/scripts/testhosts.sh
runs=${1:-10}
for=${2:-60s}
export TESTNET_DIR=${TESTNET_DIR:-/tmp/gorun-soak-bench}
make -C "$repo" build >/dev/null
go build -o "$repo/bin/selftest" "$repo/examples/selftest"
go build -o "$repo/bin/soak" "$repo/bench/soak"
rate=()
[ -z "${RATE:-}" ] || rate=(--rate "$RATE")
bash "$tn" up "${HOSTS:-4}" --slots "${SLOTS:-2}" "${rate[@]}" >/dev/null
trap 'bash "$tn" down >/dev/null' EXIT
echo "gorun $(git -C "$repo" rev-parse --short HEAD), $(date -u +%Y-%m-%d), ${HOSTS:-4} hosts x ${SLOTS:-2} slots ${RATE:-unlimited}"
# shellcheck disable=SC2086
"$repo/bin/soak" -testnet "$TESTNET_DIR" -gorun "$repo/bin/gorun" -program "$repo/bin/selftest" \
    -np $(( ${HOSTS:-4} * ${SLOTS:-2} )) -runs "$runs" -for "$for" ${SEED:+-seed "$SEED"} ${ARGS:-}
