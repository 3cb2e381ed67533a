package e2e

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/gorun/gorun/internal/mpitest"
)

// TestMPICHOverSSH: an unmodified MPICH program on 8 ranks over 4 test
// hosts (PMI-1, barriers relayed through the launcher) gets the right
// collective results; with --map-by node too (a cyclic process mapping);
// MPI_Abort(…, 3) on one rank ends the job with 3 and leaves nothing on
// any host.
func TestMPICHOverSSH(t *testing.T) { checkMPIOverSSH(t, mpitest.MPICH) }

// TestOpenMPIOverSSH: the same for an unmodified Open MPI program: Open
// MPI 4 bootstraps through gorun's PMI-1 library, Open MPI 5 (in the Debian
// 13 root) through each host's PMIx server, fences relayed through the
// launcher (Open MPI's own shared memory within a host, TCP across); Open
// MPI's files are not left behind either.
func TestOpenMPIOverSSH(t *testing.T) {
	checkMPIOverSSH(t, mpitest.OpenMPI)
	mpitest.NoFilesLeft(t, "/dev/shm/gorun-*-ompi-*", "/dev/shm/sm_segment.*")
}

func checkMPIOverSSH(t *testing.T, mpi mpitest.MPI) {
	r := needRig(t)
	progs := mpitest.BuildWith(t, r.testbins, mpi)
	hf := r.hostfile(t, 4, 2)
	for _, mapBy := range []string{"slot", "node"} {
		seed := rand.Int64N(1 << 20)
		counts := []int{0, 1, 5, 11, 1 + rand.IntN(30)}
		args := []string{"-hostfile", hf, "--map-by", mapBy, progs["mpicheck"], strconv.FormatInt(seed, 10)}
		for _, c := range counts {
			args = append(args, strconv.Itoa(c))
		}
		res := r.run(t, args...)
		if res.code != 0 {
			t.Fatalf("--map-by %s: exit %d:\n%s", mapBy, res.code, res.stderr)
		}
		mpitest.Check(t, res.stdout, 8, seed, counts)
	}
	r.noLeftovers(t)
	res := r.run(t, "-hostfile", hf, "--grace", "1s", progs["mpiabort"])
	if res.code != 3 || !strings.Contains(res.stderr, "rank 1 on "+r.hosts[0]+" called MPI_Abort with exit code 3") {
		t.Fatalf("abort: exit %d, want 3 naming rank 1 on %s:\n%s", res.code, r.hosts[0], res.stderr)
	}
	r.noLeftovers(t)
}
