#!/usr/bin/env bash
# ParamHub over shared memory against over loopback TCP, on one host,
# interleaved run by run: gorun --strategy hub with GORUN_SHM=1 and =0.
# Prints the time per size for each run and the ratio shm / TCP from the
# same round (below 1: shared memory is faster).
#   bash bench/hubshm.sh [ROUNDS] [SIZES]   (defaults: 4, 4KiB,64KiB,1MiB,16MiB)
#   NP (default 2) ranks; HUBS=K uses K dedicated hubs instead of a hub
#   colocated in rank 0. GORUN and ALLREDUCE name the binaries to run
#   (default: built into bin/).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
rounds=${1:-4}
sizes=${2:-4KiB,64KiB,1MiB,16MiB}
gorun=${GORUN:-$repo/bin/gorun}
allreduce=${ALLREDUCE:-$repo/bin/allreduce}
if [ -z "${GORUN:-}" ]; then make -C "$repo" build >/dev/null; fi
if [ -z "${ALLREDUCE:-}" ]; then go build -o "$allreduce" "$repo/examples/allreduce"; fi
hubs=()
if [ -n "${HUBS:-}" ]; then hubs=(--hubs "$HUBS"); fi
run() { # shm
    "$gorun" --tag-output=false -np "${NP:-2}" --strategy hub "${hubs[@]}" -x GORUN_SHM="$1" \
        "$allreduce" -sizes "$sizes" -target "${TARGET:-1s}" |
        awk '/iB/ {printf "%s %s ", $1, $2} END {print ""}'
}
for r in $(seq "$rounds"); do
    shm=$(run 1)
    tcp=$(run 0)
    echo "round $r hub-shm (us): $shm"
    echo "round $r hub-tcp (us): $tcp"
    paste <(echo "$shm" | tr ' ' '\n' | paste - -) <(echo "$tcp" | tr ' ' '\n' | paste - -) |
        awk -v r="$r" 'NF == 4 && $4 > 0 {printf "round %s %s shm/tcp time: %.2f\n", r, $1, $2 / $4}'
done
