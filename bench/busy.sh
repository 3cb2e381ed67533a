#!/usr/bin/env bash
# busy.sh: gorun's all-reduce beside other work on its host, against Open
# MPI's `mpirun` with no flags (its shared memory; --oversubscribe when
# there are more ranks than cores, without which it refuses to start them),
# run by run in one sitting: NP ranks (default 2) on this host, beside each
# load in turn:
#   idle         nothing
#   hogs2, hogs4, hogs8  2, 4 or 8 busy processes (spinning shell loops),
#                each in a session of its own (as another user's job is)
#   shared2, shared4  2 or 4 busy processes in this script's session, as
#                a training job's data loaders share the ranks' (Linux's
#                autogroups then share the CPU task by task, not session
#                by session)
#   torch        a 2-process PyTorch training job (the Fashion-MNIST CNN
#                trainer over Gloo, with its threads)
#   torch+hogs2  both
#
#   bash bench/busy.sh [REPS]                  (default 3)
#   LOADS="idle torch" SIZES=4KiB bash bench/busy.sh
#   GORUN_BASE=/path/to/old/gorun bash bench/busy.sh   (adds that launcher, interleaved)
#   BASE_ALLREDUCE=/path/to/old/allreduce bash bench/busy.sh
#                (adds examples/allreduce built from another commit, as
#                who=base: the collectives' code is in that binary)
#   NP=4 bash bench/busy.sh                    (4 ranks)
#
# Prints one line per run: "load=L rep=R who=gorun|base|mpirun size=B us=T";
# then the median per (load, size, who) and its time over mpirun's.
# Needs openmpi-bin, libopenmpi-dev and python3-torch (Debian). Takes
# several minutes.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
reps=${1:-3}
np=${NP:-2}
mpiflags=()
[ "$np" -gt "$(nproc)" ] && mpiflags=(--oversubscribe)
sizes=${SIZES:-4KiB,64KiB,1MiB}
work=$(mktemp -d)
loads=${LOADS:-idle hogs2 hogs4 torch torch+hogs2}
pids=()
stop_load() {
    for p in "${pids[@]}"; do kill -- "-$p" 2>/dev/null || kill "$p" 2>/dev/null || true; done
    pids=()
}
trap 'stop_load; rm -rf "$work"' EXIT
start_load() {
    local l=$1
    case $l in *hogs2*) n=2 ;; *hogs4*) n=4 ;; *hogs8*) n=8 ;; *) n=0 ;; esac
    for _ in $(seq "$n"); do
        setsid sh -c 'while :; do :; done' &
        pids+=($!)
    done
    case $l in shared2) n=2 ;; shared4) n=4 ;; *) n=0 ;; esac
    for _ in $(seq "$n"); do
        sh -c 'while :; do :; done' &
        pids+=($!)
    done
    if [[ $l == torch* ]]; then
        USE_LIBUV=0 PYTHONPATH="$repo/python" setsid "$repo/bin/gorun" -q -np 2 /usr/bin/python3 \
            "$repo/examples/torch_fmnist/train.py" --backend gloo --model cnn --epochs 1000 >/dev/null 2>&1 &
        pids+=($!)
        sleep 15 # past its start-up, into training
    fi
}
make -C "$repo" -s build >/dev/null
go build -o "$work/allreduce" "$repo/examples/allreduce"
mpicc.openmpi -O2 -o "$work/mpi" "$repo/bench/mpi/allreduce_mpi.c"
runs=("gorun:$repo/bin/gorun")
[ -n "${GORUN_BASE:-}" ] && runs+=("base:$GORUN_BASE")
[ -n "${BASE_ALLREDUCE:-}" ] && runs+=("base:$repo/bin/gorun")
log=$work/log
for l in $loads; do
    start_load "$l"
    for rep in $(seq "$reps"); do
        for r in "${runs[@]}"; do
            who=${r%%:*} bin=${r#*:} prog=$work/allreduce
            [ "$who" = base ] && [ -n "${BASE_ALLREDUCE:-}" ] && prog=$BASE_ALLREDUCE
            "$bin" --tag-output=false -np "$np" "$prog" -sizes "$sizes" -target 0.5s |
                awk -v l="$l" -v rep="$rep" -v who="$who" '$1 ~ /B$/ && $2 ~ /^[0-9.]+$/ {
                    s = $1; m = 1
                    if (s ~ /KiB$/) { m = 1024; sub(/KiB$/, "", s) } else if (s ~ /MiB$/) { m = 1048576; sub(/MiB$/, "", s) } else sub(/B$/, "", s)
                    printf "load=%s rep=%s who=%s size=%d us=%s\n", l, rep, who, s * m, $2 }' | tee -a "$log"
        done
        mpirun --allow-run-as-root "${mpiflags[@]}" -np "$np" "$work/mpi" "$sizes" 0.5 |
            awk -v l="$l" -v rep="$rep" '$1 ~ /^[0-9]+$/ { printf "load=%s rep=%s who=mpirun size=%s us=%s\n", l, rep, $1, $2 }' | tee -a "$log"
    done
    stop_load
done
echo
echo "median µs (and over mpirun's) per load and size:"
awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
       key = v["load"] " " v["size"]; t[key, v["who"]] = t[key, v["who"]] " " v["us"]; keys[key] = 1; whos[v["who"]] = 1 }
     function median(s,   a, n, i, j, x) { n = split(s, a, " "); for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
       return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
     END { for (key in keys) { line = "load=" key; m = median(t[key, "mpirun"])
             for (w in whos) { x = median(t[key, w]); line = line sprintf("  %s %.1f", w, x); if (w != "mpirun" && m > 0) line = line sprintf(" (%.2fx)", x / m) }
             print line } }' "$log" | sort
