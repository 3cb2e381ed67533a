package launcher

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/proctest"
)

// freezeSpawner starts real agents (this test binary) for fake remote
// hosts, and can freeze one: a stopped agent keeps its pipes open and says
// nothing, as a host behind a network partition does.
type freezeSpawner struct {
	mu   sync.Mutex
	cmds map[string]*exec.Cmd
}

func (s *freezeSpawner) AgentCommand(host string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], AgentCommandName)
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	s.mu.Lock()
	s.cmds[host] = cmd
	s.mu.Unlock()
	return cmd
}

func (s *freezeSpawner) freeze(t *testing.T, host string) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.cmds[host].Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
}

// TestSilentHostBoundedWait: with one host gone silent mid-job (its agent
// frozen), a failed rank on another host ends the job within AgentWait
// plus a margin, not the grace period plus 10 s; the silent host is named,
// the exit code is the rank's, and nothing of the job is left running.
// (The silent host's rank is one process, exec'd, that waits with the
// mark in its command line: a rank's own children outlive an agent that
// is killed, since only the rank gets the agent's death signal, and this
// test used to leave such a child behind.)
func TestSilentHostBoundedWait(t *testing.T) {
	proctest.SkipShort(t)
	dir := t.TempDir()
	mark := fmt.Sprintf("gorunmark_silent_%d", time.Now().UnixNano())
	sp := &freezeSpawner{cmds: map[string]*exec.Cmd{}}
	cfg := DefaultConfig()
	cfg.Program, cfg.Gorun = "sh", os.Args[0]
	cfg.Args = []string{"-c", `echo up; if [ "$GORUN_RANK" = 0 ]; then while [ ! -e "$1/fail" ]; do sleep 0.02; done; echo "rank 0 gives up" >&2; exit 3; fi; mkfifo "$1/$0"; exec cat "$1/$0"`, mark, dir}
	cfg.Hosts = []Host{{Name: "h1.test", Slots: 1}, {Name: "h2.test", Slots: 1}}
	cfg.Remote, cfg.PMI, cfg.AgentWait = sp, PMIOff, time.Second
	var out, errb proctest.Buffer
	cfg.Stdout, cfg.Stderr = &out, &errb

	type ran struct {
		res Result
		err error
		at  time.Time
	}
	done := make(chan ran, 1)
	go func() {
		res, err := Run(context.Background(), cfg)
		done <- ran{res, err, time.Now()}
	}()
	proctest.WaitFor(t, 30*time.Second, func() bool { return strings.Count(out.String(), "up") == 2 }, "both ranks up")
	sp.freeze(t, "h2.test")
	failed := time.Now()
	if err := os.WriteFile(filepath.Join(dir, "fail"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var r ran
	select {
	case r = <-done:
	case <-time.After(time.Minute):
		t.Fatalf("Run still waiting a minute after the failure:\n%s", errb.String())
	}
	took := r.at.Sub(failed)
	stderr := errb.String()
	if r.err != nil || r.res.ExitCode != 3 || !strings.Contains(stderr, "rank 0 on h1.test") {
		t.Fatalf("exit %d, %v, want 3 naming rank 0 on h1.test:\n%s", r.res.ExitCode, r.err, stderr)
	}
	if !strings.Contains(stderr, "h2.test unreachable: no word from its agent within 1s") {
		t.Fatalf("the silent host is not reported:\n%s", stderr)
	}
	// Before the bound, the wait was Grace (5 s) + 10 s.
	if limit := cfg.AgentWait + 3*time.Second; took > limit {
		t.Fatalf("the job ended %v after the failure, want at most %v", took, limit)
	}
	t.Logf("the job ended %v after the failure:\n%s", took, stderr)
	proctest.WaitFor(t, 5*time.Second, func() bool {
		b, _ := exec.Command("pgrep", "-f", mark).Output()
		return len(strings.TrimSpace(string(b))) == 0
	}, "the ranks of the silent host to be gone")
	for host, cmd := range sp.cmds {
		if err := cmd.Process.Signal(syscall.Signal(0)); err == nil {
			t.Errorf("the agent of %s (pid %d) is still there", host, cmd.Process.Pid)
		}
	}
}
