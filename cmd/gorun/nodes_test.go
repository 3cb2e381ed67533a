package main

import (
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/proctest"
	"github.com/gorun/gorun/launcher"
)

// TestPerNodeFlags: a per-node start with a missing or bad piece fails at
// once with an error that names it; the flags also come from the
// environment (a pod template's), and node 0 of a one-node job runs the
// job on this machine without a rendezvous.
func TestPerNodeFlags(t *testing.T) {
	t.Setenv("GORUN_JOB_SECRET", "")
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"--nnodes", "2", "--node-rank", "1", "true"}, "--nnodes needs --rendezvous"},
		{nil, []string{"--nnodes", "2", "--node-rank", "2", "--rendezvous", "h:1", "true"}, "--node-rank 2: want 0 to 1"},
		{nil, []string{"--nnodes", "0", "true"}, "--nnodes 0: want at least 1"},
		{nil, []string{"--nnodes", "2", "--nproc-per-node", "0", "--rendezvous", "h:1", "true"}, "--nproc-per-node 0"},
		{nil, []string{"--nnodes", "2", "--rendezvous", "h:1", "true"}, "needs the job's secret in GORUN_JOB_SECRET"},
		{nil, []string{"--nnodes", "2", "--nproc-per-node", "2", "-np", "3", "--rendezvous", "h:1", "true"}, "-np 3: a per-node start runs --nproc-per-node ranks on each node: leave -np out or give 4"},
		{[]string{"GORUN_JOB_SECRET=sixteen-bytes-xx"}, []string{"--nnodes", "2", "--rendezvous", "h:1", "-H", "a:1", "true"}, "--H: a per-node start (--nnodes) has no host list"},
		{[]string{"GORUN_NNODES=3", "GORUN_NODE_RANK=5"}, []string{"true"}, "--node-rank 5: want 0 to 2"},
		{[]string{"GORUN_NNODES=2", "JOB_COMPLETION_INDEX=1", "GORUN_JOB_SECRET=sixteen-bytes-xx", "GORUN_RENDEZVOUS=127.0.0.1:1"}, []string{"--rendezvous-timeout", "300ms", "true"}, "node 1: no launcher at 127.0.0.1:1 within 300ms"},
	} {
		cmd, _, errb := gorunCmd(t, c.args...)
		cmd.Env = append(cmd.Env, c.env...)
		err := cmd.Run()
		if err == nil || cmd.ProcessState.ExitCode() == 0 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v %v: %v\n%s\nwant an error saying %q", c.env, c.args, err, errb, c.want)
		}
	}
	r := gorun(t, "--nnodes", "1", "--nproc-per-node", "3", "sh", "-c", "echo rank $GORUN_RANK of $GORUN_SIZE")
	if r.code != 0 || strings.Count(r.stdout, " of 3") != 3 {
		t.Fatalf("one node: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}

// TestPerNodeResult: in a per-node start every node's gorun exits with
// the job's code, not node 0's alone (a Kubernetes Job's pods fail with
// the job): two nodes on this machine, node 1 dialing from its
// non-loopback address; a rank of node 1 exits 3, then a job that
// succeeds.
func TestPerNodeResult(t *testing.T) {
	any, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	addrs := launcher.ListenAddrs(any, "")
	any.Close()
	var ip string
	for _, a := range addrs {
		if h, _, err := net.SplitHostPort(a); err == nil && net.ParseIP(h).To4() != nil {
			ip = h
			break
		}
	}
	if ip == "" {
		t.Fatalf("no non-loopback IPv4 address on this machine: %v", addrs)
	}
	for _, c := range []struct {
		script string
		code   int
	}{
		{`if [ "$GORUN_RANK" = 1 ]; then exit 3; fi; echo rank $GORUN_RANK done`, 3},
		{`echo rank $GORUN_RANK done`, 0},
	} {
		l, err := net.Listen("tcp", ip+":0")
		if err != nil {
			t.Fatal(err)
		}
		rv := l.Addr().String()
		l.Close()
		var cmds [2]*exec.Cmd
		var errs [2]*proctest.Buffer
		for i := 1; i >= 0; i-- {
			cmd, _, errb := gorunCmd(t, "--nnodes", "2", "--node-rank", strconv.Itoa(i), "--rendezvous", rv, "--rendezvous-timeout", "30s", "sh", "-c", c.script)
			cmd.Env = append(cmd.Env, "GORUN_JOB_SECRET=node-result-test")
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			cmds[i], errs[i] = cmd, errb
		}
		for i, cmd := range cmds {
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(60 * time.Second):
				_ = cmd.Process.Kill()
				<-done
				t.Fatalf("node %d hung:\n%s", i, errs[i])
			}
			if got := cmd.ProcessState.ExitCode(); got != c.code {
				t.Fatalf("node %d exited %d, want the job's %d:\n%s", i, got, c.code, errs[i])
			}
		}
		if c.code != 0 && !strings.Contains(errs[1].String(), "gorun node 1: the job failed with exit code 3") {
			t.Fatalf("node 1 does not say the job failed:\n%s", errs[1])
		}
	}
}
