#!/usr/bin/env bash
# Many ranks: the wall time of a whole small job (start, join, exact
# all-reduces of 8 B, 32 KiB and 2 MiB, a broadcast, a barrier, exit) under
# gorun, Open MPI's mpirun and MPICH's mpiexec.hydra, the same program shape
# for each (examples/scale, bench/mpi/scale_mpi.c), interleaved run by run (the
# order rotates each round), plus the join time (start to Join / MPI_Init
# done, max over ranks), peak shared memory during the run (Shmem in
# /proc/meminfo every 50 ms, less what was there before: it counts the
# segments a rank has mapped and already unlinked, which du on /dev/shm
# misses), the peak RSS and open sockets per rank,
# the exit time (rank 0's Close / MPI_Finalize), and where the wall time
# went: when the last rank started, had joined and had done its collectives
# (started, joined, worked: ms from the launcher's start; the test hosts
# share this machine's clock) and the tail from there to the launcher's exit.
#   bash bench/scale.sh [ROUNDS] [MODE] [SIZES]        (defaults: 3, local)
#   MODE local: SIZES = rank counts on this machine (default "2 4 8 16 32")
#   MODE hosts: SIZES = test host counts H (default "4 8 16 32"); each H
#               brings up H hosts with SLOTS slots (default 2;
#               scripts/testhosts.sh, needs root) and runs N = SLOTS*H ranks
#   MODE slurm: the same hosts made a Slurm cluster (testhosts.sh slurm);
#               every run is one `salloc -N H --ntasks-per-node=SLOTS`, and
#               its wall time is taken inside the allocation: gorun starts
#               its agents with srun, mpiexec.hydra with -launcher slurm,
#               Open MPI's mpirun with its plm slurm (default "4 16 32")
# Prints a table per size (median and min-max per runner; gorun/hydra and
# gorun/mpirun per round) and writes every run to OUT (default
# results/scale/<date>-<commit>.tsv), the tables to OUT's .txt and a chart of wall
# time against N to OUT's .png. A failed run is a row FAIL with its exit
# code (124: it took longer than TIMEOUT, default 300 s).
# ONLY="gorun hydra" runs a subset of gorun, mpirun and hydra. SCALE_ARGS
# are passed to gorun's job (examples/scale: -log info logs the runtime's
# messages of level info and above, e.g. a Close that waited for a peer);
# LOGS=DIR keeps every run's output as DIR/RUNNER-N-ROUND.out/.err.
# HOGS=K keeps K busy processes (spinning shell loops) running on this
# machine through every run: the jobs beside other work.
# Needs openmpi-bin libopenmpi-dev mpich libmpich-dev.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
tn=${TESTNET:-$repo/scripts/testhosts.sh}
rounds=${1:-3}
mode=${2:-local}
case $mode in
local) sizes=${3:-"2 4 8 16 32"} ;;
hosts) sizes=${3:-"4 8 16 32"} ;;
slurm) sizes=${3:-"4 16 32"} ;;
*)
    echo "usage: bash bench/scale.sh [ROUNDS] [local|hosts|slurm] [SIZES]" >&2
    exit 2
    ;;
esac
only=${ONLY:-"gorun mpirun hydra"}
limit=${TIMEOUT:-300}
slots=${SLOTS:-2}
out=${OUT:-$repo/results/scale/$(date +%F)-$(git -C "$repo" rev-parse --short HEAD).tsv}
mkdir -p "$(dirname "$out")"
work=$(mktemp -d)
hogs=()
cleanup() {
    for p in "${hogs[@]}"; do kill -- "-$p" 2>/dev/null || kill "$p" 2>/dev/null || true; done
    if [ "$mode" != local ]; then bash "$tn" down >/dev/null 2>&1 || true; fi
    rm -rf "$work"
}
trap cleanup EXIT
make -C "$repo" build >/dev/null
(cd "$repo" && go build -o "$work/scale" ./examples/scale)
mpicc.openmpi -O2 -o "$work/scale_ompi" "$repo/bench/mpi/scale_mpi.c"
mpicc.mpich -O2 -o "$work/scale_mpich" "$repo/bench/mpi/scale_mpi.c"
for _ in $(seq "${HOGS:-0}"); do
    setsid sh -c 'while :; do :; done' &
    hogs+=($!)
