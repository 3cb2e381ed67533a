// Package agent is the per-host side of a gorun job: the body of
// `gorun __agent`, which the launcher starts on every host of the job (over
// SSH for a remote host). It checks the host (pre-flight), reserves the
// ranks' ports, starts the host's ranks and dedicated hubs in process
// groups of their own, forwards their output, exits, status pages,
// timelines and PMI barriers to the launcher, and signals them when the
// launcher says so. In an elastic job (gorun --elastic) every rank also
// has a control channel (control.go): its suspects and joins go up to the
// launcher, the launcher's views come down to it; with --max-restarts the
// agent restarts a lost rank when the launcher says so (ranks.go,
// restart). The messages are package proto's; package launcher's
// documentation draws the whole job.
//
// No rank outlives its agent: when the launcher's stream ends (the
// launcher died, or its SSH session did) or the agent's context ends, the
// ranks get SIGTERM and, after the job's grace period, SIGKILL; each rank
// also has SIGKILL as its parent-death signal.
package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/gorun/gorun/internal/jobenv"
	"github.com/gorun/gorun/launcher/proto"
	"github.com/gorun/gorun/pmi"
)

// Config is what the agent needs from its process.
type Config struct {
	In      io.Reader // messages from the launcher (the agent's stdin)
	Out     io.Writer // messages to the launcher (the agent's stdout)
	Environ []string  // the agent's own environment, the base for every rank
	Logger  *slog.Logger
	// Sentinel is the command of the agent's sentinel (gorun
	// __sentinel), which ends the ranks' process groups if the agent dies
	// before it could; nil: none.
	Sentinel []string
	// Advertise is the address the host's ranks advertise when the spec
	// names none: the one an agent that dialed the launcher dialed from
	// ("": the one SSH came in on, else loopback).
	Advertise string
	// Result, if not nil, is told the job's exit code, which the launcher
	// sends an agent that dialed in when the whole job has ended: such
	// an agent waits for it once its own ranks are gone (its stream
	// stays open until then), where others end at once.
	Result func(code int)
}

// closeWait bounds how long Run waits, once the ranks are gone, for the
// launcher to close the stream (it does when it gets MsgDone), so that the
// reader of In ends before Run returns: it cannot be woken otherwise.
const closeWait = 2 * time.Second

// Run is the body of `gorun __agent`: it starts, watches and signals one
// host's ranks for the launcher. It returns when every rank is gone. If
// the launcher goes away (its stream ends) or ctx is cancelled, the ranks
// are terminated first: no rank outlives its agent.
func Run(ctx context.Context, cfg Config) error {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if _, err := io.WriteString(cfg.Out, proto.Magic+"\n"); err != nil {
		return err
	}
	c := proto.NewConn(cfg.In, cfg.Out)
	spec, err := readSpec(c)
	if err != nil {
		return err
	}
	a := &agent{conn: c, spec: spec, log: log, environ: cfg.Environ, advertise: cfg.Advertise, result: cfg.Result, stopBg: make(chan struct{})}
	if len(cfg.Sentinel) > 0 {
		s, err := startSentinel(cfg.Sentinel)
		if err != nil {
			return fail(c, err)
		}
		defer s.close()
		a.sentinel = s
		s.removeGlob(jobenv.ShmPattern(jobenv.ShmDir, spec.JobID))
	}
	ready, err := a.preflight()
	if err != nil {
		return fail(c, err)
	}
	if a.pmi, err = a.pmiNode(); err != nil {
		return fail(c, err)
	}
	if a.pmi != nil {
		defer a.pmi.Close()
		if a.ompi, err = a.openMPIRoute(); err != nil {
			return fail(c, err)
		}
		defer a.ompi.close()
		if a.pmix, err = a.pmixServer(); err != nil {
			return fail(c, err)
		}
		defer a.pmix.close()
		if a.pmix != nil {
			a.background(a.servePMIx)
		}
		a.background(a.watchSingletons)
	}
	if err := c.Send(&proto.Message{Kind: proto.MsgReady, Ready: ready}); err != nil {
		return err
	}
	a.ports, a.addr = ready.Ports, ready.Addr
	return a.serve(ctx)
}

