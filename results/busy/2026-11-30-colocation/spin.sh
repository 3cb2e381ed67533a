#!/bin/bash
# NP=2 beside LOADS: gorun as built, gorun with GORUN_SPIN=$SPIN (waits poll longer before sleeping), mpirun; interleaved.
cd /tmp/coloc
sizes=${SIZES:-4KiB,1MiB,16MiB}; reps=${REPS:-4}; spin=${SPIN:-2ms}
for load in $LOADS; do
  pids=()
  n=${load#shared}; n=${n#hogs}
  for _ in $(seq $n); do
    case $load in hogs*) setsid sh -c 'while :; do :; done' & ;; *) sh -c 'while :; do :; done' & ;; esac
    pids+=($!)
  done
  for rep in $(seq $reps); do
    /tmp/diag/gorun --tag-output=false -np 2 /tmp/diag/allreduce-base -sizes $sizes -target 0.5s | awk -v l=$load '$1 ~ /B$/ && $2 ~ /^[0-9.]+$/ {print "load="l, "gorun", $1, $2}'
    /tmp/diag/gorun --tag-output=false -np 2 -x GORUN_SPIN=$spin /tmp/diag/allreduce-base -sizes $sizes -target 0.5s | awk -v l=$load -v s=$spin '$1 ~ /B$/ && $2 ~ /^[0-9.]+$/ {print "load="l, "spin"s, $1, $2}'
    mpirun --allow-run-as-root -np 2 /tmp/diag/mpi $sizes 0.5 | awk -v l=$load '$1 ~ /^[0-9]+$/ {print "load="l, "mpirun", $1, $2}'
  done
  kill "${pids[@]}"; wait 2>/dev/null
done
