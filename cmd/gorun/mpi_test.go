package main

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/mpitest"
)

// mpiPrograms builds the test programs with mpi into a directory whose
// name holds a marker, so that noLeftovers finds their processes.
func mpiPrograms(t *testing.T, mpi mpitest.MPI) (map[string]string, string) {
	t.Helper()
	mark := marker(t)
	dir := filepath.Join(t.TempDir(), mark)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return mpitest.BuildWith(t, dir, mpi), mark
}

// TestMPICHCollectives: an unmodified MPICH program under gorun (PMI-1)
// gets the right MPI_Allreduce (sum, max, min), MPI_Bcast and
// MPI_Allgather results on 1 to 5 ranks, for counts 0, 1, primes and
// fewer than the ranks, checked against a naive reference.
func TestMPICHCollectives(t *testing.T) { checkCollectives(t, mpitest.MPICH) }

// TestOpenMPICollectives: the same for an unmodified Open MPI program:
// Open MPI 4 bootstraps through gorun's PMI-1 library (its flux
// component), Open MPI 5 through the agent's PMIx server.
func TestOpenMPICollectives(t *testing.T) {
	checkCollectives(t, mpitest.OpenMPI)
	noOpenMPIFiles(t)
}

func checkCollectives(t *testing.T, mpi mpitest.MPI) {
	progs, mark := mpiPrograms(t, mpi)
	for np := 1; np <= 5; np++ {
		seed := rand.Int64N(1 << 20)
		counts := []int{0, 1, 2, 7, 13, 1 + rand.IntN(40)}
		args := []string{"-np", strconv.Itoa(np), progs["mpicheck"], strconv.FormatInt(seed, 10)}
		for _, c := range counts {
			args = append(args, strconv.Itoa(c))
		}
		r := gorun(t, args...)
		if r.code != 0 {
			t.Fatalf("np %d: exit %d:\n%s", np, r.code, r.stderr)
		}
		mpitest.Check(t, r.stdout, np, seed, counts)
	}
	noLeftovers(t, mark)
}

