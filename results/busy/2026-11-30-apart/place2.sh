#!/bin/bash
# Copies of the builds under test as /tmp/colo/s/{base,new}/allreduce; the sampler is
# ../2026-11-30-colocation/sampler.go.txt, built as /tmp/diag/sampler/sampler.
# hogsN or sharedN beside 2 ranks: base and new interleaved, with the sampler
load=${LOAD:-hogs4}; n=${load#shared}; n=${n#hogs}; reps=${REPS:-6}; size=${SIZE:-4KiB}
pids=()
for _ in $(seq $n); do if [[ $load == hogs* ]]; then setsid sh -c 'while :; do :; done' & else sh -c 'while :; do :; done' & fi; pids+=($!); done
sleep 1
for rep in $(seq $reps); do
  for who in base new; do
    /tmp/diag/sampler/sampler allreduce 5ms 20s > /tmp/colo/s/samp & sp=$!
    us=$(/work/main/bin/gorun --tag-output=false -np 2 /tmp/colo/s/$who/allreduce -sizes $size -target 1s 2>&1 | awk '$1 ~ /B$/ && $2 ~ /^[0-9.]+$/ {print $2}')
    wait $sp
    echo "load=$load rep=$rep who=$who us=$us $(cat /tmp/colo/s/samp)"
  done
done
for p in "${pids[@]}"; do kill -- -$p 2>/dev/null; kill $p 2>/dev/null; done
