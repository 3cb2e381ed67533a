package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/mpitest"
	"github.com/gorun/gorun/internal/proctest"
)

// A real Slurm on the test hosts (scripts/testhosts.sh slurm: Debian's
// slurmctld here, a slurmd in every host's namespace), brought up once by
// the first test that needs it. gorun runs under salloc or sbatch as on a
// cluster, and starts its agents with srun.

var (
	slurmOnce sync.Once
	slurmConf string
	slurmErr  error
)

// needSlurm brings the Slurm cluster up on the rig (once) and returns its
// SLURM_CONF. Where the rig is required (GORUN_REQUIRE_TESTNET=1), a
// cluster that cannot come up fails the test.
func needSlurm(t *testing.T) (*rig, string) {
	t.Helper()
	r := needRig(t)
	slurmOnce.Do(func() {
		cmd := exec.Command("bash", testnetScript(), "slurm")
		cmd.Env = append(os.Environ(), "TESTNET_DIR="+r.dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			slurmErr = fmt.Errorf("testhosts.sh slurm: %v\n%s", err, out)
			return
		}
		slurmConf = filepath.Join(r.dir, "slurm", "slurm.conf")
	})
	if slurmErr != nil {
		if os.Getenv("GORUN_REQUIRE_TESTNET") == "1" {
			t.Fatal(slurmErr)
		}
		t.Skip(slurmErr)
	}
	return r, slurmConf
}

// slurmCmd is a Slurm command (salloc, sbatch, squeue, scancel) for the
// test cluster, run from the rig's scratch directory, not yet started.
func slurmCmd(r *rig, conf string, name string, args ...string) (*exec.Cmd, *proctest.Buffer, *proctest.Buffer) {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "SLURM_CONF="+conf)
	cmd.Dir = r.testbins
	var out, errb proctest.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	return cmd, &out, &errb
}

// salloc runs `salloc ARGS` to its end.
func salloc(t *testing.T, r *rig, conf string, args ...string) result {
	t.Helper()
	cmd, out, errb := slurmCmd(r, conf, "salloc", args...)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	code := waitCmd(t, cmd, fmt.Sprintf("salloc %v", args), errb)
	return result{out.String(), errb.String(), code, time.Since(start)}
}

// noSlurmJobs fails unless the cluster has no job left (a cancelled or
// ended job leaves the queue within a few seconds).
func noSlurmJobs(t *testing.T, r *rig, conf string) {
	t.Helper()
	var last string
	proctest.WaitFor(t, 30*time.Second, func() bool {
		cmd, out, _ := slurmCmd(r, conf, "squeue", "-h", "-t", "PD,R,CG,S", "-o", "%i %T %j")
		_ = cmd.Run()
		last = out.String()
		return strings.TrimSpace(last) == ""
	}, "no Slurm job left")
}

// TestSlurmSalloc: `salloc -N 4 gorun selftest` starts its agents with
// one srun step (gorun -v says why), every agent dials back, and the 8
// ranks (2 per node, from SLURM_TASKS_PER_NODE) check random collectives
// against a reference; nothing is left on any host or in the queue.
func TestSlurmSalloc(t *testing.T) {
	r, conf := needSlurm(t)
	bin := r.selftest(t)
	res := salloc(t, r, conf, "-N", "4", "--ntasks-per-node=2", "-J", "e2e-salloc", r.gorun, "-v", bin, "-rounds", "40", "-seed", "13")
	if res.code != 0 || strings.Count(res.stdout, "40 rounds OK") != 8 || strings.Count(res.stdout, "(hosts [[0 1] [2 3] [4 5] [6 7]])") != 8 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", res.code, res.stdout, res.stderr)
	}
	for _, want := range []string{"mode=srun", "inside Slurm job", "every agent dialed in"} {
		if !strings.Contains(res.stderr, want) {
			t.Fatalf("gorun -v does not say %q:\n%s", want, res.stderr)
		}
	}
	r.noLeftovers(t)
	noSlurmJobs(t, r, conf)
}

