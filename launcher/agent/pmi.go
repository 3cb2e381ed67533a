package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/gorun/gorun/launcher/proto"
	"github.com/gorun/gorun/pmi"
)

// PMI-1 on the host. Each rank gets one end of a socket pair as PMI_FD
// (descriptor pmiFD); the agent answers on the other end through a
// pmi.Node. When every rank of the host has entered a barrier, the agent
// sends the host's puts to the launcher (MsgPMIFence); the launcher sends
// every host's puts back (MsgPMIRelease), which releases the ranks.

// pmiFD is the rank's descriptor of its PMI socket: the first of
// exec.Cmd.ExtraFiles.
const pmiFD = 3

// pmiWait is how long a rank's PMI session may lag behind its exit.
const pmiWait = time.Second

// pmiSession is one rank's PMI conversation.
type pmiSession struct {
	conn net.Conn
	// stop ends the session's wait in a barrier, which closing conn does
	// not: a rank killed in its PMI fence (MPI_Finalize while other ranks
	// never arrive) would keep the agent until the launcher's hard stop.
	stop context.CancelFunc
	done chan struct{}
	res  pmi.Result
	err  error
}

// socketPair returns the agent's end of a new unix stream socket pair, as
// a net.Conn, and the rank's end, as a file for ExtraFiles; what names
// the pair in errors.
func socketPair(what string) (net.Conn, *os.File, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("%s socket pair: %w", what, err)
	}
	mine := os.NewFile(uintptr(fds[0]), what)
	defer mine.Close() // FileConn dups it
	conn, err := net.FileConn(mine)
	if err != nil {
		syscall.Close(fds[1])
		return nil, nil, fmt.Errorf("%s socket pair: %w", what, err)
	}
	return conn, os.NewFile(uintptr(fds[1]), what+"-rank"), nil
}

// pmiNode creates the host's pmi.Node for its ranks (not its hubs), or
// returns nil when the job has no PMI.
func (a *agent) pmiNode() (*pmi.Node, error) {
	s := a.spec.PMI
	local := 0
	for _, r := range a.spec.Ranks {
		if r.Hub == 0 {
			local++
		}
	}
	if s == nil || local == 0 {
		return nil, nil
	}
	cfg := pmi.DefaultNodeConfig()
	cfg.KVS, cfg.Size, cfg.Local, cfg.Mapping = s.KVS, s.Size, local, s.Mapping
	cfg.Relay = a.sendFence
	cfg.Abort = func(rank, code int, text string) {
		_ = a.conn.Send(&proto.Message{Kind: proto.MsgPMIAbort, Rank: rank, Code: code, Err: text})
	}
	return pmi.NewNode(cfg)
}

// sendFence sends the host's puts of fence epoch to the launcher: a
// PMI-1 barrier's, or a PMIx fence's (one put per rank).
func (a *agent) sendFence(epoch int, puts []pmi.KV) error {
	return a.conn.Send(&proto.Message{Kind: proto.MsgPMIFence, Epoch: epoch, Puts: puts})
}

// releasePMI passes the launcher's release of a barrier to the node.
func (a *agent) releasePMI(m *proto.Message) {
	if ours, err := a.pmix.release(m); ours {
		if err != nil {
			_ = a.conn.Send(&proto.Message{Kind: proto.MsgError, Err: err.Error()})
		}
		return
	}
	if a.pmi == nil {
		return
	}
	if err := a.pmi.Release(m.Epoch, m.Puts); err != nil {
		_ = a.conn.Send(&proto.Message{Kind: proto.MsgError, Err: err.Error()})
	}
}

// servePMI answers p's PMI requests until its session ends. A protocol
// error fails the rank: the agent kills it and says why. The session's
// goroutine is waited for by endPMI.
func (a *agent) servePMI(p *rankProc) {
	s := p.pmi
	ctx, stop := context.WithCancel(context.Background())
	s.stop = stop
	go func() {
		defer close(s.done)
		s.res, s.err = a.pmi.Serve(ctx, p.spec.Rank, s.conn) // Close and stop wake it
		if s.err != nil && !errors.Is(s.err, pmi.ErrClosed) && !errors.Is(s.err, net.ErrClosed) && ctx.Err() == nil {
			a.failRank(p, "PMI: "+s.err.Error())
		}
	}()
}

// endPMI waits for p's session after the process exited (its last
// request, such as abort, may still be in the socket), and returns why the
// rank counts as failed in spite of a zero exit code, if it does.
func (a *agent) endPMI(p *rankProc, code int) string {
	s := p.pmi
	if s == nil {
		return ""
	}
	t := time.NewTimer(pmiWait)
	select {
	case <-s.done:
	case <-t.C:
		// A child of the rank still holds its end of the socket.
	}
	t.Stop()
	_ = s.conn.Close()
	if s.stop != nil {
		s.stop()
	}
	<-s.done
	if code == 0 && s.res.Init && !s.res.Finalized && !s.res.Aborted {
		return "without calling MPI_Finalize after MPI_Init (PMI finalize after init)"
	}
	return ""
}

// failRankNumber fails the host's rank of that number if it is alive,
// and no other: a rank that already exited is left as it ended.
func (a *agent) failRankNumber(rank int, why string) {
	a.mu.Lock()
	target := liveRank(a.procs, rank)
	a.mu.Unlock()
	if target != nil {
		a.failRank(target, why)
	}
}

// failAnyRank fails the host's first live rank: for a failure of the
// host's ranks that no one rank is to blame for.
func (a *agent) failAnyRank(why string) {
	a.mu.Lock()
	target := liveRank(a.procs, -1)
	a.mu.Unlock()
	if target != nil {
		a.failRank(target, why)
	}
}

// liveRank is the live rank (not hub) of that number among procs, or,
// for rank -1, the first live rank; nil if there is none.
func liveRank(procs []*rankProc, rank int) *rankProc {
	for _, p := range procs {
		if p.spec.Hub == 0 && p.alive && (rank < 0 || p.spec.Rank == rank) {
			return p
		}
	}
	return nil
}

// failRank kills p, unless it already exited, and keeps why.
func (a *agent) failRank(p *rankProc, why string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p.alive && p.failure == "" {
		p.failure, p.killed = why, true
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	}
}
