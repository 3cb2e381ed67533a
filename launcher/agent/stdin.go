package agent

import (
	"io"
	"sync"

	"github.com/gorun/gorun/launcher/proto"
)

// writeStdin queues bytes for rank 0's stdin; a feeder goroutine writes
// the pipe, so that a rank that never reads its stdin cannot stall the
// agent.
func (a *agent) writeStdin(b []byte) { a.queueStdin(b, false) }

// closeStdin closes rank 0's stdin once the queue is written.
func (a *agent) closeStdin() { a.queueStdin(nil, true) }

func (a *agent) queueStdin(b []byte, eof bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stdinCond == nil {
		a.stdinCond = sync.NewCond(&a.mu)
		a.background(func(<-chan struct{}) { a.feedStdin() })
	}
	if b != nil {
		a.stdinQ = append(a.stdinQ, b)
	}
	a.stdinEOF = a.stdinEOF || eof
	a.stdinCond.Signal()
}

// feedStdin writes the queue to rank 0's stdin until closeStdin. A write
// blocked on a rank that does not read ends when the rank exits: its
// stdin pipe is closed then. Each chunk written (or dropped, when rank 0
// has no stdin or is gone) is acknowledged to the launcher, which sends
// no more than a window of unacknowledged bytes: a rank that never reads
// cannot make the agent hold more.
func (a *agent) feedStdin() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for {
		for len(a.stdinQ) == 0 && !a.stdinEOF {
			a.stdinCond.Wait()
		}
		var w io.WriteCloser
		for _, p := range a.procs {
			if p.stdin != nil {
				w = p.stdin
			}
		}
		if len(a.stdinQ) == 0 {
			if w != nil {
				_ = w.Close()
			}
			return
		}
		b := a.stdinQ[0]
		a.stdinQ = a.stdinQ[1:]
		done := len(b)
		if w != nil {
			a.mu.Unlock()
			_, err := w.Write(b)
			a.mu.Lock()
			if err != nil {
				for _, q := range a.stdinQ {
					done += len(q)
				}
				a.stdinQ, a.stdinEOF = nil, true
			}
		}
		a.mu.Unlock()
		_ = a.conn.Send(&proto.Message{Kind: proto.MsgStdinAck, Count: done})
		a.mu.Lock()
	}
}
