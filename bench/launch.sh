#!/usr/bin/env bash
# Launch latency: time from starting the launcher until every one of 6 ranks
# on 3 test hosts (2 slots each) runs, median of RUNS (default 5), for gorun
# and, if installed, Open MPI's mpirun with the same ssh command.
# Needs root (scripts/testhosts.sh); brings 3 hosts up and takes them down.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
tn=${TESTNET:-$repo/scripts/testhosts.sh}
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
if command -v mpicc.mpich >/dev/null && command -v mpiexec.hydra >/dev/null; then
    # Each rank of an MPICH program writes the time MPI_Init returned.
    cat > "$stamp/init.c" <<EOF
#include <mpi.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    char p[512];
    snprintf(p, sizeof p, "$stamp/start.%d", (int)getpid());
    FILE *f = fopen(p, "w");
    fprintf(f, "%lld\n", (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
    fclose(f);
    MPI_Finalize();
    return 0;
}
EOF
    mpicc.mpich -O1 -o "$stamp/init" "$stamp/init.c"
    printf '#!/bin/sh\nexec %s "$@"\n' "$TESTNET_SSH" > "$stamp/ssh"
    chmod +x "$stamp/ssh"
    sed 's/ slots=/:/' "$TESTNET_HOSTFILE" > "$stamp/hosts.hydra"
    g=(); h=(); r=()
    for _ in $(seq "$runs"); do
        a=$(measure "$repo/bin/gorun" --ssh "$TESTNET_SSH" -hostfile "$TESTNET_HOSTFILE" -np 6 "$stamp/init")
        b=$(measure mpiexec.hydra -localhost 198.18.0.1 -launcher ssh -launcher-exec "$stamp/ssh" -f "$stamp/hosts.hydra" -n 6 "$stamp/init")
        g+=("$a"); h+=("$b"); r+=("$(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.2f", a / b}')")
    done
    echo "MPICH program, launch to MPI_Init done in all 6 ranks, gorun (PMI-1): median $(printf '%s\n' "${g[@]}" | median) ms (${g[*]})"
    echo "MPICH program, launch to MPI_Init done in all 6 ranks, mpiexec.hydra: median $(printf '%s\n' "${h[@]}" | median) ms (${h[*]})"
    echo "gorun / mpiexec.hydra, run by run: ${r[*]}"
fi
rm -rf "$stamp"