// TestSlurmSbatch: an sbatch script whose gorun runs on the first node of
// the allocation (in its namespace) and starts the agents of all 3 nodes
// with srun, its own node's too; the job's output file holds every
// rank's result and sbatch --wait exits 0.
func TestSlurmSbatch(t *testing.T) {
	r, conf := needSlurm(t)
	bin := r.selftest(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "job.sh")
	out := filepath.Join(dir, "out")
	body := fmt.Sprintf("#!/bin/sh\nexec %s %s -rounds 30 -seed 17\n", r.gorun, bin)
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd, _, errb := slurmCmd(r, conf, "sbatch", "--wait", "-N", "3", "--ntasks-per-node=2", "-J", "e2e-sbatch", "-o", out, script)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	code := waitCmd(t, cmd, "sbatch --wait", errb)
	got, _ := os.ReadFile(out)
	if code != 0 || strings.Count(string(got), "30 rounds OK") != 6 {
		t.Fatalf("sbatch exit %d: %s\njob output:\n%s", code, errb, got)
	}
	r.noLeftovers(t)
	noSlurmJobs(t, r, conf)
}

// TestSlurmMPICH: an unmodified MPICH program on 6 ranks over 3 nodes of
// a Slurm allocation, its agents started by srun, gets the right
// collective results through gorun's PMI-1.
func TestSlurmMPICH(t *testing.T) { checkSlurmMPI(t, mpitest.MPICH) }

// TestSlurmOpenMPI: the same for an unmodified Open MPI program (Open MPI
// 5 through each node's PMIx server in the agent srun started).
func TestSlurmOpenMPI(t *testing.T) {
	checkSlurmMPI(t, mpitest.OpenMPI)
	mpitest.NoFilesLeft(t, "/dev/shm/gorun-*-ompi-*", "/dev/shm/sm_segment.*")
}

func checkSlurmMPI(t *testing.T, mpi mpitest.MPI) {
	r, conf := needSlurm(t)
	progs := mpitest.BuildWith(t, r.testbins, mpi)
	seed := rand.Int64N(1 << 20)
	counts := []int{0, 1, 7, 1 + rand.IntN(30)}
	args := []string{"-N", "3", "--ntasks-per-node=2", "-J", "e2e-mpi", r.gorun, progs["mpicheck"], strconv.FormatInt(seed, 10)}
	for _, c := range counts {
		args = append(args, strconv.Itoa(c))
	}
	res := salloc(t, r, conf, args...)
	if res.code != 0 {
		t.Fatalf("exit %d:\n%s", res.code, res.stderr)
	}
	mpitest.Check(t, res.stdout, 6, seed, counts)
	r.noLeftovers(t)
	noSlurmJobs(t, r, conf)
}

// startSlurmJob starts salloc -N n running gorun with ranks that say "up"
// and sleep, and waits until all 2n are up.
func startSlurmJob(t *testing.T, r *rig, conf, name string, n int) (*exec.Cmd, *proctest.Buffer, *proctest.Buffer) {
	t.Helper()
	cmd, out, errb := slurmCmd(r, conf, "salloc", "-N", strconv.Itoa(n), "--ntasks-per-node=2", "-J", name,
		r.gorun, "--grace", "2s", "sh", "-c", "echo up; sleep 60 & sleep 60; wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// A test that fails before the job ends leaves neither it nor its
	// allocation to the next one.
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			c, _, _ := slurmCmd(r, conf, "scancel", "-n", name)
			_ = c.Run()
			_ = cmd.Process.Kill()
		}
	})
	proctest.WaitFor(t, 60*time.Second, func() bool { return strings.Count(out.String(), "up") == 2*n }, "every rank up")
	return cmd, out, errb
}

// slurmJobID is the id of the job named name.
func slurmJobID(t *testing.T, r *rig, conf, name string) string {
	t.Helper()
	cmd, out, errb := slurmCmd(r, conf, "squeue", "-h", "-n", name, "-o", "%i")
	if err := cmd.Run(); err != nil || strings.TrimSpace(out.String()) == "" {
		t.Fatalf("squeue -n %s: %v %s", name, err, errb)
	}
	return strings.TrimSpace(out.String())
}

