#!/usr/bin/env bash
# ParamHub's sparse pushes against dense ones (docs/paramhub.md, "Sparse
# pushes"): examples/hubpush under `gorun --strategy hub`, every
# setting in one job (blocks of rounds taking turns, so that they see the
# same machine), on 4 test hosts with one rank each at each link RATE (or
# RATE "shm": 4 ranks on this one host), for each hub layout in HUBS:
#   rank0  one hub inside rank 0 (the hub strategy's default): its host's
#          link carries every other worker's pushes and pulls;
#   K      --hubs K dedicated hub processes, hub h on host h+1; with the
#          default PARTITION a 1M-element key is 4 partitions, one a hub.
# The order of the layouts rotates round by round.
#   sudo bash bench/sparse.sh [ROUNDS] [RATES] [SETTINGS]
#        (defaults: 3, "1gbit 100mbit",
#         "dense,topk:0.01,topk:0.1,randk:0.01,randk:0.1")
#   HUBS="rank0 4"  N=1048576 (float32 elements; LAYERS=2304K,576K,... for
#   one key a layer instead)  PARTITION=1MiB  TARGET=5s (timed rounds a
#   setting, at least MIN_ROUNDS=5)  WARMUP=2  BLOCK=3  CHECK=1 (hubpush
#   -check: the pulled sums against the gradients less the residuals)
# Prints one line per setting and run and, per rate and layout, each
# setting's median round time round by round, its speed-up over dense
# round by round, and its push and pull bytes a worker a round against
# dense's; writes the runs to OUT (default
# results/sparse/<date>-<commit>.tsv) and the tables beside it (.txt).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
tn=$repo/scripts/testhosts.sh
rounds=${1:-3}
rates=${2:-"1gbit 100mbit"}
settings=${3:-"dense,topk:0.01,topk:0.1,randk:0.01,randk:0.1"}
hubs=${HUBS:-"rank0 4"}
size=(-n "${N:-1048576}")
if [ -n "${LAYERS:-}" ]; then
    size=(-layers "$LAYERS")
fi
check=()
if [ "${CHECK:-0}" = 1 ]; then
    check=(-check)
fi
out=${OUT:-$repo/results/sparse/$(date +%F)-$(git -C "$repo" rev-parse --short HEAD).tsv}
mkdir -p "$(dirname "$out")"
export TESTNET_DIR=${TESTNET_DIR:-/tmp/gorun-sparse-bench}
make -C "$repo" build >/dev/null
(cd "$repo" && CGO_ENABLED=0 go build -o bin/hubpush ./examples/hubpush)
trap 'bash "$tn" down >/dev/null 2>&1 || true' EXIT
printf 'rate\thubs\tround\tsetting\trounds\tmedian_us\tmin_us\tpush_B\tpull_B\tresid_grad\n' >"$out"
read -r -a layouts <<<"$hubs"
for rate in $rates; do
    if [ "$rate" = shm ]; then
        bash "$tn" down >/dev/null 2>&1 || true
        where=(-np 4)
    else
        bash "$tn" up 4 --slots 1 --rate "$rate" >/dev/null
        # shellcheck disable=SC1091
        . "$TESTNET_DIR/env"
        where=(--ssh "$TESTNET_SSH" -hostfile "$TESTNET_HOSTFILE" -np 4)
    fi
    for r in $(seq "$rounds"); do
        for i in "${!layouts[@]}"; do
            h=${layouts[$(((i + r - 1) % ${#layouts[@]}))]}
            dedicated=()
            if [ "$h" != rank0 ]; then
                dedicated=(--hubs "$h")
            fi
            "$repo/bin/gorun" -q --tag-output=false --timeout "${JOB_TIMEOUT:-30m}" "${where[@]}" --strategy hub "${dedicated[@]}" \
                "$repo/bin/hubpush" "${size[@]}" -settings "$settings" -partition "${PARTITION:-1MiB}" \
                -target "${TARGET:-5s}" -rounds "${MIN_ROUNDS:-5}" -warmup "${WARMUP:-2}" -block "${BLOCK:-3}" "${check[@]}" |
                awk -v rate="$rate" -v h="$h" -v r="$r" '$1 !~ /^#/ && NF == 8 && $2 ~ /^[0-9]+$/ {
                    printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", rate, h, r, $1, $2, $3, $4, $5, $6, $7 }' |
                tee -a "$out"
        done
    done
done
awk -F '\t' 'NR > 1 {
    g = $1 SUBSEP $2
    if (!(g in seen)) { seen[g] = 1; groups[++ng] = g }
    if (!((g, $4) in sseen)) { sseen[g, $4] = 1; ns[g]++; sets[g, ns[g]] = $4 }
    med[g, $4, $3] = $6; push[g, $4, $3] = $8; pull[g, $4, $3] = $9; resid[g, $4, $3] = $10
    if ($3 > maxr) maxr = $3
}
END {
    for (k = 1; k <= ng; k++) {
        g = groups[k]; split(g, a, SUBSEP)
        printf "\n%s, hubs %s: median round time (us) round by round; dense/this round by round; push and pull bytes a worker a round (mean of rounds)\n", a[1], a[2]
        for (i = 1; i <= ns[g]; i++) {
            s = sets[g, i]; line = ""; sp = ""; pb = lb = dp = dl = rs = c = cr = 0
            for (r = 1; r <= maxr; r++) {
                if (!((g, s, r) in med)) { line = line sprintf(" %9s", "-"); continue }
                line = line sprintf(" %9.0f", med[g, s, r])
                if (s != "dense" && ((g, "dense", r) in med) && med[g, s, r] > 0) sp = sp sprintf(" %.2f", med[g, "dense", r] / med[g, s, r])
                pb += push[g, s, r]; lb += pull[g, s, r]; c++
                if ((g, "dense", r) in push) { dp += push[g, "dense", r]; dl += pull[g, "dense", r] }
                if (resid[g, s, r] != "-") { rs += resid[g, s, r]; cr++ }
            }
            bytes = sprintf("push %10.0f B, pull %10.0f B", pb / c, lb / c)
            if (s != "dense" && dp > 0 && dl > 0) bytes = bytes sprintf(" (%.4f and %.3f of dense)", pb / dp, lb / dl)
            if (cr > 0) bytes = bytes sprintf(", resid/grad %.3g", rs / cr)
            printf "  %-22s%s%s   %s\n", s, line, (sp == "" ? "" : "   dense/this:" sp), bytes
        }
    }
}' "$out" | tee "${out%.tsv}.txt"
echo "runs: $out, tables: ${out%.tsv}.txt"
