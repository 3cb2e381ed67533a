package agent

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
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
	joined := []control.Joiner{{Rank: 0, Addr: "127.0.0.1:4021", Host: "h1/7"}}
	if err := l.conn.Send(&proto.Message{Kind: proto.MsgView, Epoch: 3, Live: []int{0, 1, 2}, Joined: joined}); err != nil {
		t.Fatal(err)
	}
	for _, m := range l.recvUntil(t, proto.MsgDone) {
		switch {
		case m.Kind == proto.MsgOutput:
			out = append(out, string(m.Data))
		case m.Kind == proto.MsgExit && m.Exit.Code != 0:
			t.Fatalf("restarted rank: %+v", m.Exit)
		}
	}
	// The rank's output, the join (control channel) and the agent's
	// warning about the malformed line reach the launcher by different
	// ways: only the rank's own lines keep their order.
	var said, warned []string
	for _, o := range out {
		if strings.Contains(o, "control channel") {
			warned = append(warned, o)
		} else {
			said = append(said, o)
		}
	}
	want := []string{fmt.Sprintf("restart 1 rank 0 port %d pmi none fd 3", port), "first view 2 1,2", "then view 3 0,1,2 +0 127.0.0.1:4021 h1/7"}
	if strings.Join(said, "|") != strings.Join(want, "|") {
		t.Fatalf("restarted rank said %q, want %q", said, want)
	}
	if len(warned) != 1 || !strings.Contains(warned[0], `rank 0: control channel (GORUN_CONTROL_FD): control: malformed line "join nowhere"`) {
		t.Fatalf("the agent warned %q", warned)
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

// TestRestartMoved: a rank of a host that is gone, restarted here with
// its spec (MsgRestart.RankSpec), runs with that spec's numbers, this
// host's address, a gossip port of its own (not this host's ranks'), its
// own control channel (the restart's view first, its join up, later views
// down) and status page; it is one of the host's ranks: its output and
// exit are reported, the launcher's signal reaches it, the agent is not
// done while it runs, and nothing of it is left once it is done.
func TestRestartMoved(t *testing.T) {
	script := `fd=$GORUN_CONTROL_FD
		if [ "$GORUN_RANK" = 0 ]; then read -r line <&$fd; echo "rank 0 $line"; exit 0; fi
		echo "rank $GORUN_RANK restart $GORUN_RESTART_COUNT local $GORUN_LOCAL_RANK/$GORUN_LOCAL_SIZE node $GORUN_NODE_RANK addr $GORUN_ADDR port $GORUN_GOSSIP_PORT page ${GORUN_STATUS_FILE:+yes}"
		read -r line <&$fd; echo "first $line"
		echo "join 127.0.0.1:4021 h2/7" >&$fd
		read -r line <&$fd; echo "then $line"
		sleep 30`
	l := startAgent(t, context.Background(), script, 1, elastic, maxRestarts(1))
	own := l.ready.Ports[0]
	if err := l.conn.Send(&proto.Message{Kind: proto.MsgStart}); err != nil {
		t.Fatal(err)
	}
	l.recvUntil(t, proto.MsgStarted)
	spec := &proto.RankSpec{Rank: 3, LocalRank: 1, LocalSize: 2, NodeRank: 4}
	if err := l.conn.Send(&proto.Message{Kind: proto.MsgRestart, Rank: 3, Count: 1, Epoch: 1, Live: []int{0, 1}, RankSpec: spec}); err != nil {
		t.Fatal(err)
	}
	var out []string
	pid := 0
	// Until the join and the rank's two lines: its output and its join
	// (the control channel) reach the launcher by different ways, in
	// either order.
	msgs := l.recvUntil(t, proto.MsgJoin)
	for outputs(msgs) < 2 { // the rank prints both before it joins
		m, err := l.conn.Recv()
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, m)
	}
	for _, m := range msgs {
		switch m.Kind {
		case proto.MsgStarted:
			if m.Rank != 3 || m.Pid <= 0 {
				t.Fatalf("started %+v", m)
			}
			pid = m.Pid
		case proto.MsgOutput:
			if m.Rank != 3 {
				t.Fatalf("output of rank %d: %q", m.Rank, m.Data)
			}
			out = append(out, string(m.Data))
		case proto.MsgJoin:
			if m.Rank != 3 || m.Addr != "127.0.0.1:4021" || m.Host != "h2/7" {
				t.Fatalf("join relayed as %+v", m)
			}
		case proto.MsgExit, proto.MsgDone:
			t.Fatalf("before its join: %+v", m)
		}
	}
	if len(out) != 2 || out[1] != "first view 1 0,1" {
		t.Fatalf("restarted rank said %q", out)
	}
	var port int
	var addr string
	if _, err := fmt.Sscanf(out[0], "rank 3 restart 1 local 1/2 node 4 addr %s port %d page yes", &addr, &port); err != nil {
		t.Fatalf("restarted rank said %q: %v", out[0], err)
	}
	if addr != l.ready.Addr || port <= 0 || port == own {
		t.Fatalf("restarted rank at %s:%d; the host's address is %s, its own rank's port %d", addr, port, l.ready.Addr, own)
	}
	// The view goes to both; rank 0 finishes, and the agent is not done
	// while rank 3 runs.
	joined := []control.Joiner{{Rank: 3, Addr: "127.0.0.1:4021", Host: "h2/7"}}
	if err := l.conn.Send(&proto.Message{Kind: proto.MsgView, Epoch: 2, Live: []int{0, 1, 3}, Joined: joined}); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for !got["rank 0 exit"] || !got["rank 3 view"] {
		m, err := l.conn.Recv()
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case m.Kind == proto.MsgDone:
			t.Fatal("done while the restarted rank runs")
		case m.Kind == proto.MsgExit && m.Rank == 0 && m.Exit.Code == 0:
			got["rank 0 exit"] = true
		case m.Kind == proto.MsgExit:
			t.Fatalf("exit %d: %+v", m.Rank, m.Exit)
		case m.Kind == proto.MsgOutput && m.Rank == 3 && string(m.Data) == "then view 2 0,1,3 +3 127.0.0.1:4021 h2/7":
			got["rank 3 view"] = true
		case m.Kind == proto.MsgOutput && !(m.Rank == 0 && strings.HasPrefix(string(m.Data), "rank 0 view 2 0,1,3")):
			t.Fatalf("output of rank %d: %q", m.Rank, m.Data)
		}
	}
	// The launcher's fence reaches it; its exit makes the agent done.
	if err := l.conn.Send(&proto.Message{Kind: proto.MsgSignalRank, Rank: 3, Signal: int(syscall.SIGKILL)}); err != nil {
		t.Fatal(err)
	}
	msgs = l.recvUntil(t, proto.MsgDone)
	if ex := msgs[len(msgs)-2]; ex.Kind != proto.MsgExit || ex.Rank != 3 || ex.Exit.Signal != int(syscall.SIGKILL) || ex.Exit.ForeignKill || ex.Exit.Pid != pid {
		t.Fatalf("before done: %+v", ex)
	}
	if left := groupLeft(pid); len(left) > 0 {
		t.Fatalf("rank 3's process group %d still runs %v", pid, left)
	}
	l.in.Close()
	if err := l.wait(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// groupLeft lists the processes of process group pgid that have not
// exited (zombies, which have, are left out).
func groupLeft(pgid int) []string {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var left []string
	for _, f := range stats {
		b, err := os.ReadFile(f)
		i := bytes.LastIndexByte(b, ')')
		if err != nil || i < 0 {
			continue
		}
		// After "(comm)": state, ppid, pgrp.
		if fields := strings.Fields(string(b[i+1:])); len(fields) > 2 && fields[0] != "Z" && fields[2] == strconv.Itoa(pgid) {
			left = append(left, string(b))
		}
	}
	return left
}

// outputs counts the output messages among msgs.
func outputs(msgs []*proto.Message) int {
	n := 0
	for _, m := range msgs {
		if m.Kind == proto.MsgOutput {
			n++
		}
	}
	return n
}
