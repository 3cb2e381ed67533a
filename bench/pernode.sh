#!/usr/bin/env bash
# A per-node start (gorun --nnodes, docs/per-node.md) against an SSH start
# of the same job on test hosts (scripts/testhosts.sh), run after run: N
# hosts with P ranks each run examples/hello (join, one all-reduce, exit).
# For the per-node start every node but 0 is started first (inside its
# host, as a pod would be: ip netns exec, no SSH) and keeps dialing; the
# time is node 0's, from its start to the job's end. For the SSH start it
# is gorun's with the same hosts in a hostfile.
#   bash bench/pernode.sh [ROUNDS] [HOSTS] [P]     (defaults: 3, 16, 1)
# Needs root; brings the hosts up and takes them down.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
tn=$repo/scripts/testhosts.sh
rounds=${1:-3}
hosts=${2:-16}
per=${3:-1}
export TESTNET_DIR=${TESTNET_DIR:-/tmp/gorun-pernode-bench}
make -C "$repo" build >/dev/null
go build -o "$repo/bin/hello" "$repo/examples/hello"
bash "$tn" up "$hosts" --slots "$per" >/dev/null
trap 'bash "$tn" down >/dev/null' EXIT
# shellcheck disable=SC1091
. "$TESTNET_DIR/env"
GORUN_JOB_SECRET=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
export GORUN_JOB_SECRET
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
for r in $(seq "$rounds"); do
    for i in $(seq 1 $((hosts - 1))); do
        ip netns exec "gr-h$((i + 1))" "$repo/bin/gorun" --nnodes "$hosts" --node-rank "$i" \
            --rendezvous 198.18.0.11:29400 --nproc-per-node "$per" "$repo/bin/hello" >/dev/null 2>&1 &
    done
    sleep 1 # every other node is dialing
    s=$(date +%s%N)
    ip netns exec gr-h1 "$repo/bin/gorun" --nnodes "$hosts" --node-rank 0 --rendezvous 198.18.0.11:29400 \
        --nproc-per-node "$per" "$repo/bin/hello" > /tmp/pernode.out 2>&1
    node=$(ms "$s")
    wait
    ok=$(grep -c "expected" /tmp/pernode.out || true)
    s=$(date +%s%N)
    "$repo/bin/gorun" --ssh "$TESTNET_SSH" -hostfile "$TESTNET_HOSTFILE" "$repo/bin/hello" > /tmp/pernode.out 2>&1
    ssh=$(ms "$s")
    echo "round $r: $((hosts * per)) ranks on $hosts hosts: per-node start $node ms ($ok ranks reported), SSH start $ssh ms"
done
