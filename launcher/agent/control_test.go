package agent

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/launcher/proto"
)

func elastic(s *proto.HostSpec) { s.Elastic = true }

func withPMI(s *proto.HostSpec) {
	s.PMI = &proto.PMISpec{KVS: "kvs_agenttest", Size: len(s.Ranks), Nodes: make([]int, len(s.Ranks)), NodeNames: []string{"localhost"}}
}

// TestControlChannel: with an elastic spec every rank gets a control
// channel after its other descriptors (3 alone, after PMI_FD and Open
// MPI's library with PMI); a suspect line reaches the launcher naming
// both ranks, bad lines are reported in the rank's stderr and ignored,
// MsgSignalRank fences one rank (not counted as a foreign kill), and a
// view reaches every running rank as one line.
func TestControlChannel(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []func(*proto.HostSpec)
	}{{"alone", []func(*proto.HostSpec){elastic}}, {"after PMI", []func(*proto.HostSpec){elastic, withPMI}}} {
		t.Run(tc.name, func(t *testing.T) {
			script := `fd=$GORUN_CONTROL_FD; echo "fd $fd pmi ${PMI_FD:-none}"
				if [ "$GORUN_RANK" = 0 ]; then
					echo hello >&$fd
					head -c 70000 /dev/zero | tr '\0' x >&$fd; echo >&$fd
					echo "suspect 2 4 frozen for 3s" >&$fd
				fi
				read -r line <&$fd; echo "got $line"`
			l := startAgent(t, context.Background(), script, 3, tc.opts...)
			if err := l.conn.Send(&proto.Message{Kind: proto.MsgStart}); err != nil {
				t.Fatal(err)
			}
			var stderr []string
			fds := map[int]string{}
			for _, m := range l.recvUntil(t, proto.MsgSuspect) {
				if m.Kind == proto.MsgOutput && m.Stream == proto.StreamStderr {
					stderr = append(stderr, string(m.Data))
				}
				if m.Kind == proto.MsgOutput && strings.HasPrefix(string(m.Data), "fd ") {
					fds[m.Rank] = string(m.Data)
				}
				if m.Kind == proto.MsgSuspect && (m.Rank != 0 || m.Target != 2 || m.Epoch != 4 || m.Err != "frozen for 3s") {
					t.Fatalf("suspect %+v", m)
				}
			}
			if len(stderr) != 2 || !strings.Contains(stderr[0], `rank 0: control channel (GORUN_CONTROL_FD): control: malformed line "hello"`) ||
				!strings.Contains(stderr[1], "longer than 65536 bytes; ignored") {
				t.Fatalf("bad lines reported as %q", stderr)
			}
			for len(fds) < 3 { // rank 2 says where its channel is before it is fenced
				for _, m := range l.recvUntil(t, proto.MsgOutput) {
					if m.Kind == proto.MsgOutput && strings.HasPrefix(string(m.Data), "fd ") {
						fds[m.Rank] = string(m.Data)
					}
				}
			}
			if err := l.conn.Send(&proto.Message{Kind: proto.MsgSignalRank, Rank: 2, Signal: int(syscall.SIGKILL)}); err != nil {
				t.Fatal(err)
			}
			var ex *proto.Exit
			for _, m := range l.recvUntil(t, proto.MsgExit) {
				if m.Kind == proto.MsgOutput && strings.HasPrefix(string(m.Data), "fd ") {
					fds[m.Rank] = string(m.Data)
				}
				if m.Kind == proto.MsgExit && m.Rank == 2 {
					ex = m.Exit
				}
			}
			if ex == nil || ex.Signal != int(syscall.SIGKILL) || ex.ForeignKill {
				t.Fatalf("fenced rank 2: %+v", ex)
			}
			if err := l.conn.Send(&proto.Message{Kind: proto.MsgView, Epoch: 1, Live: []int{0, 1}}); err != nil {
				t.Fatal(err)
			}
			got := map[int]string{}
			for _, m := range l.recvUntil(t, proto.MsgDone) {
				if m.Kind == proto.MsgOutput && strings.HasPrefix(string(m.Data), "got ") {
					got[m.Rank] = string(m.Data)
				}
				if m.Kind == proto.MsgOutput && strings.HasPrefix(string(m.Data), "fd ") {
					fds[m.Rank] = string(m.Data)
				}
				if m.Kind == proto.MsgExit && m.Exit.Code != 0 {
					t.Fatalf("rank %d: %+v", m.Rank, m.Exit)
				}
			}
			if got[0] != "got view 1 0,1" || got[1] != "got view 1 0,1" || len(got) != 2 {
				t.Fatalf("views read: %v", got)
			}
			for r := range 3 {
				f := strings.Fields(fds[r])
				if len(f) != 4 {
					t.Fatalf("rank %d: %q", r, fds[r])
				}
				fd, _ := strconv.Atoi(f[1])
				// With PMI: PMI_FD 3, Open MPI's library 4 if this gorun has it.
				if f[3] == "none" && fd != 3 || f[3] != "none" && (f[3] != "3" || !slices.Contains([]int{4, 5}, fd)) {
					t.Fatalf("rank %d: control on %d (PMI_FD %s)", r, fd, f[3])
				}
			}
			l.in.Close()
			if err := l.wait(t); err != nil {
				t.Fatalf("Run: %v", err)
			}
		})
	}
}

// TestControlStuckRank: a rank that never reads its channel does not
// block the agent: views pile up to the socket's buffer and the queue,
// older ones are dropped (once said in the rank's stderr), the agent
// still answers at once, and the rank still ends when told.
func TestControlStuckRank(t *testing.T) {
	l := startAgent(t, context.Background(), `echo up; exec sleep 300`, 1, elastic)
	if err := l.conn.Send(&proto.Message{Kind: proto.MsgStart}); err != nil {
		t.Fatal(err)
	}
	l.recvUntil(t, proto.MsgOutput)
	live := make([]int, 4000) // a view line of about 20 KB
	for i := range live {
		live[i] = i
	}
	// The launcher's side reads while it sends, as the launcher does.
	sent := make(chan time.Time, 1)
	go func() {
		for e := 1; e <= 200; e++ { // 4 MB: far more than a socket buffer
			if l.conn.Send(&proto.Message{Kind: proto.MsgView, Epoch: e, Live: live}) != nil {
				return
			}
		}
		sent <- time.Now()
		_ = l.conn.Send(&proto.Message{Kind: proto.MsgClock})
	}()
	var warned int
	for _, m := range l.recvUntil(t, proto.MsgClock) {
		if m.Kind == proto.MsgOutput && strings.Contains(string(m.Data), "does not read its control channel") {
			warned++
		}
	}
	if d := time.Since(<-sent); d > 2*time.Second || warned != 1 {
		t.Fatalf("agent answered after %v, %d warnings", d, warned)
	}
	if err := l.conn.Send(&proto.Message{Kind: proto.MsgTerminate, Signal: int(syscall.SIGTERM)}); err != nil {
		t.Fatal(err)
	}
	l.recvUntil(t, proto.MsgDone)
	l.in.Close()
	if err := l.wait(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
}
