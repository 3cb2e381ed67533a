#!/usr/bin/env bash
# fp16 and bf16 on the wire against float32 (gorun --wire, docs/collectives.md):
# the ring all-reduce's median time per call from examples/allreduce (run
# under `gorun --wire FORMAT`), interleaved run by
# run (the order rotates each round), on 4 test hosts with one rank each at
# each link RATE, and on this one host over shared memory (RATE "shm", 4
# ranks on the 2 cores).
#   sudo bash bench/wire.sh [ROUNDS] [RATES] [SIZES]
#        (defaults: 3, "1gbit 100mbit shm", "16MiB,64MiB")
# STRATEGY=hub times the hub strategy's all-reduce instead (gorun --strategy
# hub, HUBS colocated hubs, default 4: one on each host), whose hubs decode,
# sum in float32 and encode the result once. VARIANTS (default "full fp16
# bf16") are what is compared with full float32: a wire format, or "exact"
# (gorun --exact: exact sums, results/exact/ by default). COLL (default
# allreduce, a Sum of zeros) is examples/allreduce's -coll: avg times an
# Avg of values as gradients hold, which exact sums convert on their
# common path.
# Prints one line per run and, per rate and size, each format's median time
# and its speed-up over float32 round by round; writes the runs to OUT
# (default results/wire/<date>-<commit>.tsv) and the tables beside it (.txt).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
tn=$repo/scripts/testhosts.sh
rounds=${1:-3}
rates=${2:-"1gbit 100mbit shm"}
sizes=${3:-"16MiB,64MiB"}
target=${TARGET:-2s}
strategy=${STRATEGY:-ring}
tag=""
extra=()
case $strategy in
ring) ;;
hub)
    tag=-hub
    extra=(--strategy hub -x "GORUN_COLOCATED_HUBS=${HUBS:-4}")
    ;;
*)
    echo "wire.sh: STRATEGY=$strategy: want ring or hub" >&2
    exit 2
    ;;
esac
read -r -a wires <<<"${VARIANTS:-full fp16 bf16}"
[ "${wires[0]}" = full ] || {
    echo "wire.sh: VARIANTS must begin with full (what the others are compared with)" >&2
    exit 2
}
dir=wire
[[ " ${wires[*]} " == *" exact "* ]] && dir=exact
out=${OUT:-$repo/results/$dir/$(date +%F)-$(git -C "$repo" rev-parse --short HEAD)$tag.tsv}
mkdir -p "$(dirname "$out")"
export TESTNET_DIR=${TESTNET_DIR:-/tmp/gorun-wire-bench}
make -C "$repo" build >/dev/null
(cd "$repo" && CGO_ENABLED=0 go build -o bin/allreduce ./examples/allreduce)
trap 'bash "$tn" down >/dev/null 2>&1 || true' EXIT
printf 'rate\tround\twire\tbytes\tring_us\n' >"$out"
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
        for i in "${!wires[@]}"; do
            w=${wires[$(((i + r - 1) % ${#wires[@]}))]}
            flags=(--wire "$w")
            [ "$w" = exact ] && flags=(--exact)
            "$repo/bin/gorun" -q --tag-output=false "${where[@]}" "${flags[@]}" "${extra[@]}" "$repo/bin/allreduce" -coll "${COLL:-allreduce}" -sizes "$sizes" -target "$target" |
                awk -v rate="$rate" -v r="$r" -v w="$w" '$1 ~ /^[0-9]+[KMG]iB$/ {
                    n = $1 + 0; u = substr($1, length(n) + 1); m = (u == "KiB" ? 1024 : u == "MiB" ? 1048576 : 1073741824)
                    printf "%s\t%s\t%s\t%d\t%s\n", rate, r, w, n * m, $2 }' |
                tee -a "$out"
        done
    done
done
awk -F '\t' 'NR > 1 { t[$1, $4, $3, $2] = $5; if (!(($1, $4) in seen)) { seen[$1, $4] = 1; order[++n] = $1 SUBSEP $4 }; if ($2 > maxr) maxr = $2 }
END {
    split(wl, ws, " ")
    for (k = 1; k <= n; k++) {
        split(order[k], a, SUBSEP); rate = a[1]; b = a[2]
        printf "\n%s, %d KiB: %s all-reduce of 4 ranks, us per call\n", rate, b / 1024, strategy
        for (wi = 1; wi <= nw; wi++) {
            w = ws[wi]; line = ""; sp = ""
            for (r = 1; r <= maxr; r++) {
                line = line sprintf(" %10.1f", t[rate, b, w, r])
                if (w != "full" && t[rate, b, w, r] > 0) sp = sp sprintf(" %.2f", t[rate, b, "full", r] / t[rate, b, w, r])
            }
            printf "  %-5s %s%s\n", w, line, (sp == "" ? "" : "   float32/" w ", round by round:" sp)
        }
    }
}' strategy="$strategy" nw="${#wires[@]}" wl="${wires[*]}" "$out" | tee "${out%.tsv}.txt"
echo "runs: $out, tables: ${out%.tsv}.txt"