// readSpec reads the launcher's first message, the job spec.
func readSpec(c *proto.Conn) (*proto.HostSpec, error) {
	first, err := c.Recv()
	if err != nil {
		return nil, fmt.Errorf("agent: reading job spec: %w", err)
	}
	if first.Kind != proto.MsgSpec || first.Spec == nil {
		return nil, fail(c, fmt.Errorf("agent: expected a job spec, got message %d", first.Kind))
	}
	if v := first.Spec.Version; v != proto.Version {
		return nil, fail(c, fmt.Errorf("agent protocol %d, launcher speaks %d: use the same gorun version on every host", proto.Version, v))
	}
	return first.Spec, nil
}

func fail(c *proto.Conn, err error) error {
	_ = c.Send(&proto.Message{Kind: proto.MsgError, Err: err.Error()})
	return err
}

// loop is the state of serve's select loop.
type loop struct {
	a         *agent
	started   bool
	orphaned  bool                  // the launcher is gone, or ctx ended
	grace     <-chan time.Time      // after a terminate: when to SIGKILL
	graceT    *time.Timer           // grace's timer
	ctxDone   <-chan struct{}       // nil once ctx ended
	cancelled bool                  // ctx ended
	inbox     <-chan *proto.Message // nil once the stream ended
}

// serve runs the job on this host: it starts the ranks when told, does
// what the launcher says, and returns once the ranks are gone.
func (a *agent) serve(ctx context.Context) error {
	in := a.readInbox()
	l := &loop{a: a, ctxDone: ctx.Done(), inbox: in.ch}
	defer func() {
		l.stopGrace()
		a.stopBackground()
		// After MsgDone the launcher closes the stream at once; when ctx
		// ended instead, it may not, and the process is about to exit.
		wait := closeWait
		if l.cancelled {
			wait = 0
		}
		in.stop(wait)
	}()
	for {
		if end, err := l.finished(); end {
			if err == nil && a.result != nil {
				l.awaitResult(ctx)
			}
			return err
		}
		select {
		case m, ok := <-l.inbox:
			if !ok {
				l.inbox = nil
				l.orphan()
				continue
			}
			if l.handle(m) {
				return nil
			}
		case <-a.exited():
		case <-l.grace:
			l.grace = nil
			a.signalAll(syscall.SIGKILL)
		case <-l.ctxDone:
			l.ctxDone, l.cancelled = nil, true
			l.orphan()
		}
	}
}

// finished says whether serve is done, and with what: every rank is gone
// (after the start), or the launcher went away before the start.
func (l *loop) finished() (bool, error) {
	a := l.a
	if l.started && a.running() == 0 {
		a.wg.Wait()
		a.removeSegments()
		a.ompi.close()
		if !l.orphaned {
			return true, a.conn.Send(&proto.Message{Kind: proto.MsgDone})
		}
		return true, errors.New("agent: launcher went away; ranks terminated")
	}
	if !l.started && l.orphaned {
		return true, errors.New("agent: launcher went away before the start")
	}
	return false, nil
}

