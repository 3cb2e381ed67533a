package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gorun/gorun/internal/control"
	"github.com/gorun/gorun/launcher/proto"
)

// The control channel of an elastic rank (gorun --elastic with the ring
// strategy; package control has the protocol). Each rank gets one end of
// a socket pair as GORUN_CONTROL_FD; the agent reads the rank's suspect
// and join lines and passes them to the launcher (MsgSuspect, MsgJoin),
// and writes the launcher's views (MsgView) to every running rank. A
// restarted rank (MsgRestart) gets a fresh channel whose first line is
// the view it was restarted in. A writer goroutine per
// rank drains a short queue, so that a rank that does not read its
// channel never blocks the agent: when the queue is full the oldest view
// in it is dropped (each view is the whole membership).

const (
	// controlQueue is how many views wait for a rank that is slow to
	// read its channel.
	controlQueue = 4
	// controlErrors is how many bad lines of a rank are reported; later
	// ones are dropped silently.
	controlErrors = 10
	// maxReason caps the reason of a suspect passed to the launcher.
	maxReason = 512
)

// controlSession is one rank's control channel.
type controlSession struct {
	conn   net.Conn
	q      chan string   // lines for the rank, written by the writer
	quit   chan struct{} // closed by endControl: the writer stops
	read   chan struct{} // closed when the reader ends (the rank's end closed)
	wrote  chan struct{} // closed when the writer ends
	errors atomic.Int32  // bad lines seen
	slow   bool          // a view was dropped (reported once); the agent's loop's
}

func newControlSession(conn net.Conn) *controlSession {
	return &controlSession{conn: conn, q: make(chan string, controlQueue), quit: make(chan struct{}),
		read: make(chan struct{}), wrote: make(chan struct{})}
}

// serveControl starts p's control reader and writer; endControl waits for
// them.
func (a *agent) serveControl(p *rankProc) {
	s := p.control
	go a.readControl(p, s)
	go s.write()
}

// readControl passes p's suspect and join lines to the launcher until
// p's end of the channel is closed. A line that is too long or malformed
// is reported as a line of p's stderr and ignored. Whether a join counts
// is the launcher's to decide.
func (a *agent) readControl(p *rankProc, s *controlSession) {
	defer close(s.read)
	r := control.NewReader(s.conn)
	for {
		line, err := r.Next()
		if errors.Is(err, control.ErrLineTooLong) {
			a.controlError(p, err)
			continue
		}
		if err != nil {
			return
		}
		if len(line) == 0 {
			continue
		}
		if bytes.HasPrefix(line, []byte("join")) {
			j, err := control.ParseJoin(string(line))
			if err != nil {
				a.controlError(p, err)
				continue
			}
			_ = a.conn.Send(&proto.Message{Kind: proto.MsgJoin, Rank: p.spec.Rank, Addr: j.Addr, Host: j.Host})
			continue
		}
		sus, err := control.ParseSuspect(string(line))
		if err != nil {
			a.controlError(p, err)
			continue
		}
		reason := sus.Reason
		if len(reason) > maxReason {
			reason = reason[:maxReason] + "..."
		}
		_ = a.conn.Send(&proto.Message{Kind: proto.MsgSuspect, Rank: p.spec.Rank, Target: sus.Rank, Epoch: sus.Epoch, Err: reason})
	}
}

// controlError logs a bad line of p's and shows it in p's stderr, for
// p's first controlErrors bad lines.
func (a *agent) controlError(p *rankProc, err error) {
	n := p.control.errors.Add(1)
	if n > controlErrors {
		return
	}
	a.log.Error("control channel: line ignored", "rank", p.spec.Rank, "err", err)
	text := fmt.Sprintf("gorun: rank %d: control channel (GORUN_CONTROL_FD): %v; ignored", p.spec.Rank, err)
	if n == controlErrors {
		text += " (later bad lines are not reported)"
	}
	_ = a.conn.Send(&proto.Message{Kind: proto.MsgOutput, Rank: p.spec.Rank, Stream: proto.StreamStderr, Data: []byte(text)})
}

// write writes the queued lines to the rank until quit; after a write
// error (the rank is gone or closed its end) it only drains the queue.
func (s *controlSession) write() {
	defer close(s.wrote)
	broken := false
	for {
		select {
		case line := <-s.q:
			if !broken {
				_, err := io.WriteString(s.conn, line)
				broken = err != nil
			}
		case <-s.quit:
			return
		}
	}
}

// send queues line for the rank; if the queue is full, the oldest line
// in it makes room, and send reports that it dropped one. Only the
// agent's loop calls it.
func (s *controlSession) send(line string) (dropped bool) {
	for {
		select {
		case s.q <- line:
			return dropped
		default:
		}
		select {
		case <-s.q:
			dropped = true
		default:
		}
	}
}

// sendView queues the launcher's view for every running rank of the
// host. A rank that lets views pile up loses the older ones; the first
// time, that is logged and shown in its stderr.
func (a *agent) sendView(m *proto.Message) {
	line := control.View{Epoch: m.Epoch, Live: m.Live, Joined: m.Joined}.String() + "\n"
	var slow []int
	a.mu.Lock()
	for _, p := range a.procs {
		if p.alive && p.control != nil && p.control.send(line) && !p.control.slow {
			p.control.slow = true
			slow = append(slow, p.spec.Rank)
		}
	}
	a.mu.Unlock()
	for _, r := range slow {
		a.log.Warn("control channel: the rank does not read it; dropped an older view", "rank", r, "epoch", m.Epoch)
		text := fmt.Sprintf("gorun: rank %d does not read its control channel (GORUN_CONTROL_FD); older views were dropped, view %d is queued", r, m.Epoch)
		_ = a.conn.Send(&proto.Message{Kind: proto.MsgOutput, Rank: r, Stream: proto.StreamStderr, Data: []byte(text)})
	}
}

// endControl, once p exited, waits for its last suspect lines (at most
// pmiWait: a child of p outside its group may hold its end), then closes
// the channel and waits for the reader and the writer.
func (a *agent) endControl(p *rankProc) {
	s := p.control
	if s == nil {
		return
	}
	t := time.NewTimer(pmiWait)
	select {
	case <-s.read:
	case <-t.C:
	}
	t.Stop()
	close(s.quit)
	_ = s.conn.Close()
	<-s.read
	<-s.wrote
}

// signalFrom is the signal of a MsgSignalRank or MsgTerminate (SIGTERM if
// none is given).
func signalFrom(m *proto.Message) syscall.Signal {
	if m.Signal == 0 {
		return syscall.SIGTERM
	}
	return syscall.Signal(m.Signal)
}
