#!/usr/bin/env bash
# interleaved: old/new builds × plain/exact, NP ranks, -coll avg
NP=${NP:-2}; ROUNDS=${1:-3}; SIZES=${SIZES:-4KiB,1MiB,16MiB}
for r in $(seq $ROUNDS); do
  for v in old new; do for f in plain exact; do
    fl=(); [ $f = exact ] && fl=(--exact)
    /work/main/bin/gorun --tag-output=false -q "${fl[@]}" -np $NP /tmp/ar-$v -coll avg -sizes $SIZES -target ${TARGET:-0.5s} | awk -v r=$r -v v=$v -v f=$f -v np=$NP '$1 ~ /iB$/ {print np, r, v, f, $1, $2}'
  done; done
done