// awaitResult waits, once the ranks are gone, for the job's result, the
// end of the stream or ctx.
func (l *loop) awaitResult(ctx context.Context) {
	for l.inbox != nil {
		select {
		case m, ok := <-l.inbox:
			if !ok {
				return
			}
			if m.Kind == proto.MsgResult {
				l.a.result(m.Code)
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

// orphan: the launcher is gone (or ctx ended); the ranks are terminated.
func (l *loop) orphan() {
	l.orphaned = true
	l.terminate(syscall.SIGTERM)
}

// terminate signals every rank, and arms the SIGKILL after the grace
// period unless sig is SIGKILL already; no rank is restarted after it.
func (l *loop) terminate(sig syscall.Signal) {
	l.a.stopRestarts()
	l.a.signalAll(sig)
	if l.graceT == nil && sig != syscall.SIGKILL {
		l.graceT = time.NewTimer(l.a.spec.Grace)
		l.grace = l.graceT.C
	}
}

func (l *loop) stopGrace() {
	if l.graceT != nil {
		l.graceT.Stop()
	}
}

// handle does what one message from the launcher says; it returns true
// when the agent is to end at once (a terminate before the start).
func (l *loop) handle(m *proto.Message) (end bool) {
	a := l.a
	switch m.Kind {
	case proto.MsgStart:
		if !l.started {
			l.started = true
			a.start(m.Env)
			a.background(a.watchPages)
		}
	case proto.MsgDump:
		a.dumpRanks()
	case proto.MsgClock:
		_ = a.conn.Send(&proto.Message{Kind: proto.MsgClock, Clock: time.Now().UnixNano()})
	case proto.MsgStdin:
		a.writeStdin(m.Data)
	case proto.MsgStdinEOF:
		a.closeStdin()
	case proto.MsgPMIRelease:
		a.releasePMI(m)
	case proto.MsgView:
		a.sendView(m)
	case proto.MsgSignalRank:
		a.signalRank(m.Rank, signalFrom(m))
	case proto.MsgRestart:
		if l.started {
			a.restart(m)
		}
	case proto.MsgTerminate:
		if !l.started {
			return true
		}
		l.terminate(signalFrom(m))
	}
	return false
}

// inbox is the reader of the launcher's stream: everything the launcher
// says arrives on ch, which is closed when the stream ends (the launcher,
// or its SSH session, is gone).
type inbox struct {
	ch   chan *proto.Message
	quit chan struct{}
	done chan struct{}
}

func (a *agent) readInbox() *inbox {
	in := &inbox{ch: make(chan *proto.Message, 16), quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(in.done)
		defer close(in.ch)
		for {
			m, err := a.conn.Recv()
			if err != nil {
				return
			}
			select {
			case in.ch <- m:
			case <-in.quit:
				return
			}
		}
	}()
	return in
}

// stop ends the reader and waits for it, at most wait: a reader blocked on
// a stream that is still open ends only when the launcher closes it (or
// with the process).
func (in *inbox) stop(wait time.Duration) {
	close(in.quit)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-in.done:
	case <-t.C:
	}
}

// background runs f in a goroutine that stopBackground stops (by closing
// the channel f gets) and waits for.
func (a *agent) background(f func(stop <-chan struct{})) {
	a.bg.Add(1)
	go func() {
		defer a.bg.Done()
		f(a.stopBg)
	}()
}

// stopBackground stops the agent's background goroutines (the page
// watcher, the stdin feeder) and waits for them.
func (a *agent) stopBackground() {
	a.closeStdin()
	close(a.stopBg)
	a.bg.Wait()
}

// removeSegments deletes this job's shared memory files on this host once
// its ranks are gone. Ranks remove each segment as soon as its pair has
// mapped it, so only a rank killed in between leaves one behind.
func (a *agent) removeSegments() {
	left, _ := filepath.Glob(jobenv.ShmPattern(jobenv.ShmDir, a.spec.JobID))
	for _, f := range left {
		if err := os.Remove(f); err == nil {
			a.log.Info("removed a shared memory segment the job left", "file", f)
		}
	}
}

type agent struct {
	conn    *proto.Conn
	spec    *proto.HostSpec
	log     *slog.Logger
	environ []string
	ports   []int
	addr    string
	// advertise is Config.Advertise.
	advertise string
	// result is Config.Result.
	result func(code int)
	dir    string
	prog   string
	pmi    *pmi.Node  // nil: no PMI
	ompi   *ompiRoute // nil: no PMI
	pmix   *pmixHost  // nil: no PMI

	mu          sync.Mutex
	procs       []*rankProc // in spec.Ranks order; a restart takes its rank's place
	jobEnv      []string    // MsgStart's, for restarts
	live        int
	pending     int            // ranks waiting for a restart (rankProc.pending)
	terminating bool           // the ranks were told to stop: no restarts
	notify      chan struct{}  // closed and replaced whenever a rank exits
	wg          sync.WaitGroup // the ranks' waiters

	bg     sync.WaitGroup // background goroutines (see background)
	stopBg chan struct{}
	// sentinel learns every rank's process group (nil: no sentinel).
	sentinel *sentinel

	stdinCond *sync.Cond
	stdinQ    [][]byte
	stdinEOF  bool
}
