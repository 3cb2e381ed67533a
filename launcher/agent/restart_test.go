package agent

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/gorun/gorun/internal/control"
	"github.com/gorun/gorun/launcher/proto"
)

func maxRestarts(n int) func(*proto.HostSpec) {
	return func(s *proto.HostSpec) { s.MaxRestarts = n }
}

// TestRestart: a rank that fails with restarts left keeps the agent
// going (no MsgDone) until the launcher's MsgRestart; the restarted rank
// has the same rank and gossip port, GORUN_RESTART_COUNT, no PMI socket
// (its control channel is descriptor 3), and the restart's view as the
// first line of its channel (not a view sent while it was down); its join
// line reaches the launcher as MsgJoin, a bad one is reported, and the
// next view, with its joiner, reaches it.
func TestRestart(t *testing.T) {
	script := `fd=$GORUN_CONTROL_FD
		if [ -z "$GORUN_RESTART_COUNT" ]; then echo "first rank $GORUN_RANK port $GORUN_GOSSIP_PORT pmi ${PMI_FD:-none}"; exit 3; fi
		echo "restart $GORUN_RESTART_COUNT rank $GORUN_RANK port $GORUN_GOSSIP_PORT pmi ${PMI_FD:-none} fd $fd"
		read -r line <&$fd; echo "first $line"
		echo "join 127.0.0.1:4021 h1/7" >&$fd
		echo "join nowhere" >&$fd
		read -r line <&$fd; echo "then $line"`
	l := startAgent(t, context.Background(), script, 1, elastic, withPMI, maxRestarts(2))
	port := l.ready.Ports[0]
	if err := l.conn.Send(&proto.Message{Kind: proto.MsgStart}); err != nil {
		t.Fatal(err)
	}
	var out []string
	var pid int
	for _, m := range l.recvUntil(t, proto.MsgExit) {
		switch m.Kind {
		case proto.MsgOutput:
			out = append(out, string(m.Data))
		case proto.MsgStarted:
			pid = m.Pid
		case proto.MsgExit:
			if m.Exit.Code != 3 {
				t.Fatalf("first exit %+v", m.Exit)
			}
		}
	}
	if want := fmt.Sprintf("first rank 0 port %d pmi 3", port); len(out) != 1 || out[0] != want {
		t.Fatalf("first start said %q, want %q", out, want)
	}
	// A view while the rank is down does not reach its next start.
	if err := l.conn.Send(&proto.Message{Kind: proto.MsgView, Epoch: 1, Live: []int{1, 2, 3}}); err != nil {
		t.Fatal(err)
	}
	if err := l.conn.Send(&proto.Message{Kind: proto.MsgRestart, Rank: 0, Count: 1, Epoch: 2, Live: []int{1, 2}}); err != nil {
		t.Fatal(err)
	}
	out = nil
	for _, m := range l.recvUntil(t, proto.MsgJoin) {
		switch m.Kind {
		case proto.MsgDone:
			t.Fatal("the agent was done while its rank was to be restarted")
		case proto.MsgStarted:
			if m.Rank != 0 || m.Pid == pid || m.Pid <= 0 {
				t.Fatalf("restart started %+v (first pid %d)", m, pid)
			}
		case proto.MsgOutput:
			out = append(out, string(m.Data))
		case proto.MsgJoin:
			if m.Rank != 0 || m.Addr != "127.0.0.1:4021" || m.Host != "h1/7" {
				t.Fatalf("join relayed as %+v", m)
			}
		}
	}
	if want := []string{fmt.Sprintf("restart 1 rank 0 port %d pmi none fd 3", port), "first view 2 1,2"}; strings.Join(out, "|") != strings.Join(want, "|") {
		t.Fatalf("restarted rank said %q, want %q", out, want)
	}
	joined := []control.Joiner{{Rank: 0, Addr: "127.0.0.1:4021", Host: "h1/7"}}
	if err := l.conn.Send(&proto.Message{Kind: proto.MsgView, Epoch: 3, Live: []int{0, 1, 2}, Joined: joined}); err != nil {
		t.Fatal(err)
	}
	out = nil
	for _, m := range l.recvUntil(t, proto.MsgDone) {
		switch {
		case m.Kind == proto.MsgOutput:
			out = append(out, string(m.Data))
		case m.Kind == proto.MsgExit && m.Exit.Code != 0:
			t.Fatalf("restarted rank: %+v", m.Exit)
		}
	}
	if len(out) != 2 || !strings.Contains(out[0], `rank 0: control channel (GORUN_CONTROL_FD): control: malformed line "join nowhere"`) ||
		out[1] != "then view 3 0,1,2 +0 127.0.0.1:4021 h1/7" {
		t.Fatalf("after the join: %q", out)
	}
	l.in.Close()
	if err := l.wait(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// TestRestartBudget: the agent waits for a restart only while the rank
// has restarts left and the ranks are not told to stop: a rank that used
// its restarts, or one the launcher stops instead (MsgTerminate), lets the
// agent finish at once.
func TestRestartBudget(t *testing.T) {
	for _, how := range []string{"used up", "terminate"} {
		t.Run(how, func(t *testing.T) {
			l := startAgent(t, context.Background(), `echo "start ${GORUN_RESTART_COUNT:-0}"; exit 3`, 1, elastic, maxRestarts(1))
			if err := l.conn.Send(&proto.Message{Kind: proto.MsgStart}); err != nil {
				t.Fatal(err)
			}
			for _, m := range l.recvUntil(t, proto.MsgExit) {
				if m.Kind == proto.MsgDone {
					t.Fatal("done with a restart left")
				}
			}
			next := &proto.Message{Kind: proto.MsgRestart, Rank: 0, Count: 1, Epoch: 1, Live: []int{1}}
			if how == "terminate" {
				next = &proto.Message{Kind: proto.MsgTerminate, Signal: 15}
			}
			if err := l.conn.Send(next); err != nil {
				t.Fatal(err)
			}
			var starts []string
			for _, m := range l.recvUntil(t, proto.MsgDone) {
				if m.Kind == proto.MsgOutput {
					starts = append(starts, string(m.Data))
				}
			}
			want := map[string]string{"used up": "start 1", "terminate": ""}[how]
			if strings.Join(starts, "|") != want {
				t.Fatalf("after the first exit: %q, want %q", starts, want)
			}
			// Once stopped, a late restart changes nothing.
			_ = l.conn.Send(&proto.Message{Kind: proto.MsgRestart, Rank: 0, Count: 1, Epoch: 1, Live: []int{1}})
			l.in.Close()
			if err := l.wait(t); err != nil {
				t.Fatalf("Run: %v", err)
			}
		})
	}
}
