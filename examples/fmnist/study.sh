#!/usr/bin/env bash
# The orchestration study: every mode, without and with a straggler (rank
# 3 four times slower), on 4 local ranks (or pass launch flags, e.g.
# `--ssh "$TESTNET_SSH" -hostfile "$TESTNET_HOSTFILE"`), for DURATION each.
# Usage: examples/fmnist/study.sh [DURATION] [LAUNCH FLAGS...]
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
dur=${1:-3s}
shift || true
make -C "$repo" build >/dev/null
go build -o "$repo/bin/fmnist" "$repo/examples/fmnist"
for straggler in "" "-straggler 3 -slow 4"; do
    # shellcheck disable=SC2086
    "$repo/bin/gorun" -np 4 "$@" "$repo/bin/fmnist" -mode ring -duration "$dur" $straggler
    for mode in bsp ssp asp lbbsp; do
        # shellcheck disable=SC2086
        "$repo/bin/gorun" -np 4 --strategy hub "$@" "$repo/bin/fmnist" -mode "$mode" -duration "$dur" $straggler
    done
done
