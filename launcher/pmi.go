package launcher

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/gorun/gorun/pmi"
)

// PMI-1 in the job. Each rank gets one end of a socket pair as PMI_FD
// (descriptor pmiFD); its host's agent answers on the other end through a
// pmi.Node. When every rank of a host has entered a barrier, the agent
// sends the host's puts to the launcher (msgPMIFence); the launcher's
// pmi.Fence waits for every host and sends all their puts back to every
// agent (msgPMIRelease), which releases its ranks.

// pmiFD is the rank's descriptor of its PMI socket: the first of
// exec.Cmd.ExtraFiles.
const pmiFD = 3

// PMI modes for Config.PMI.
const (
	PMIOn   = "pmi1" // PMI-1 for every rank (the default; "" means the same)
	PMIOff  = "none"
	pmiWait = time.Second // how long a rank's session may lag behind its exit
)

// pmiSession is one rank's PMI conversation, on the agent.
type pmiSession struct {
	conn net.Conn
	done chan struct{}
	res  pmi.Result
	err  error
}

// pmiSocket returns the agent's end of a new socket pair, as a net.Conn,
// and the rank's end, as a file for ExtraFiles.
func pmiSocket() (net.Conn, *os.File, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("PMI socket pair: %w", err)
	}
	mine := os.NewFile(uintptr(fds[0]), "pmi")
	defer mine.Close() // FileConn dups it
	conn, err := net.FileConn(mine)
	if err != nil {
		syscall.Close(fds[1])
		return nil, nil, fmt.Errorf("PMI socket pair: %w", err)
	}
	return conn, os.NewFile(uintptr(fds[1]), "pmi-rank"), nil
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
	cfg.Relay = func(epoch int, puts []pmi.KV) error {
		return a.conn.Send(&msg{Kind: msgPMIFence, Epoch: epoch, Puts: puts})
	}
	cfg.Abort = func(rank, code int, text string) {
		_ = a.conn.Send(&msg{Kind: msgPMIAbort, Rank: rank, Code: code, Err: text})
	}
	return pmi.NewNode(cfg)
}

// servePMI answers p's PMI requests until its session ends. A protocol
// error fails the rank: the agent kills it and says why.
func (a *agent) servePMI(p *rankProc) {
	s := p.pmi
	go func() {
		defer close(s.done)
		s.res, s.err = a.pmi.Serve(context.Background(), p.spec.Rank, s.conn) // Close wakes it
		if s.err != nil && !errors.Is(s.err, pmi.ErrClosed) && !errors.Is(s.err, net.ErrClosed) {
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
	select {
	case <-s.done:
	case <-time.After(pmiWait):
		// A child of the rank still holds its end of the socket.
	}
	_ = s.conn.Close()
	<-s.done
	if code == 0 && s.res.Init && !s.res.Finalized && !s.res.Aborted {
		return "without calling MPI_Finalize after MPI_Init (PMI finalize after init)"
	}
	return ""
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

// pmiRelay is the launcher's side: the job's fence and the agents in it.
type pmiRelay struct {
	fence  *pmi.Fence
	index  map[*agentProc]int
	agents []*agentProc
}

// newPMIRelay returns the relay for the agents that run ranks, or nil when
// the job has no PMI.
func newPMIRelay(agents []*agentProc, on bool) (*pmiRelay, error) {
	if !on {
		return nil, nil
	}
	r := &pmiRelay{index: map[*agentProc]int{}}
	for _, a := range agents {
		for _, rs := range a.ranks {
			if rs.Hub == 0 {
				r.index[a] = len(r.agents)
				r.agents = append(r.agents, a)
				break
			}
		}
	}
	cfg := pmi.DefaultFenceConfig()
	cfg.Hosts = len(r.agents)
	var err error
	r.fence, err = pmi.NewFence(cfg)
	return r, err
}

// enter records a's barrier, and releases every agent when it was the last.
func (r *pmiRelay) enter(a *agentProc, m *msg) error {
	if r == nil {
		return fmt.Errorf("%s: PMI barrier in a job without PMI (--pmi=none)", a.name)
	}
	i, ok := r.index[a]
	if !ok {
		return fmt.Errorf("%s: PMI barrier from a host without PMI ranks", a.name)
	}
	rel, complete, err := r.fence.Enter(i, m.Epoch, m.Puts)
	if err != nil || !complete {
		return err
	}
	for _, b := range r.agents {
		if !b.done {
			_ = b.conn.Send(&msg{Kind: msgPMIRelease, Epoch: m.Epoch, Puts: rel})
		}
	}
	return nil
}