// TestMPI4py: an mpi4py program on Debian's Python (on Open MPI: 4 through
// the flux route, 5 through PMIx) gets the same collectives as the C
// program, on 1 to 5 ranks; its MPI_Abort ends the job with its code,
// naming the rank.
func TestMPI4py(t *testing.T) {
	version := mpitest.NeedMPI4py(t)
	mark := marker(t)
	dir := filepath.Join(t.TempDir(), mark)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "check.py")
	if err := os.WriteFile(script, []byte(mpitest.MPI4pyCheck), 0o644); err != nil {
		t.Fatal(err)
	}
	for np := 1; np <= 5; np++ {
		seed := rand.Int64N(1 << 20)
		counts := []int{0, 1, 3, 11, 1 + rand.IntN(30)}
		args := []string{"-np", strconv.Itoa(np), mpitest.Python, script, strconv.FormatInt(seed, 10)}
		for _, c := range counts {
			args = append(args, strconv.Itoa(c))
		}
		r := gorun(t, args...)
		if r.code != 0 {
			t.Fatalf("mpi4py %s, np %d: exit %d:\n%s", version, np, r.code, r.stderr)
		}
		mpitest.Check(t, r.stdout, np, seed, counts)
	}
	abort := filepath.Join(dir, "abort.py")
	if err := os.WriteFile(abort, []byte("from mpi4py import MPI\nimport time\nc = MPI.COMM_WORLD\nc.Barrier()\nif c.Get_rank() == 1:\n    c.Abort(3)\ntime.sleep(300)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := gorun(t, "-np", "3", "--grace", "1s", mpitest.Python, abort)
	if r.code != 3 || !strings.Contains(r.stderr, "rank 1 on localhost called MPI_Abort with exit code 3") {
		t.Fatalf("mpi4py abort: exit %d, want 3 naming rank 1:\n%s", r.code, r.stderr)
	}
	noLeftovers(t, mark)
	noOpenMPIFiles(t)
	t.Logf("mpi4py %s", version)
}

// TestMPICHFailures: MPI_Abort(…, 3) ends the job with 3 and names the
// rank; a segfault ends it with the signal; returning without
// MPI_Finalize fails the job instead of leaving the others in a barrier;
// nothing is left running.
func TestMPICHFailures(t *testing.T) { checkFailures(t, mpitest.MPICH) }

// TestOpenMPIFailures: the same for Open MPI, and no Open MPI file (its
// session directory, its shared-memory segments) is left on the host.
func TestOpenMPIFailures(t *testing.T) {
	checkFailures(t, mpitest.OpenMPI)
	noOpenMPIFiles(t)
}

func checkFailures(t *testing.T, mpi mpitest.MPI) {
	progs, mark := mpiPrograms(t, mpi)
	r := gorun(t, "-np", "3", "--grace", "1s", progs["mpiabort"])
	if r.code != 3 || !strings.Contains(r.stderr, "rank 1 on localhost called MPI_Abort with exit code 3") {
		t.Fatalf("abort: exit %d, want 3 naming rank 1:\n%s", r.code, r.stderr)
	}
	noLeftovers(t, mark)
	r = gorun(t, "-np", "3", "--grace", "1s", progs["mpisegv"])
	if r.code != 128+11 || !strings.Contains(r.stderr, "rank 2 on localhost") || !strings.Contains(r.stderr, "segmentation fault") {
		t.Fatalf("segfault: exit %d, want 139 naming rank 2:\n%s", r.code, r.stderr)
	}
	noLeftovers(t, mark)
	r = gorun(t, "-np", "3", "--grace", "1s", progs["mpinofinalize"])
	if r.code != 1 || !strings.Contains(r.stderr, "rank 0 on localhost") || !strings.Contains(r.stderr, "without calling MPI_Finalize") {
		t.Fatalf("no finalize: exit %d, want 1 naming rank 0:\n%s", r.code, r.stderr)
	}
	noLeftovers(t, mark)
}

// TestOpenMPIHalfFinishedTerm: SIGTERM to gorun while two Open MPI ranks
// wait in MPI_Finalize's fence and two in a barrier that never completes:
// every rank is gone within the grace period and gorun exits right after
// (it used to wait for the agent's hard stop, grace + 10 s: the fence's
// PMI session outlived its rank). The bound is only a hang check.
func TestOpenMPIHalfFinishedTerm(t *testing.T) {
	progs, mark := mpiPrograms(t, mpitest.OpenMPI)
	cmd, out, errb := gorunCmd(t, "-np", "4", "--grace", "1s", progs["mpihalf"])
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for i := 0; strings.Count(out.String(), "ready") < 4; i++ {
		if i > 600 {
			_ = cmd.Process.Kill()
			t.Fatalf("the ranks never started:\n%s\n%s", out, errb)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // into the fence and the barrier
	t0 := time.Now()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(8 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("gorun still running 8 s after SIGTERM with a 1 s grace:\n%s", errb)
	}
	if code := cmd.ProcessState.ExitCode(); code != 128+15 {
		t.Fatalf("exit %d after %v, want 143:\n%s", code, time.Since(t0), errb)
	}
	t.Logf("SIGTERM to exit: %v (grace 1 s)", time.Since(t0))
	noLeftovers(t, mark)
	noOpenMPIFiles(t)
}

// TestMPICHWithoutInit: a program linked with MPICH that never calls
// MPI_Init runs as any program does; with --pmi=none an MPI program runs
// as MPICH singletons (size 1 each), as it would without a launcher.
func TestMPICHWithoutInit(t *testing.T) { checkWithoutInit(t, mpitest.MPICH) }

// TestOpenMPIWithoutInit: the same for Open MPI.
func TestOpenMPIWithoutInit(t *testing.T) { checkWithoutInit(t, mpitest.OpenMPI) }

func checkWithoutInit(t *testing.T, mpi mpitest.MPI) {
	progs, mark := mpiPrograms(t, mpi)
	r := gorun(t, "-np", "2", progs["mpinoinit"])
	if r.code != 0 || !strings.Contains(r.stdout, "[0] 0 no-init initialized=0") || !strings.Contains(r.stdout, "[1] 1 no-init initialized=0") {
		t.Fatalf("exit %d:\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	before, _ := filepath.Glob("/dev/shm/sm_segment.*")
	// Open MPI 4 singletons started at once race on their session
	// directory (one's clean-up removes the /tmp/ompi.<host>.<uid> the
	// other is creating: "mkdir ... File exists"), as they do started by
	// hand: each gets a TMPDIR of its own.
	tmp := t.TempDir()
	r = gorun(t, "-np", "2", "--pmi=none", "/bin/sh", "-c", `d="$1/r$GORUN_RANK"; shift; mkdir -p "$d" && TMPDIR="$d" exec "$@"`, "sh", tmp, progs["mpicheck"], "5", "3")
	if r.code != 0 || strings.Count(r.stdout, " 0 size 1\n") != 2 {
		t.Fatalf("--pmi=none: exit %d, want two singletons:\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	// Open MPI 5 singletons leave their shared-memory segment in
	// /dev/shm, as they do started by hand: no leak of gorun's, which
	// --pmi=none leaves out of the job on purpose.
	after, _ := filepath.Glob("/dev/shm/sm_segment.*")
	for _, f := range after {
		if !slices.Contains(before, f) {
			_ = os.Remove(f)
		}
	}
	if r := gorun(t, "-np", "1", "--pmi=pmi2", progs["mpinoinit"]); r.code == 0 || !strings.Contains(r.stderr, `--pmi "pmi2"`) {
		t.Fatalf("--pmi=pmi2: exit %d:\n%s", r.code, r.stderr)
	}
	noLeftovers(t, mark)
}

// TestPMIxClient: a bare PMIx client (what Open MPI 5's MPI_Init is
// first; Debian's libpmix) is served by the agent's PMIx server: every
// rank gets its own rank and the job's namespace, and finalizes.
func TestPMIxClient(t *testing.T) {
	progs, mark := mpiPrograms(t, mpitest.OpenMPI)
	pmix := mpitest.BuildPMIxClient(t, filepath.Dir(progs["mpicheck"]))
	for _, np := range []int{1, 3} {
		r := gorun(t, "-np", strconv.Itoa(np), "--grace", "1s", pmix)
		if r.code != 0 {
			t.Fatalf("np %d: exit %d:\n%s\n%s", np, r.code, r.stdout, r.stderr)
		}
		nspaces := map[string]bool{}
		for rank := 0; rank < np; rank++ {
			m := regexp.MustCompile(`(?m)^\[` + strconv.Itoa(rank) + `\] PMIx_Init ok nspace=(gorun\.\S+) rank=` + strconv.Itoa(rank) + `$`).FindStringSubmatch(r.stdout)
			if m == nil || !strings.Contains(r.stdout, "["+strconv.Itoa(rank)+"] PMIx_Finalize ok") {
				t.Fatalf("np %d: rank %d did not init and finalize as itself:\n%s\n%s", np, rank, r.stdout, r.stderr)
			}
			nspaces[m[1]] = true
		}
		if len(nspaces) != 1 {
			t.Fatalf("np %d: namespaces %v, want one", np, nspaces)
		}
	}
	// A refused request that strands no one gets its error, the agent
	// warns naming the rank, and the job goes on.
	r := gorun(t, "-np", "2", "--grace", "1s", pmix, "selffence")
	// (libpmix 4.2 names the status NOT-SUPPORTED, 5.0 PMIX_ERR_NOT_SUPPORTED.)
	if r.code != 0 || len(regexp.MustCompile(`(?m)^\[\d\] PMIx_Fence self (PMIX_ERR_)?NOT[-_]SUPPORTED$`).FindAllString(r.stdout, -1)) != 2 ||
		!regexp.MustCompile(`(?m)^\[1\] gorun: this rank asked for a fence over part of the job`).MatchString(r.stderr) {
		t.Fatalf("a refused fence over one rank: exit %d:\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	// A refused request that others wait on (a lookup for MPI_Comm_connect,
	// say) ends the job naming the rank, instead of leaving them waiting.
	r = gorun(t, "-np", "3", "--grace", "1s", pmix, "lookup")
	if r.code == 0 || !strings.Contains(r.stderr, "rank 0") || !strings.Contains(r.stderr, "PMIx lookup") ||
		!strings.Contains(r.stderr, "MPI's dynamic processes") {
		t.Fatalf("a refused lookup others wait for: exit %d:\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	noLeftovers(t, mark)
	noOpenMPIFiles(t)
}

// TestUnservedMPI: an MPI program gorun cannot bootstrap never runs as N
// silent one-rank jobs: an Open MPI 4 rank kept off gorun's route
// (FLUX_JOB_ID removed) starts as a singleton, which the agent sees by
// its session directory, and fails the job, even when every rank exits 0.
// (Open MPI 5 has no such route to leave: it is served through PMIx.)
func TestUnservedMPI(t *testing.T) {
	progs, mark := mpiPrograms(t, mpitest.OpenMPI)
	if mpitest.OpenMPIMajor(t) != 4 {
		t.Skip("Open MPI 4's flux route only")
	}
	for _, prog := range []string{progs["mpicheck"], progs["mpinofinalize"]} {
		r := gorun(t, "-np", "2", "--grace", "1s", "env", "-u", "FLUX_JOB_ID", "-u", "PMIX_NAMESPACE", prog, "5", "3")
		// Two singletons share the job's session directory: one may fail
		// in Open MPI's own mkdir race (a loud failure of that rank)
		// before gorun sees the other run as a singleton.
		raced := strings.Contains(r.stderr, "A call to mkdir was unable to create the desired directory")
		if r.code != 1 || !strings.Contains(r.stderr, "ran Open MPI as a singleton") && !raced {
			t.Fatalf("%s as singletons: exit %d, want 1:\n%s\n%s", filepath.Base(prog), r.code, r.stdout, r.stderr)
		}
		noLeftovers(t, mark)
	}
	noOpenMPIFiles(t)
}

// noOpenMPIFiles fails if a job left Open MPI's files behind on this host:
// gorun's per-job directory for them, or segments in Open MPI's default
// places.
func noOpenMPIFiles(t *testing.T) {
	t.Helper()
	mpitest.NoFilesLeft(t, "/dev/shm/gorun-*-ompi-*", "/dev/shm/vader_segment.*", "/dev/shm/sm_segment.*", filepath.Join(os.TempDir(), "gorun-*-ompi-*"))
}

// TestPMIGarbage: a rank that writes garbage to its PMI socket is failed
// by gorun with an error that names it and the line; the others are
// stopped and nothing is left running.
func TestPMIGarbage(t *testing.T) {
	mark := marker(t)
	r := gorun(t, "-np", "3", "--grace", "1s", "sh", "-c",
		`if [ "$PMI_RANK" = 1 ]; then echo "hello pmi" >&$PMI_FD; fi; sleep 100 # `+mark)
	if r.code != 1 || !strings.Contains(r.stderr, "rank 1 on localhost") || !strings.Contains(r.stderr, `PMI: rank 1: pmi: malformed request: "hello pmi" does not start with cmd=`) {
		t.Fatalf("exit %d, want 1 naming rank 1 and its line:\n%s", r.code, r.stderr)
	}
	noLeftovers(t, mark)
}

// TestBatchAllocation: inside a Slurm allocation (hostlist and task
// counts) or a PBS one (a node file), gorun takes its hosts from it, and
// -v says so; -H still wins.
func TestBatchAllocation(t *testing.T) {
	host, _ := os.Hostname()
	nodefile := filepath.Join(t.TempDir(), "nodes")
	if err := os.WriteFile(nodefile, []byte("localhost\nlocalhost\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		env  []string
		args []string
		np   int
		from string
	}{
		{[]string{"SLURM_JOB_NODELIST=" + host, "SLURM_TASKS_PER_NODE=3"}, nil, 3, "Slurm allocation (SLURM_JOB_NODELIST and SLURM_TASKS_PER_NODE)"},
		{[]string{"SLURM_JOB_NODELIST=" + host, "SLURM_JOB_CPUS_PER_NODE=1(x1)"}, nil, 1, "SLURM_JOB_CPUS_PER_NODE"},
		{[]string{"PBS_NODEFILE=" + nodefile}, nil, 2, "PBS allocation (PBS_NODEFILE " + nodefile + ")"},
		{[]string{"PBS_NODEFILE=" + nodefile}, []string{"-H", "localhost:4"}, 4, "-H localhost:4"},
	} {
		cmd, out, errb := gorunCmd(t, append(append([]string{"-v"}, tc.args...), "sh", "-c", "echo $WORLD_SIZE")...)
		cmd.Env = append(cmd.Env, tc.env...)
		if err := cmd.Run(); err != nil {
			t.Fatalf("%v: %v\n%s", tc.env, err, errb)
		}
		if got := strings.Count(out.String(), "\n"); got != tc.np || !strings.Contains(out.String(), "] "+strconv.Itoa(tc.np)+"\n") {
			t.Fatalf("%v: %d ranks, want %d:\n%s", tc.env, got, tc.np, out)
		}
		if !strings.Contains(errb.String(), tc.from) {
			t.Fatalf("%v: -v does not say %q:\n%s", tc.env, tc.from, errb)
		}
	}
	cmd, _, errb := gorunCmd(t, "true")
	cmd.Env = append(cmd.Env, "SLURM_JOB_NODELIST=n[1-2]", "SLURM_TASKS_PER_NODE=2")
	if err := cmd.Run(); err == nil || !strings.Contains(errb.String(), "SLURM_TASKS_PER_NODE \"2\" gives 1 counts for the 2 nodes") {
		t.Fatalf("mismatched counts: %v\n%s", err, errb)
	}
}
