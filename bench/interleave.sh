#!/usr/bin/env bash
# Interleave all-reduce sweeps of gorun and the MPI libraries run by run,
# so that drift of the machine hits all alike, and print per round the
# 4 KiB time and the busbw at 1, 16 and 64 MiB, then the ratios gorun /
# Open MPI default from the same rounds.
#   bash bench/interleave.sh [ROUNDS] [NS]     (defaults: 3, "2 4")
#   SIZES="4KiB 1MiB" bash bench/interleave.sh 3 "8 16"   a subset of the sizes
# Runs, each round and N:
#   gorun          gorun's defaults (shared memory between ranks on one host)
#   gorun-tcp      the same with GORUN_SHM=0 (loopback TCP)
#   ompi-default   mpirun with no flags (Open MPI's shared memory)
#   ompi-tcp       Open MPI over TCP only (--mca btl tcp,self)
#   mpich-default  MPICH's mpiexec with no flags
# Needs openmpi-bin libopenmpi-dev mpich libmpich-dev and
# bench/mpi/allreduce_mpi.c. Set ONLY="gorun ompi-default" for a subset.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
rounds=${1:-3}
ns=${2:-"2 4"}
only=${ONLY:-"gorun gorun-tcp ompi-default ompi-tcp mpich-default"}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
make -C "$repo" build >/dev/null
go build -o "$work/allreduce" "$repo/examples/allreduce"
mpicc.openmpi -O2 -o "$work/mpi_ompi" "$repo/bench/mpi/allreduce_mpi.c"
if command -v mpicc.mpich >/dev/null; then
    mpicc.mpich -O2 -o "$work/mpi_mpich" "$repo/bench/mpi/allreduce_mpi.c"
fi
export OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_btl_tcp_if_include=lo
want=${SIZES:-"4KiB 1MiB 16MiB 64MiB"}
sizes=$(for s in $want; do case $s in 4KiB) echo 4096 ;; *MiB) echo $((${s%MiB} * 1048576)) ;; *)
    echo "interleave.sh: SIZES takes 4KiB and n MiB, not $s" >&2
    exit 2
    ;;
esac; done | xargs)
gsizes=$(echo "$want" | tr ' ' ,)
# Each runner prints "4KiB <us> 1MiB <busbw> 16MiB <busbw> 64MiB <busbw>".
gorun_run() { # N [extra gorun flags]
    local n=$1
    shift
    "$repo/bin/gorun" --tag-output=false -np "$n" "$@" "$work/allreduce" -sizes "$gsizes" -target 1s |
        awk '/^ *4KiB/ {printf "4KiB %s ", $2} /^ *(1|16|64)MiB/ {printf "%s %s ", $1, $5} END {print ""}'
}
mpi_run() { # launcher... ; the harness prints "bytes time_us busbw_GBps"
    # shellcheck disable=SC2068
    $@ 2>/dev/null | awk '/^[0-9]/ {
        if ($1 == 4096) printf "4KiB %s ", $2; else printf "%dMiB %s ", $1 / 1048576, $3 } END {print ""}'
}
run() { # name N
    case $1 in
    gorun) gorun_run "$2" ;;
    gorun-tcp) gorun_run "$2" -x GORUN_SHM=0 ;;
    # shellcheck disable=SC2086
    ompi-default) mpi_run mpirun --allow-run-as-root --oversubscribe -np "$2" "$work/mpi_ompi" "$gsizes" 1.0 ;;
    # shellcheck disable=SC2086
    ompi-tcp) mpi_run mpirun --allow-run-as-root --oversubscribe -np "$2" --mca pml ob1 --mca btl tcp,self "$work/mpi_ompi" "$gsizes" 1.0 ;;
    # shellcheck disable=SC2086
    mpich-default) [ -x "$work/mpi_mpich" ] && mpi_run mpiexec.mpich -n "$2" "$work/mpi_mpich" "$gsizes" 1.0 ;;
    esac
}
log="$work/log"
for r in $(seq "$rounds"); do
    for n in $ns; do
        for c in $only; do
            line=$(run "$c" "$n" || true)
            echo "round $r N=$n $c: $line" | tee -a "$log"
        done
    done
done
# Ratios from the same round: time at 4 KiB (gorun/ompi, lower is better)
# and busbw (gorun/ompi, higher is better).
echo
echo "# gorun / ompi-default, per round (4KiB: time ratio; MiB sizes: busbw ratio)"
awk '{ split($3, a, "="); n = a[2]; name = $4; sub(":", "", name)
       for (i = 5; i + 1 <= NF; i += 2) v[$2, n, name, $i] = $(i + 1) }
     END { for (k in v) { split(k, p, SUBSEP); if (p[3] == "gorun") {
               o = v[p[1], p[2], "ompi-default", p[4]]; if (o > 0) printf "round %s N=%s %s: %.2f\n", p[1], p[2], p[4], v[k] / o } } }' \
    "$log" | sort -k2,2 -k3,3 -k1,1n -k4,4