done
printf '%s\n' mode hosts n round runner status rc wall_s shm_peak_kib join_ms_max rss_kib_max sockets_max sockets_mean exit_ms \
    started_ms joined_ms worked_ms |
    paste -sd '\t' >"$out"

if [ "$mode" != local ]; then
    # Test hosts in network namespaces share the kernel's neighbour (ARP)
    # table, 1024 entries by default: 32 hosts that talk to many others
    # overflow it ("neighbor table overflow" in dmesg) and SYNs between
    # some pairs go unanswered. Real hosts each have their own table.
    sysctl -qw net.ipv4.neigh.default.gc_thresh1=4096 net.ipv4.neigh.default.gc_thresh2=8192 net.ipv4.neigh.default.gc_thresh3=16384 || true
    export TESTNET_DIR=${TESTNET_DIR:-/tmp/gorun-scale-bench}
    printf '#!/bin/sh\nexec %s "$@"\n' "ssh -F $TESTNET_DIR/ssh_config" >"$work/ssh"
    chmod +x "$work/ssh"
    # In an allocation: the wall time from inside it (salloc's own wait for
    # the nodes is not the launcher's).
    printf '%s\n' '#!/bin/sh' 't0=$(date +%s.%N)' '"$@"' 'rc=$?' 't1=$(date +%s.%N)' \
        'echo "$t0 $t1" >"$TIMED_OUT"' 'exit $rc' >"$work/timed"
    chmod +x "$work/timed"
else
    export OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_btl_tcp_if_include=lo
fi

cmd() { # RUNNER N -> the command line, one word a line
    local runner=$1 n=$2
    if [ "$mode" = local ]; then
        case $runner in
        gorun) printf '%s\n' "$repo/bin/gorun" --tag-output=false -q -np "$n" "$work/scale" ${SCALE_ARGS:-} ;;
        mpirun) printf '%s\n' mpirun --allow-run-as-root --oversubscribe -np "$n" "$work/scale_ompi" ;;
        hydra) printf '%s\n' mpiexec.hydra -n "$n" "$work/scale_mpich" ;;
        esac
    elif [ "$mode" = slurm ]; then
        printf '%s\n' env SLURM_CONF="$TESTNET_SLURM_CONF" TIMED_OUT="$work/inner" salloc -Q -N "$h" \
            --ntasks-per-node="$slots" -J "bench-$runner" "$work/timed"
        case $runner in
        gorun) printf '%s\n' "$repo/bin/gorun" --tag-output=false -q --launcher srun "$work/scale" ${SCALE_ARGS:-} ;;
        mpirun) printf '%s\n' env OMPI_MCA_oob_tcp_if_include=198.18.0.0/24 OMPI_MCA_btl_tcp_if_include=198.18.0.0/24 \
            mpirun --allow-run-as-root -np "$n" "$work/scale_ompi" ;;
        hydra) printf '%s\n' mpiexec.hydra -launcher slurm -localhost 198.18.0.1 -n "$n" "$work/scale_mpich" ;;
        esac
    else
        case $runner in
        gorun) printf '%s\n' "$repo/bin/gorun" --tag-output=false -q --ssh "$TESTNET_SSH" \
            -hostfile "$TESTNET_HOSTFILE" -np "$n" "$work/scale" ${SCALE_ARGS:-} ;;
        mpirun) printf '%s\n' env OMPI_MCA_oob_tcp_if_include=198.18.0.0/24 OMPI_MCA_btl_tcp_if_include=198.18.0.0/24 \
            mpirun --allow-run-as-root --mca plm_rsh_agent "$TESTNET_SSH" -hostfile "$TESTNET_HOSTFILE" \
            -np "$n" "$work/scale_ompi" ;;
        hydra) printf '%s\n' mpiexec.hydra -localhost 198.18.0.1 -launcher ssh -launcher-exec "$work/ssh" \
            -f "$work/hosts.hydra" -n "$n" "$work/scale_mpich" ;;
        esac
    fi
}

