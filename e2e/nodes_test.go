package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/mpitest"
	"github.com/gorun/gorun/internal/proctest"
)

// startNode starts gorun inside test host i's network namespace (as a
// pod's container would run: no SSH), as node i of a per-node start of
// n nodes with 2 ranks each, meeting at host 1.
func (r *rig) startNode(t *testing.T, i, n int, secret string, args ...string) (*exec.Cmd, *proctest.Buffer, *proctest.Buffer) {
	t.Helper()
	argv := append([]string{"netns", "exec", fmt.Sprintf("gr-h%d", i+1), r.gorun,
		"--nnodes", fmt.Sprint(n), "--node-rank", fmt.Sprint(i), "--rendezvous", r.hosts[0] + ":29400",
		"--nproc-per-node", "2", "--rendezvous-timeout", "30s"}, args...)
	cmd := exec.Command("ip", argv...)
	cmd.Env = append(os.Environ(), "GORUN_JOB_SECRET="+secret)
	cmd.Dir = r.testbins
	var out, errb proctest.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, &out, &errb
}

// waitCmd waits for cmd, failing the test if it takes more than 90 s.
func waitCmd(t *testing.T, cmd *exec.Cmd, what string, errb *proctest.Buffer) int {
	t.Helper()
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(90 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("%s hung:\n%s", what, errb)
	}
	return cmd.ProcessState.ExitCode()
}

// TestPerNodeStart: one gorun per test host, started inside each host
// with nothing but the job's size, its node index, where to meet and the
// secret in the environment (as a Kubernetes Indexed Job would): node 0
// is the launcher, the others dial it. Nodes 3 and 1 come before node 0
// and keep dialing; a node 2 with a wrong secret is refused (and says
// so) while node 0 waits, then the real node 2 comes. The 8 ranks form one
// job: random collectives checked against a reference on every rank, the
// hosts as placed, and every gorun exits 0 with nothing left.
func TestPerNodeStart(t *testing.T) {
	r := needRig(t)
	bin := r.selftest(t)
	const n = hosts
	type node struct {
		cmd       *exec.Cmd
		out, errb *proctest.Buffer
	}
	nodes := make([]node, n)
	start := func(i int) {
		cmd, out, errb := r.startNode(t, i, n, "pod-secret-of-16-bytes", bin, "-rounds", "40", "-seed", "9")
		nodes[i] = node{cmd, out, errb}
	}
	start(3) // before node 0 listens: it keeps dialing
	start(1)
	time.Sleep(500 * time.Millisecond)
	start(0)
	// While node 0 waits for node 2, a node 2 with another secret comes.
	bad, _, badErr := r.startNode(t, 2, n, "another-secret-16-bytes", bin, "-rounds", "40", "-seed", "9")
	if code := waitCmd(t, bad, "the node with a wrong secret", badErr); code == 0 || !strings.Contains(badErr.String(), "does not know this job's secret") {
		t.Fatalf("the node with a wrong secret exited %d:\n%s", code, badErr)
	}
	start(2)
	out, errb := nodes[0].out, nodes[0].errb
	for i := n - 1; i >= 0; i-- {
		if code := waitCmd(t, nodes[i].cmd, fmt.Sprintf("node %d", i), nodes[i].errb); code != 0 {
			t.Fatalf("node %d exited %d:\n%s\nnode 0's output:\n%s\n%s", i, code, nodes[i].errb, out, errb)
		}
	}
	if got := strings.Count(out.String(), "40 rounds OK"); got != 2*n || !strings.Contains(out.String(), "(hosts [[0 1] [2 3] [4 5] [6 7]])") {
		t.Fatalf("%d of %d ranks passed:\n%s\n%s", got, 2*n, out, errb)
	}
	r.noLeftovers(t)
}

// TestPerNodeLost: in a per-node start, node 2's gorun (its agent) is
// killed mid-job: node 0's launcher names the host, the job fails, every
// other gorun exits, and nothing is left on any host.
func TestPerNodeLost(t *testing.T) {
	r := needRig(t)
	const n = 3
	cmds := make([]*exec.Cmd, n)
	errs := make([]*proctest.Buffer, n)
	var out0 *proctest.Buffer
	for i := n - 1; i >= 0; i-- {
		cmd, out, errb := r.startNode(t, i, n, "pod-secret-of-16-bytes", "sh", "-c", "echo up; sleep 60 & sleep 60; wait")
		cmds[i], errs[i] = cmd, errb
		if i == 0 {
			out0 = out
		}
	}
	proctest.WaitFor(t, 60*time.Second, func() bool { return strings.Count(out0.String(), "up") == 2*n }, "every rank up")
	// ip netns exec runs gorun in place: the process is the node's gorun.
	_ = cmds[2].Process.Signal(syscall.SIGKILL)
	code := waitCmd(t, cmds[0], "node 0", errs[0])
	if code == 0 || !strings.Contains(errs[0].String(), r.hosts[2]) {
		t.Fatalf("node 0 exited %d after node 2 was killed:\n%s", code, errs[0])
	}
	waitCmd(t, cmds[1], "node 1", errs[1])
	waitCmd(t, cmds[2], "node 2", errs[2])
	r.noLeftovers(t)
}

// TestMPICHPerNode and TestOpenMPIPerNode: in a per-node start (one gorun
// per test host, as a Kubernetes Indexed Job would start them), an
// unmodified MPI program on 8 ranks over the 4 hosts gets the right
// collective results: MPICH through PMI-1, Open MPI through its route
// (Open MPI 5: each node's PMIx server, fences relayed through node 0).
func TestMPICHPerNode(t *testing.T) { checkPerNodeMPI(t, mpitest.MPICH) }

func TestOpenMPIPerNode(t *testing.T) {
	checkPerNodeMPI(t, mpitest.OpenMPI)
	mpitest.NoFilesLeft(t, "/dev/shm/gorun-*-ompi-*", "/dev/shm/sm_segment.*")
}

func checkPerNodeMPI(t *testing.T, mpi mpitest.MPI) {
	r := needRig(t)
	progs := mpitest.BuildWith(t, r.testbins, mpi)
	seed := rand.Int64N(1 << 20)
	counts := []int{0, 1, 5, 1 + rand.IntN(30)}
	args := []string{progs["mpicheck"], strconv.FormatInt(seed, 10)}
	for _, c := range counts {
		args = append(args, strconv.Itoa(c))
	}
	const n = hosts
	cmds := make([]*exec.Cmd, n)
	errs := make([]*proctest.Buffer, n)
	var out *proctest.Buffer
	for i := n - 1; i >= 0; i-- {
		cmd, o, e := r.startNode(t, i, n, "mpi-secret-of-16-bytes", args...)
		cmds[i], errs[i] = cmd, e
		if i == 0 {
			out = o
		}
	}
	for i := n - 1; i >= 0; i-- {
		if code := waitCmd(t, cmds[i], fmt.Sprintf("node %d", i), errs[i]); code != 0 {
			t.Fatalf("node %d exited %d:\n%s\nnode 0's output:\n%s\n%s", i, code, errs[i], out, errs[0])
		}
	}
	mpitest.Check(t, out.String(), 2*n, seed, counts)
	r.noLeftovers(t)
}
