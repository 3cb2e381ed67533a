#!/bin/bash
# one session in the Debian 13 root: the Open MPI 5 tests, a check that
# the ranks load the served topology, then the launch benchmark
set -u
out=/tmp/topo
mkdir -p $out
cd /gorun
echo "== cmd/gorun tests $(date -u +%T)"
GORUN_REQUIRE_OPENMPI5=1 go test -count=1 -v -timeout 20m -run 'OpenMPI|PMIx|MPI4py' ./cmd/gorun > $out/cmdtest.log 2>&1
echo "exit $?"; grep -E "^(--- |ok|FAIL|PASS)" $out/cmdtest.log
echo "== check $(date -u +%T)"
cat > $out/init.c <<'C'
#include <mpi.h>
int main(int argc, char **argv) { MPI_Init(&argc, &argv); MPI_Finalize(); return 0; }
C
mpicc -o $out/init $out/init.c
for g in /gorun/bin/gorun /gorun/bin/gorun-base; do
    echo "-- $g"
    $g -np 2 -x PMIX_MCA_pmix_hwloc_verbose=5 -x OMPI_MCA_hwloc_base_verbose=5 $out/init 2>&1 | grep -iE "xml|discover|topolog" | sort | uniq -c | head -20
done
echo "== bench $(date -u +%T)"
RUNS=${RUNS:-20} GORUN_BASE=/gorun/bin/gorun-base OUT=$out/bench bash /gorun/bench/openmpi5.sh launch > $out/bench.log 2>&1
echo "bench exit $? $(date -u +%T)"
