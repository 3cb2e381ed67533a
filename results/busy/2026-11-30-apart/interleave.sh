#!/bin/bash
# NP=2 beside LOADS (sharedN or hogsN): builds interleaved with mpirun.
# BUILDS="name:/path ..." ; sizes; reps
sizes=${SIZES:-1MiB,16MiB}; reps=${REPS:-6}; mpi=${MPI:-/tmp/diag/mpi}
for load in $LOADS; do
  pids=()
  n=${load#shared}; n=${n#hogs}; [ "$load" = idle ] && n=0
  for _ in $(seq $n); do
    if [[ $load == hogs* ]]; then setsid sh -c 'while :; do :; done' & else sh -c 'while :; do :; done' & fi
    pids+=($!)
  done
  sleep 1
  for rep in $(seq $reps); do
    for b in $BUILDS; do
      name=${b%%:*} bin=${b#*:}
      /work/main/bin/gorun --tag-output=false -np ${NP:-2} $bin -sizes $sizes -target 0.5s | awk -v l=$load -v n=$name -v r=$rep '$1 ~ /B$/ && $2 ~ /^[0-9.]+$/ {print l, r, n, $1, $2}'
    done
    mpirun --allow-run-as-root --oversubscribe -np ${NP:-2} $mpi $sizes 0.5 | awk -v l=$load -v r=$rep '$1 ~ /^[0-9]+$/ {s=$1; u=(s>=1048576)? (s/1048576)"MiB" : (s/1024)"KiB"; print l, r, "mpirun", u, $2}'
  done
  kill "${pids[@]}" 2>/dev/null; for p in "${pids[@]}"; do kill -- -$p 2>/dev/null; done; wait 2>/dev/null
done
