#!/usr/bin/env bash
# Does lossless compression of frames pay? Trains the
# Fashion-MNIST MLP and CNN in one process, snapshots their gradients and
# parameters early, in the middle and late, and times s2 and zstd on each
# as float64, float32, fp16, bf16 and top-k payloads on one core; reports
# the compression ratios, throughputs and break-even link speeds
# (bench/compress, docs in its package comment). Single-threaded CPU
# timing on a shared machine: run nothing else; it takes about 1-2 minutes.
#
#   bash bench/compress.sh [OUT] [FLAGS...]
#        (default OUT results/compress/<date>-<commit>.md, the TSV beside it;
#         FLAGS go to bench/compress, e.g. -steps 300 -runs 5 -min-time 10ms)
#
# Needs the Fashion-MNIST IDX files in /usr/share/datasets/fashion-mnist
# (-data DIR elsewhere).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
commit=$(git -C "$repo" rev-parse --short HEAD)
if ! git -C "$repo" diff --quiet HEAD -- bench/compress; then
    commit=$commit-dirty
fi
out=$(realpath -m "${1:-$repo/results/compress/$(date -u +%F)-$commit.md}")
shift || true
mkdir -p "$(dirname "$out")"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$repo" && go build -o "$work/compress" ./bench/compress)
machine="$(nproc) cores online, load average $(cut -d' ' -f1-3 /proc/loadavg) before the run"
"$work/compress" -out "$out" -tsv "${out%.md}.tsv" -commit "$commit" -machine "$machine" "$@"
echo "report: $out, rows: ${out%.md}.tsv"
