package launcher

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// hangSpawner starts agents that never greet, like an SSH connection that
// hangs, and remembers them.
type hangSpawner struct {
	mu   sync.Mutex
	cmds []*exec.Cmd
}

func (s *hangSpawner) AgentCommand(string) *exec.Cmd {
	cmd := exec.Command("sleep", "60")
	s.mu.Lock()
	s.cmds = append(s.cmds, cmd)
	s.mu.Unlock()
	return cmd
}

func hangingJob(sp *hangSpawner) Config {
	cfg := DefaultConfig()
	cfg.Program, cfg.Gorun = "true", "/nonexistent/gorun"
	cfg.Hosts = []Host{{Name: "h1.invalid", Slots: 1}, {Name: "h2.invalid", Slots: 1}}
	cfg.Remote, cfg.Preflight = sp, time.Minute
	cfg.Stdout, cfg.Stderr = io.Discard, io.Discard
	return cfg
}

// runBounded runs the job, failing the test if Run does not come back:
// the point of these tests is that it does, long before Preflight.
func runBounded(t *testing.T, ctx context.Context, cfg Config) (Result, error) {
	t.Helper()
	type out struct {
		res Result
		err error
	}
	ch := make(chan out, 1)
	go func() {
		res, err := Run(ctx, cfg)
		ch <- out{res, err}
	}()
	select {
	case o := <-ch:
		return o.res, o.err
	case <-time.After(30 * time.Second):
		t.Fatal("Run still waiting on pre-flight 30 s after the interruption")
		return Result{}, nil
	}
}

func checkReaped(t *testing.T, sp *hangSpawner) {
	t.Helper()
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if len(sp.cmds) != 2 {
		t.Fatalf("%d agents started, want 2", len(sp.cmds))
	}
	for _, c := range sp.cmds {
		if c.Process == nil {
			t.Fatal("agent never started")
		}
		if err := c.Process.Signal(syscall.Signal(0)); !errors.Is(err, os.ErrProcessDone) {
			t.Errorf("agent pid %d still there after Run returned (signal 0: %v)", c.Process.Pid, err)
		}
	}
}

// TestInterruptDuringPreflight: Ctrl-C while hosts are still in pre-flight
// ends the job at once with 128+SIGINT, and no agent is left.
func TestInterruptDuringPreflight(t *testing.T) {
	sp := &hangSpawner{}
	cfg := hangingJob(sp)
	sigs := make(chan os.Signal, 1)
	cfg.Signals = sigs
	time.AfterFunc(300*time.Millisecond, func() { sigs <- syscall.SIGINT })
	res, err := runBounded(t, context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "during pre-flight") || res.ExitCode != 128+int(syscall.SIGINT) {
		t.Fatalf("got exit %d, %v; want %d and an error saying pre-flight was interrupted", res.ExitCode, err, 128+int(syscall.SIGINT))
	}
	checkReaped(t, sp)
}

// TestCancelDuringPreflight: the caller's context ends the pre-flight too.
func TestCancelDuringPreflight(t *testing.T) {
	sp := &hangSpawner{}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	res, err := runBounded(t, ctx, hangingJob(sp))
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || res.ExitCode != ExitTimeout {
		t.Fatalf("got exit %d, %v; want %d and the context's error", res.ExitCode, err, ExitTimeout)
	}
	checkReaped(t, sp)
}
