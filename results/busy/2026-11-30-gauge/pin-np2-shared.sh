#!/bin/bash
# NP=2 beside shared loads: gorun unpinned, gorun with each rank pinned to its
# own core (taskset -c LOCAL_RANK, as Open MPI binds 2 ranks by default), mpirun.
cd /tmp/spinx
sizes=${SIZES:-4KiB,1MiB}; reps=${REPS:-6}
for load in $LOADS; do
  pids=()
  for _ in $(seq $load); do sh -c 'while :; do :; done' & pids+=($!); done
  for rep in $(seq $reps); do
    ./gorun --tag-output=false -np 2 ./allreduce -sizes $sizes -target 0.5s | awk -v l=$load '$1 ~ /B$/ && $2 ~ /^[0-9.]+$/ {print "load=shared"l, "gorun", $1, $2}'
    ./gorun --tag-output=false -np 2 sh -c 'exec taskset -c $GORUN_LOCAL_RANK ./allreduce -sizes '$sizes' -target 0.5s' | awk -v l=$load '$1 ~ /B$/ && $2 ~ /^[0-9.]+$/ {print "load=shared"l, "pinned", $1, $2}'
    mpirun --allow-run-as-root -np 2 ./mpi $sizes 0.5 | awk -v l=$load '$1 ~ /^[0-9]+$/ {print "load=shared"l, "mpirun", $1, $2}'
  done
  kill "${pids[@]}"; wait 2>/dev/null
done