// TestSlurmScancel: scancel of a running job ends it: gorun exits
// non-zero, and nothing is left on any node or in the queue.
func TestSlurmScancel(t *testing.T) {
	r, conf := needSlurm(t)
	cmd, _, errb := startSlurmJob(t, r, conf, "e2e-scancel", 3)
	id := slurmJobID(t, r, conf, "e2e-scancel")
	if c, _, errb := slurmCmd(r, conf, "scancel", id); c.Run() != nil {
		t.Fatalf("scancel %s: %s", id, errb)
	}
	if code := waitCmd(t, cmd, "salloc after scancel", errb); code == 0 {
		t.Fatalf("the cancelled job exited 0:\n%s", errb)
	}
	r.noLeftovers(t)
	noSlurmJobs(t, r, conf)
}

// TestSlurmInterrupt: a Ctrl-C to gorun (SIGINT) ends the ranks and the
// srun step: gorun exits 130, nothing is left, the job ends.
func TestSlurmInterrupt(t *testing.T) {
	r, conf := needSlurm(t)
	cmd, _, errb := startSlurmJob(t, r, conf, "e2e-interrupt", 2)
	// salloc runs gorun as its child.
	gorun := children(cmd.Process.Pid)
	if len(gorun) != 1 {
		t.Fatalf("salloc's children: %v", gorun)
	}
	_ = syscall.Kill(gorun[0], syscall.SIGINT)
	code := waitCmd(t, cmd, "salloc after Ctrl-C", errb)
	if code != 130 {
		t.Fatalf("exit %d after Ctrl-C, want 130:\n%s", code, errb)
	}
	r.noLeftovers(t)
	noSlurmJobs(t, r, conf)
}

// TestSlurmNodeLost: the agent on the third node is killed mid-job (as
// if the node went): gorun names the node, exits non-zero, and nothing
// is left on the other nodes.
func TestSlurmNodeLost(t *testing.T) {
	r, conf := needSlurm(t)
	cmd, _, errb := startSlurmJob(t, r, conf, "e2e-lost", 3)
	var agent int
	for _, p := range r.hostProcs(2) {
		if pid, rest, _ := strings.Cut(p, " "); strings.Contains(rest, "__srun-agent") {
			agent, _ = strconv.Atoi(pid)
		}
	}
	if agent == 0 {
		t.Fatalf("no agent on h3: %v", r.hostProcs(2))
	}
	_ = syscall.Kill(agent, syscall.SIGKILL)
	code := waitCmd(t, cmd, "salloc after a node's agent was killed", errb)
	if code == 0 || !strings.Contains(errb.String(), "h3") {
		t.Fatalf("exit %d, want non-zero naming h3:\n%s", code, errb)
	}
	r.noLeftovers(t)
	noSlurmJobs(t, r, conf)
}

// TestSlurmAgentNeverDials: agents that cannot start (gorun is not where
// --remote-gorun says) never dial back: gorun says which nodes within
// seconds, with what srun said, and exits non-zero.
func TestSlurmAgentNeverDials(t *testing.T) {
	r, conf := needSlurm(t)
	res := salloc(t, r, conf, "-N", "2", "-J", "e2e-nodial", r.gorun, "--remote-gorun", "/nonexistent/gorun", "true")
	if res.code == 0 || !strings.Contains(res.stderr, "nodes [h1 h2] never dialed in") || !strings.Contains(res.stderr, "srun ended") {
		t.Fatalf("exit %d:\n%s", res.code, res.stderr)
	}
	r.noLeftovers(t)
	noSlurmJobs(t, r, conf)
}

// children are the pids of pid's child processes.
func children(pid int) []int {
	var kids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, not ')'.
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			if k, err := strconv.Atoi(e.Name()); err == nil {
				kids = append(kids, k)
			}
		}
	}
	return kids
}
