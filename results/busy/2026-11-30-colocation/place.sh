#!/bin/bash
# NP=2 beside LOAD shared spinning loops: per run, the time, and where the
# two ranks' busiest threads ran (sampled every 5 ms): samples with both on
# one CPU, and each rank's run time, run-queue wait and time slices.
cd /tmp/diag
reps=${REPS:-10}; load=${LOAD:-2}; size=${SIZE:-4KiB}
pids=()
for _ in $(seq $load); do sh -c 'while :; do :; done' & pids+=($!); done
trap 'kill "${pids[@]}" 2>/dev/null' EXIT
for rep in $(seq $reps); do
  for who in gorun mpirun; do
    if [ $who = gorun ]; then
      ./sampler allreduce 5ms 20s > samp.$rep.$who & sp=$!
      ./gorun --tag-output=false -np 2 ./allreduce -sizes $size -target 1s > out.$rep.$who 2>&1
      us=$(awk '$1 ~ /B$/ && $2 ~ /^[0-9.]+$/ {print $2}' out.$rep.$who)
    else
      ./sampler mpi 5ms 20s > samp.$rep.$who & sp=$!
      mpirun --allow-run-as-root -np 2 ./mpi $size 1 > out.$rep.$who 2>&1
      us=$(awk '$1 ~ /^[0-9]+$/ {print $2}' out.$rep.$who)
    fi
    wait $sp
    echo "load=shared$load rep=$rep who=$who size=$size us=$us $(cat samp.$rep.$who)"
  done
done
