#!/usr/bin/env bash
# torch.distributed on gorun's backend against Gloo, interleaved run by run
# on this machine: all_reduce from 4 KiB to 64 MiB at 2 and 4 ranks, and the
# Fashion-MNIST CNN trainer at 4 ranks (Gloo, gorun ring, gorun hub).
#
#   bash bench/torch/compare.sh [ROUNDS]      (default 3)
#
# Needs Debian's PyTorch (/usr/bin/python3, python3-torch); builds bin/gorun
# and the Python package's library. Prints one Markdown table per part with
# every round's figures and the gorun/Gloo time ratio.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
make -s build python >/dev/null
export PYTHONPATH=$PWD/python OMP_NUM_THREADS=1
sizes=4096,65536,1048576,16777216,67108864
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for r in $(seq 1 "$rounds"); do
    for np in 2 4; do
        for b in gloo gorun; do
            bin/gorun -q -np "$np" /usr/bin/python3 bench/torch/allreduce.py --backend "$b" --sizes "$sizes" |
                sed -n "s/^\[0\] //p" | sed "s/^/round=$r /" >> "$tmp/ar"
        done
    done
    for run in "gloo:" "gorun:" "gorun:--strategy hub"; do
        b=${run%%:*} flags=${run#*:}
        # shellcheck disable=SC2086 # flags split on purpose
        bin/gorun -q -np 4 $flags /usr/bin/python3 examples/torch_fmnist/train.py --backend "$b" --model cnn \
            --epochs 2 --train 10000 --test 2000 | sed -n "s/^\[0\] final //p" |
            sed "s/^/round=$r strategy=${flags:+hub} /" >> "$tmp/train"
    done
done

echo "## all_reduce (float32), median of timed calls; ratio = gorun / Gloo time"
echo
echo "| round | ranks | bytes | Gloo µs | gorun µs | ratio | Gloo busbw GB/s | gorun busbw GB/s |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
awk '{for(i=1;i<=NF;i++){split($i,kv,"=");v[kv[1]]=kv[2]} k=v["round"]" "v["np"]" "v["size"]; t[k,v["backend"]]=v["median_us"]; bw[k,v["backend"]]=v["busbw_GBps"]; if(!(k in seen)){seen[k]=1; order[n++]=k}}
     END{for(i=0;i<n;i++){k=order[i]; split(k,p," "); printf "| %s | %s | %s | %.0f | %.0f | %.2f | %s | %s |\n", p[1],p[2],p[3],t[k,"gloo"],t[k,"gorun"],t[k,"gorun"]/t[k,"gloo"],bw[k,"gloo"],bw[k,"gorun"]}}' "$tmp/ar"
echo
echo "## Fashion-MNIST CNN, 4 ranks, 2 epochs of 10000 samples"
echo
echo "| round | backend | seconds per epoch | test accuracy |"
echo "| --- | --- | --- | --- |"
awk '{for(i=1;i<=NF;i++){split($i,kv,"=");v[kv[1]]=kv[2]} name=v["backend"]; if(v["strategy"]=="hub") name="gorun hub"; else if(name=="gorun") name="gorun ring";
     printf "| %s | %s | %s | %s |\n", v["round"], name, v["seconds_per_epoch"], v["test_acc"]}' "$tmp/train"