shm_kib() { awk '/^Shmem:/ { print $2 }' /proc/meminfo; }

# One run: appends a row to $out.
run() { # RUNNER HOSTS N ROUND
    local runner=$1 h=$2 n=$3 r=$4 line
    mapfile -t line < <(cmd "$runner" "$n")
    local base
    base=$(shm_kib)
    echo 0 >"$work/shm"
    (
        set +e
        peak=0
        while :; do
            v=$(shm_kib)
            if [ "${v:-0}" -gt "$peak" ]; then
                peak=$v
                echo "$peak" >"$work/shm"
            fi
            sleep 0.05
        done
    ) &
    local watch=$!
    local t0 t1 rc=0
    rm -f "$work/inner"
    t0=$(date +%s.%N)
    timeout -k 10 "$limit" "${line[@]}" >"$work/stdout" 2>"$work/stderr" </dev/null || rc=$?
    t1=$(date +%s.%N)
    if [ "$mode" = slurm ] && [ -s "$work/inner" ]; then
        read -r t0 t1 <"$work/inner"
    fi
    kill "$watch" 2>/dev/null || true
    wait "$watch" 2>/dev/null || true
    if [ -n "${LOGS:-}" ]; then
        mkdir -p "$LOGS"
        cp "$work/stdout" "$LOGS/$runner-$n-$r.out"
        cp "$work/stderr" "$LOGS/$runner-$n-$r.err"
    fi
    local peak status=ok
    peak=$(($(cat "$work/shm") - base))
    if [ "$peak" -lt 0 ]; then peak=0; fi
    local got
    got=$(grep '^scale ' "$work/stdout" || true)
    if [ "$rc" != 0 ] || ! grep -q '^scale n=' <<<"$got"; then
        status=FAIL
        [ "$rc" != 0 ] || rc=-1
        echo "  $runner N=$n round $r: FAIL (exit $rc): $(tail -3 "$work/stderr" | tr '\n' ' ' | cut -c1-300)" >&2
    fi
    # "scale n=8 join_ms_max=1.2 ...", "scale exit_ms=..." -> the five
    # figures, "-" if missing
    local vals
    # and the last rank's start, join and end of work, in ms from the
    # launcher's start (the test hosts share this machine's clock)
    vals=$(echo "$got" | awk -v t0="$t0" '{ for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } }
        END { split("join_ms_max rss_kib_max sockets_max sockets_mean exit_ms", k, " ")
              for (i = 1; i <= 5; i++) printf "%s%s", (i > 1 ? "\t" : ""), (v[k[i]] == "" ? "-" : v[k[i]])
              split("started_unix_ms joined_unix_ms worked_unix_ms", u, " ")
              for (i = 1; i <= 3; i++) printf "\t%s", (v[u[i]] == "" ? "-" : sprintf("%.1f", v[u[i]] - t0 * 1000)) }')
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$mode" "$h" "$n" "$r" "$runner" "$status" "$rc" \
        "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')" "$peak" "$vals" >>"$out"
}

# The table of one size from $out.
table() { # N
    awk -F '\t' -v n="$1" -v mode="$mode" '
    function med(s,   a, k, i, j, t) { k = split(s, a, " "); for (i = 2; i <= k; i++) for (j = i; j > 1 && a[j-1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
        return k == 0 ? "-" : (k % 2 ? a[(k+1)/2] : (a[k/2] + a[k/2+1]) / 2) }
    function lo(s,   a, k, i, m) { k = split(s, a, " "); m = a[1]; for (i = 2; i <= k; i++) if (a[i] + 0 < m + 0) m = a[i]; return m }
    function hi(s,   a, k, i, m) { k = split(s, a, " "); m = a[1]; for (i = 2; i <= k; i++) if (a[i] + 0 > m + 0) m = a[i]; return m }
    NR > 1 && $1 == mode && $3 == n {
        if (!($5 in seen)) { seen[$5] = 1; order[++nr] = $5 }
        runs[$5]++; h = $2
        if ($6 != "ok") { fails[$5]++; next }
        w[$5] = w[$5] " " $8; wall[$5, $4] = $8; if ($4 > maxr) maxr = $4
        sh[$5] = sh[$5] " " $9; j[$5] = j[$5] " " $10; rs[$5] = rs[$5] " " $11; sm[$5] = sm[$5] " " $12; sa[$5] = sa[$5] " " $13; ex[$5] = ex[$5] " " $14
        st[$5] = st[$5] " " $15; jd[$5] = jd[$5] " " $16; wk[$5] = wk[$5] " " $17; tl[$5] = tl[$5] " " ($8 * 1000 - $17)
    }
    END {
        printf "\n%s N=%d%s\n", mode, n, (mode != "local" ? " (" h " hosts x " n / h ")" : "")
        printf "  %-7s %4s %10s %17s %9s %9s %9s %10s %8s %8s %8s %8s %8s %8s\n", "runner", "ok", "wall_s", "min-max", "join_ms", "exit_ms", "shm_KiB", "rss_KiB", "sock_max", "sock_avg", "started", "joined", "worked", "tail"
        for (i = 1; i <= nr; i++) { r = order[i]
            printf "  %-7s %2d/%-2d %9s %8s-%-8s %9s %9s %9s %10s %8s %8s %8s %8s %8s %8s\n", r, runs[r] - fails[r], runs[r],
                w[r] == "" ? "-" : med(w[r]), w[r] == "" ? "-" : lo(w[r]), w[r] == "" ? "-" : hi(w[r]),
                med(j[r]), med(ex[r]), med(sh[r]), med(rs[r]), med(sm[r]), med(sa[r]), med(st[r]), med(jd[r]), med(wk[r]), med(tl[r]) }
        for (k = 1; k <= 2; k++) { o = (k == 1 ? "hydra" : "mpirun"); if (!(o in seen) || !("gorun" in seen)) continue
            line = ""; for (rd = 1; rd <= maxr; rd++) if ((("gorun", rd) in wall) && ((o, rd) in wall)) line = line sprintf(" %.2f", wall["gorun", rd] / wall[o, rd])
            printf "  gorun/%s wall, round by round:%s\n", o, line == "" ? " -" : line }
    }' "$out"
}

txt=${out%.tsv}.txt
: >"$txt"
for size in $sizes; do
    if [ "$mode" != local ]; then
        h=$size
        n=$((slots * h))
        bash "$tn" up "$h" --slots "$slots" >/dev/null
        [ "$mode" != slurm ] || bash "$tn" slurm >/dev/null
        # shellcheck disable=SC1091
        . "$TESTNET_DIR/env"
        sed 's/ slots=/:/' "$TESTNET_HOSTFILE" >"$work/hosts.hydra"
    else
        h=1
        n=$size
    fi
    read -ra runners <<<"$only"
    for r in $(seq "$rounds"); do
        k=${#runners[@]}
        for i in $(seq 0 $((k - 1))); do
            run "${runners[$(((i + r - 1) % k))]}" "$h" "$n" "$r"
        done
    done
    table "$n" | tee -a "$txt"
done
echo
if (cd "$repo" && go run ./bench/scalechart -in "$out" -out "${out%.tsv}.png"); then
    echo "runs: $out, tables: $txt, chart: ${out%.tsv}.png"
else
    echo "runs: $out, tables: $txt (no chart)"
fi
