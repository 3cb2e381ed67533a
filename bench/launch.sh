#!/usr/bin/env bash
# Launch latency: time from starting the launcher until every one of 6 ranks
# on 3 test hosts (2 slots each) runs, median of RUNS (default 5), for gorun
# and, if installed, Open MPI's mpirun with the same ssh command.
# Needs root and ../shared/testnet; brings 3 hosts up and takes them down.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
tn=${TESTNET:-$repo/../shared/testnet/testnet.sh}
runs=${RUNS:-5}
export TESTNET_DIR=${TESTNET_DIR:-/tmp/gorun-launch-bench}
make -C "$repo" build >/dev/null
bash "$tn" up 3 --slots 2 >/dev/null
trap 'bash "$tn" down >/dev/null' EXIT
# shellcheck disable=SC1091
. "$TESTNET_DIR/env"
stamp=$(mktemp -d)
# Each rank writes the time it started; latency = latest start - launch.
prog="$stamp/rank.sh"
printf '#!/bin/sh\ndate +%%s%%N > %s/start.$$\n' "$stamp" > "$prog"
chmod +x "$prog"
measure() { # command... -> ms until all 6 ranks started
    rm -f "$stamp"/start.*
    local t0; t0=$(date +%s%N)
    "$@" >/dev/null 2>&1
    local n; n=$(ls "$stamp"/start.* | wc -l)
    [ "$n" = 6 ] || { echo "only $n ranks ran" >&2; return 1; }
    local last; last=$(cat "$stamp"/start.* | sort -n | tail -1)
    echo $(( (last - t0) / 1000000 ))
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
report() { # name command...
    local name=$1; shift
    local all=()
    for _ in $(seq "$runs"); do all+=("$(measure "$@")"); done
    echo "$name: median $(printf '%s\n' "${all[@]}" | median) ms over $runs runs (${all[*]})"
}
report gorun "$repo/bin/gorun" --ssh "$TESTNET_SSH" -hostfile "$TESTNET_HOSTFILE" -np 6 "$prog"
if command -v mpirun >/dev/null; then
    report "mpirun (Open MPI $(mpirun --version 2>&1 | head -1 | awk '{print $NF}'))" \
        env OMPI_MCA_oob_tcp_if_include=198.18.0.0/24 OMPI_MCA_btl_tcp_if_include=198.18.0.0/24 \
        mpirun --allow-run-as-root --mca plm_rsh_agent "$TESTNET_SSH" -hostfile "$TESTNET_HOSTFILE" -np 6 "$prog"
fi
rm -rf "$stamp"
