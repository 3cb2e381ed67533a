#!/usr/bin/env bash
# Cost of gorun's job inspection on the smallest all-reduce: 2 ranks on
# this host, 4 KiB, run by run in turn: without --timeline (the status
# page the stall inspector reads is always kept) and with --timeline;
# optionally also a build without the status page (OLD=path of an
# examples/allreduce binary built from an older commit).
# Usage: bash bench/timeline.sh [ROUNDS] [SIZE]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
rounds=${1:-5}
size=${2:-4KiB}
make -C "$repo" build >/dev/null
go build -o "$repo/bin/allreduce" "$repo/examples/allreduce"
tl=$(mktemp -d)
trap 'rm -rf "$tl"' EXIT
one() { # label args... -> median time (us) of the size
    "$repo/bin/gorun" -np 2 "$@" -sizes "$size" -target 2s 2>/dev/null | awk -v s="$size" '$2 == s {print $3; exit}'
}
for r in $(seq "$rounds"); do
    line="round $r:"
    if [ -n "${OLD:-}" ]; then line="$line old $(one "$OLD") us;"; fi
    a=$(one "$repo/bin/allreduce")
    b=$(one --timeline "$tl/t.json" "$repo/bin/allreduce")
    echo "$line page $a us; page+timeline $b us; timeline/page $(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.3f", b / a}')"
done
