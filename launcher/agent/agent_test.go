package agent

import (
	"bufio"
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/proctest"
	"github.com/gorun/gorun/launcher/proto"
)

// launcherEnd is the launcher's side of an agent run in-process over
// pipes.
type launcherEnd struct {
	conn  *proto.Conn
	in    *io.PipeWriter // the agent's stdin
	ready *proto.Ready
	ran   chan error // Run's result
}

// startAgent runs Run in-process for one host with the given ranks of sh
// running script, and goes through the banner, the spec (changed by opts)
// and pre-flight.
func startAgent(t *testing.T, ctx context.Context, script string, ranks int, opts ...func(*proto.HostSpec)) *launcherEnd {
	t.Helper()
	proctest.SkipShort(t)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	l := &launcherEnd{in: inW, ran: make(chan error, 1)}
	go func() {
		l.ran <- Run(ctx, Config{In: inR, Out: outW, Environ: os.Environ()})
		outW.Close()
	}()
	t.Cleanup(func() { inW.Close(); outR.Close() })
	br := bufio.NewReader(outR)
	if _, err := proto.SkipBanner(br); err != nil {
		t.Fatal(err)
	}
	l.conn = proto.NewConn(br, inW)
	spec := &proto.HostSpec{Version: proto.Version, JobID: "agenttest", Host: "localhost", Program: "sh", Args: []string{"-c", script}, Wdir: t.TempDir(), Grace: time.Second}
	for r := range ranks {
		spec.Ranks = append(spec.Ranks, proto.RankSpec{Rank: r, LocalRank: r, LocalSize: ranks})
	}
	for _, o := range opts {
		o(spec)
	}
	if err := l.conn.Send(&proto.Message{Kind: proto.MsgSpec, Spec: spec}); err != nil {
		t.Fatal(err)
	}
	m, err := l.conn.Recv()
	if err != nil || m.Kind != proto.MsgReady || len(m.Ready.Ports) != ranks {
		t.Fatalf("pre-flight: %+v, %v", m, err)
	}
	l.ready = m.Ready
	return l
}

// recvUntil reads messages until one of kind, and returns them all.
func (l *launcherEnd) recvUntil(t *testing.T, kind proto.Kind) []*proto.Message {
	t.Helper()
	var got []*proto.Message
	for {
		m, err := l.conn.Recv()
		if err != nil {
			t.Fatalf("after %d messages: %v", len(got), err)
		}
		got = append(got, m)
		if m.Kind == kind {
			return got
		}
	}
}

// drain reads whatever else the agent sends, so that it never blocks.
func (l *launcherEnd) drain() {
	go func() {
		for {
			if _, err := l.conn.Recv(); err != nil {
				return
			}
		}
	}()
}

func (l *launcherEnd) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-l.ran:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
		return nil
	}
}

// TestRunReportsRanks: the agent starts its ranks, forwards their output
// and exits, says done when they are gone, and returns once the launcher
// closes the stream.
func TestRunReportsRanks(t *testing.T) {
	l := startAgent(t, context.Background(), `echo "out $GORUN_RANK"; echo "err $GORUN_RANK" >&2; exit $((GORUN_RANK + 3))`, 2)
	if err := l.conn.Send(&proto.Message{Kind: proto.MsgStart, Env: []string{"GORUN_SIZE=2"}}); err != nil {
		t.Fatal(err)
	}
	msgs := l.recvUntil(t, proto.MsgDone)
	started, exits := map[int]bool{}, map[int]int{}
	var lines []string
	for _, m := range msgs {
		switch m.Kind {
		case proto.MsgStarted:
			started[m.Rank] = m.Pid > 0
		case proto.MsgOutput:
			lines = append(lines, string(m.Data))
		case proto.MsgExit:
			exits[m.Rank] = m.Exit.Code
		}
	}
	if !started[0] || !started[1] || exits[0] != 3 || exits[1] != 4 {
		t.Fatalf("started %v, exits %v", started, exits)
	}
	if out := strings.Join(lines, ","); !strings.Contains(out, "out 0") || !strings.Contains(out, "err 1") {
		t.Fatalf("output %q", out)
	}
	l.in.Close()
	if err := l.wait(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// TestRunTerminate: MsgTerminate signals the ranks, and SIGKILL follows
// the grace period for a rank that ignores it.
func TestRunTerminate(t *testing.T) {
	l := startAgent(t, context.Background(), `trap "" TERM; echo up; sleep 300 & wait; wait`, 1)
	if err := l.conn.Send(&proto.Message{Kind: proto.MsgStart}); err != nil {
		t.Fatal(err)
	}
	l.recvUntil(t, proto.MsgOutput)
	start := time.Now()
	if err := l.conn.Send(&proto.Message{Kind: proto.MsgTerminate, Signal: 15}); err != nil {
		t.Fatal(err)
	}
	var ex *proto.Exit
	for _, m := range l.recvUntil(t, proto.MsgDone) {
		if m.Kind == proto.MsgExit {
			ex = m.Exit
		}
	}
	if ex == nil || ex.Signal != 9 || time.Since(start) < time.Second {
		t.Fatalf("exit %+v after %v, want SIGKILL after the 1s grace period", ex, time.Since(start))
	}
	l.in.Close()
	if err := l.wait(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// TestRunOrphaned: when the launcher's stream ends, or the agent's
// context, the ranks are terminated and Run says why.
func TestRunOrphaned(t *testing.T) {
	for _, how := range []string{"stream", "context"} {
		t.Run(how, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			l := startAgent(t, ctx, `echo up; exec sleep 300`, 1)
			if err := l.conn.Send(&proto.Message{Kind: proto.MsgStart}); err != nil {
				t.Fatal(err)
			}
			l.recvUntil(t, proto.MsgOutput)
			l.drain()
			if how == "stream" {
				l.in.Close()
			} else {
				cancel()
			}
			if err := l.wait(t); err == nil || !strings.Contains(err.Error(), "launcher went away; ranks terminated") {
				t.Fatalf("Run: %v", err)
			}
		})
	}
}

// TestRunRefusesOtherVersion: an agent of another protocol version says
// so and stops.
func TestRunRefusesOtherVersion(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ran := make(chan error, 1)
	go func() { ran <- Run(context.Background(), Config{In: inR, Out: outW}); outW.Close() }()
	defer inW.Close()
	br := bufio.NewReader(outR)
	if _, err := proto.SkipBanner(br); err != nil {
		t.Fatal(err)
	}
	c := proto.NewConn(br, inW)
	if err := c.Send(&proto.Message{Kind: proto.MsgSpec, Spec: &proto.HostSpec{Version: proto.Version + 1}}); err != nil {
		t.Fatal(err)
	}
	m, err := c.Recv()
	if err != nil || m.Kind != proto.MsgError || !strings.Contains(m.Err, "use the same gorun version") {
		t.Fatalf("%+v, %v", m, err)
	}
	if err := <-ran; err == nil {
		t.Fatal("Run accepted another version")
	}
}
