#!/usr/bin/env bash
# torch.distributed.all_reduce through gorun.torch's native fast path, its
# Python path (GORUN_TORCH_NATIVE=0), Gloo and the same sizes from a Go
# program (examples/allreduce), interleaved run by run on this machine, at
# 2 and 4 ranks on one host.
#
#   bash bench/torch/native.sh [ROUNDS]      (default 3)
#   HOGS=2 bash bench/torch/native.sh        (beside 2 busy processes,
#                                             spinning loops, all along)
#
# Two tables: back to back (blocks of calls, as the Go program times
# them), and with a barrier before every call (bench/torch/allreduce.py's
# default; the Go program has no such mode). Needs Debian's PyTorch and
# what `make python` needs to build the native fast path.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
make -s build python >/dev/null
go build -o bin/allreduce ./examples/allreduce
export PYTHONPATH=$PWD/python OMP_NUM_THREADS=1
sizes=4096,65536,1048576
tmp=$(mktemp -d)
hogs=()
trap 'kill "${hogs[@]}" 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 1 "${HOGS:-0}"); do
    sh -c 'while :; do :; done' &
    hogs+=($!)
done

py() { # py ROUND NP LABEL MODE [ENV...] -- runs allreduce.py, one line per size into $tmp/MODE
    local r=$1 np=$2 label=$3 mode=$4 backend=gorun
    shift 4
    [ "$label" = gloo ] && backend=gloo
    # Back to back: 30 blocks of calls; after a barrier: 1000 single calls,
    # whose times are two-peaked (which rank left the barrier first), so
    # that fewer make a median that swings from run to run.
    local iters=1000
    [ -n "$mode" ] && iters=30
    env "$@" bin/gorun -q -np "$np" /usr/bin/python3 bench/torch/allreduce.py --backend "$backend" --sizes "$sizes" \
        --iters "$iters" ${mode:+--back-to-back} | sed -n "s/^\[0\] //p" | sed "s/^/round=$r path=$label /" >>"$tmp/${mode:-barrier}"
}

for r in $(seq 1 "$rounds"); do
    for np in 2 4; do
        bin/gorun -q -np "$np" bin/allreduce -sizes 4KiB,64KiB,1MiB -target 500ms | sed -n 's/^\[0\] *//p' |
            awk -v r="$r" -v np="$np" '$1 ~ /KiB|MiB/ {b=$1; sub(/KiB/,"",b); m=1024; if ($1 ~ /MiB/) {sub(/MiB/,"",b); m=1048576}
                printf "round=%s path=go size=%d np=%s median_us=%s\n", r, b*m, np, $2}' >>"$tmp/b2b"
        py "$r" "$np" native b2b GORUN_TORCH_NATIVE=1
        py "$r" "$np" python b2b GORUN_TORCH_NATIVE=0
        py "$r" "$np" gloo b2b
        py "$r" "$np" native "" GORUN_TORCH_NATIVE=1
        py "$r" "$np" python "" GORUN_TORCH_NATIVE=0
        py "$r" "$np" gloo ""
    done
done

table() { # table FILE WITH_GO
    awk -v go="$2" '{for(i=1;i<=NF;i++){split($i,kv,"=");v[kv[1]]=kv[2]} k=v["round"]" "v["np"]" "v["size"]; t[k,v["path"]]=v["median_us"]; if(!(k in seen)){seen[k]=1; order[n++]=k}}
        END{for(i=0;i<n;i++){k=order[i]; split(k,p," ");
            if (go) printf "| %s | %s | %s | %.1f | %.1f | %.1f | %.0f | %.2f | %+.1f | %.3f |\n", p[1],p[2],p[3],t[k,"go"],t[k,"native"],t[k,"python"],t[k,"gloo"],t[k,"native"]/t[k,"go"],t[k,"native"]-t[k,"go"],t[k,"native"]/t[k,"gloo"];
            else printf "| %s | %s | %s | %.1f | %.1f | %.0f | %.3f | %.3f |\n", p[1],p[2],p[3],t[k,"native"],t[k,"python"],t[k,"gloo"],t[k,"native"]/t[k,"gloo"],t[k,"python"]/t[k,"gloo"]}}' "$1"
}

echo "## Back to back: median µs per call"
echo
echo "| round | ranks | bytes | Go | native | Python | Gloo | native / Go | native − Go | native / Gloo |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
table "$tmp/b2b" 1
echo
echo "## A barrier before every call: median µs per call"
echo
echo "| round | ranks | bytes | native | Python | Gloo | native / Gloo | Python / Gloo |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
table "$tmp/barrier" ""
