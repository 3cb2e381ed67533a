#!/bin/bash
# NP=2 beside LOADS (sharedN): old build, park when sharing a CPU with the peer, move off it, mpirun; interleaved.
cd /tmp/coloc
sizes=${SIZES:-4KiB,1MiB,16MiB}; reps=${REPS:-6}
for load in $LOADS; do
  pids=()
  for _ in $(seq $load); do sh -c 'while :; do :; done' & pids+=($!); done
  for rep in $(seq $reps); do
    /tmp/diag/gorun --tag-output=false -np 2 /tmp/diag/allreduce-base -sizes $sizes -target 0.5s | awk -v l=$load '$1 ~ /B$/ && $2 ~ /^[0-9.]+$/ {print "load=shared"l, "old", $1, $2}'
    /tmp/diag/gorun --tag-output=false -np 2 -x GORUN_XPARK=1 ./allreduce-x -sizes $sizes -target 0.5s | awk -v l=$load '$1 ~ /B$/ && $2 ~ /^[0-9.]+$/ {print "load=shared"l, "park", $1, $2}'
    /tmp/diag/gorun --tag-output=false -np 2 ./allreduce-x -sizes $sizes -target 0.5s | awk -v l=$load '$1 ~ /B$/ && $2 ~ /^[0-9.]+$/ {print "load=shared"l, "move", $1, $2}'
    mpirun --allow-run-as-root -np 2 /tmp/diag/mpi $sizes 0.5 | awk -v l=$load '$1 ~ /^[0-9]+$/ {print "load=shared"l, "mpirun", $1, $2}'
  done
  kill "${pids[@]}"; wait 2>/dev/null
done
