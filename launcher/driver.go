package launcher

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gorun/gorun/internal/control"
	"github.com/gorun/gorun/internal/jobenv"
	"github.com/gorun/gorun/launcher/proto"
)

// driver runs the supervisor (supervisor.go, pure) for job.supervise:
// it turns what happens into the supervisor's events, performs the
// actions the supervisor returns, and shows the job (output, status line,
// stall inspector, timelines, the PMI relay).
type driver struct {
	j         *job
	sv        *supervisor
	relay     *pmiRelay
	ins       *inspector
	status    *statusLine // nil: no status line
	timelines map[int][]byte
	wake      *time.Timer // the supervisor's next deadline
	armed     time.Time   // what wake is set for (zero: nothing)

	// --metrics (metrics.go): the server (nil: none), the last view
	// (--elastic), and whether to publish the job's state at the end of
	// this turn of the loop (a rank started, exited or restarted, a view,
	// an agent gone) or at the next metrics tick (a status page changed).
	metrics       *metricsServer
	epoch, inView int
	publishNow    bool
	publishSoon   bool
}

// supervise starts the ranks and runs the job to its end. It only turns
// what happens (agents' messages, signals, the context, timers) into the
// supervisor's events and performs the actions the supervisor returns;
// the rules are in supervisor.go.
func (j *job) supervise(ctx context.Context) Result {
	relay, err := newPMIRelay(j.agents, j.cfg.PMI != PMIOff)
	if err != nil {
		// Not reachable: every job has a host with ranks.
		j.shutdown(true)
		return Result{ExitCode: ExitLaunchFailed, Failure: err.Error()}
	}
	d := &driver{j: j, sv: newSupervisor(j.supervisorConfig(), j.t0), relay: relay, ins: newInspector(j, j.cfg), timelines: map[int][]byte{}, inView: j.np}
	defer d.ins.stop()
	if j.cfg.Metrics != nil {
		d.metrics = serveMetrics(j.cfg.Metrics, d.metricsSnapshot(), j.cfg.Logger)
		defer d.metrics.stop()
	}
	start := &proto.Message{Kind: proto.MsgStart, Env: j.startEnv()}
	for _, a := range j.agents {
		a.outbox.put(start) // if the agent is gone, its reader says so
	}
	d.perform(d.sv.step(event{kind: evStart, now: time.Now()}))
	for _, ev := range j.backlog {
		d.agentEvent(ev)
	}
	j.backlog = nil
	d.publish()
	stopStdin := j.forwardStdin()
	d.loop(ctx)
	d.metrics.stop() // the job is over: its endpoint goes
	code, _, _ := d.sv.result()
	for _, a := range j.agents {
		if a.stream != nil {
			// An agent that dialed in (a node of a per-node start, an
			// srun step's) exits with the job's code.
			a.outbox.put(&proto.Message{Kind: proto.MsgResult, Code: code})
		}
		a.outbox.close() // every agent is done: this also ends the stdin copy
	}
	stopStdin()
	j.shutdown(false)
	return d.finish()
}

// supervisorConfig is the job as the supervisor sees it.
func (j *job) supervisorConfig() supervisorConfig {
	cfg := j.cfg
	c := supervisorConfig{
		NP: j.np, Hubs: cfg.Hubs, Elastic: cfg.elasticity(), MinNP: cfg.MinNP, MaxRestarts: cfg.MaxRestarts, Timeout: cfg.Timeout, DumpWait: cfg.DumpWait,
		Grace: cfg.Grace, AgentWait: cfg.AgentWait, Timeline: cfg.Timeline != "",
	}
	for _, a := range j.agents {
		sa := supervisedAgent{Name: a.name, Slots: j.hosts[a.host].Slots}
		if len(a.ranks) > 0 {
			sa.NodeRank = a.ranks[0].NodeRank
		}
		for _, rs := range a.ranks {
			sa.Ranks = append(sa.Ranks, rs.Rank)
		}
		c.Agents = append(c.Agents, sa)
	}
	return c
}

// startEnv is what every rank is told at the start: every rank's and
// hub's address, and rank 0's master address.
func (j *job) startEnv() []string {
	peerOf := make([]string, len(j.ranks))
	masterAddr, masterPort := "", 0
	for _, a := range j.agents {
		for i, rs := range a.ranks {
			peerOf[rs.Rank] = net.JoinHostPort(a.ready.Addr, strconv.Itoa(a.ready.Ports[i]))
			if rs.Rank == 0 {
				masterAddr, masterPort = a.ready.Addr, a.ready.MasterPort
			}
		}
	}
	return jobenv.Peers(peerOf[:j.np], peerOf[j.np:], masterAddr, masterPort)
}

// loop runs until every agent is done.
func (d *driver) loop(ctx context.Context) {
	cfg := d.j.cfg
	d.wake = time.NewTimer(time.Hour)
	d.wake.Stop()
	defer d.wake.Stop()
	var statusTick <-chan time.Time
	if cfg.StatusLine {
		d.status = &statusLine{w: cfg.Stderr, start: time.Now()}
		t := time.NewTicker(time.Second)
		defer t.Stop()
		statusTick = t.C
		defer d.status.clear()
	}
	var metricsTick <-chan time.Time
	if d.metrics != nil {
		t := time.NewTicker(metricsEvery)
		defer t.Stop()
		metricsTick = t.C
	}
	ctxDone := ctx.Done()
	for !d.sv.finished() {
		d.arm()
		select {
		case now := <-statusTick:
			if now.Sub(d.status.start) >= statusAfter {
				d.status.draw(statusText(d.j.ranks, d.ins.views, d.status, now))
			}
		case now := <-d.ins.tick:
			warn, abort := d.ins.check(now)
			if warn != "" {
				d.perform(d.sv.step(event{kind: evStall, now: now, text: warn}))
			}
			if abort != "" {
				d.perform(d.sv.step(event{kind: evStall, now: now, text: abort, abort: true}))
			}
		case <-metricsTick:
			if d.publishSoon {
				d.publish()
			}
		case now := <-d.wake.C:
			d.armed = time.Time{}
			d.perform(d.sv.step(event{kind: evTick, now: now}))
			d.publishNow = true // an agent may have gone silent
		case ev := <-d.j.events:
			d.agentEvent(ev)
		case sig := <-cfg.Signals:
			d.perform(d.sv.step(event{kind: evSignal, now: time.Now(), sig: asSignal(sig)}))
		case <-ctxDone:
			ctxDone = nil // the job is stopping; once is enough
			d.perform(d.sv.step(event{kind: evCancelled, now: time.Now(), text: ctx.Err().Error()}))
		}
		if d.publishNow {
			d.publish()
		}
	}
}

// arm sets the wake-up timer for the supervisor's next deadline.
func (d *driver) arm() {
	next := d.sv.next()
	if next.Equal(d.armed) {
		return
	}
	d.armed = next
	if next.IsZero() {
		d.wake.Stop()
		return
	}
	d.wake.Reset(time.Until(next))
}

// agentEvent feeds one message of an agent, or the end of its stream, to
// the supervisor.
func (d *driver) agentEvent(ev agentEvent) {
	now := time.Now()
	a := d.j.agents[ev.agent]
	if ev.m == nil {
		d.publishNow = true
		d.perform(d.sv.step(event{kind: evLost, now: now, agent: a.index, text: fmt.Sprintf("lost the agent on %s: %s", a.name, ev.why)}))
		return
	}
	d.perform(d.sv.step(d.translate(a, ev.m, now)))
}

// translate does what a message needs besides supervision (output, the
// ranks' states, timelines, the PMI relay) and returns its event.
func (d *driver) translate(a *agentProc, m *proto.Message, now time.Time) event {
	j := d.j
	ev := event{kind: evHeard, now: now, agent: a.index, rank: m.Rank}
	ours := m.Rank >= 0 && m.Rank < len(j.ranks) && j.ranks[m.Rank].agent == a.index
	switch {
	case m.Kind == proto.MsgStarted && ours && j.ranks[m.Rank].started:
		// A restart (--max-restarts): a new process, its own stderr
		// and status page.
		rs := &j.ranks[m.Rank]
		rs.pid, rs.exited, rs.stderr = m.Pid, false, newTail(10)
		d.ins.restarted(m.Rank)
		d.publishNow = true
	case m.Kind == proto.MsgStarted && ours:
		rs := &j.ranks[m.Rank]
		rs.pid, rs.started = m.Pid, true
		ev.kind = evStarted
		d.publishNow = true
	case m.Kind == proto.MsgExit && ours:
		ex := m.Exit
		if ex == nil {
			ex = &proto.Exit{Code: 1, Failure: "(its agent sent no exit status)"}
		}
		j.ranks[m.Rank].exited = true
		d.ins.exited(m.Rank)
		d.publishNow = true
		ev.kind, ev.exit, ev.text = evExited, ex, j.describeExit(m.Rank, ex)
	case m.Kind == proto.MsgOutput && ours:
		d.output(m)
	case m.Kind == proto.MsgSuspect && ours:
		ev.kind, ev.target, ev.epoch, ev.text = evSuspect, m.Target, m.Epoch, m.Err
	case m.Kind == proto.MsgJoin && ours:
		ev.kind, ev.joiner = evJoin, control.Joiner{Rank: m.Rank, Addr: m.Addr, Host: m.Host}
	case m.Kind == proto.MsgStatus && ours && m.Status != nil:
		d.ins.update(m.Rank, m.Status, now)
		ev.kind, ev.declared = evStatus, m.Status.State.Declared
		d.publishSoon = true
	case m.Kind == proto.MsgTimeline && ours:
		d.timelines[m.Rank] = appendTimeline(d.timelines[m.Rank], m.Data)
	case m.Kind == proto.MsgClock:
		ev.kind, ev.clock = evClock, m.Clock
	case m.Kind == proto.MsgStdinAck:
		j.stdin.release(m.Count)
	case m.Kind == proto.MsgDone:
		ev.kind = evDone
		d.publishNow = true
	case m.Kind == proto.MsgError:
		ev.kind, ev.text = evAgentError, fmt.Sprintf("%s: agent: %s", a.name, m.Err)
	case m.Kind == proto.MsgPMIFence:
		if err := d.fence(a, m); err != nil {
			ev.kind, ev.code, ev.text = evFailed, ExitLaunchFailed, err.Error()
		}
	case m.Kind == proto.MsgPMIAbort:
		text := fmt.Sprintf("%s on %s called MPI_Abort with exit code %d", j.name(m.Rank), a.name, m.Code)
		if m.Err != "" {
			text += ": " + m.Err
		}
		ev.kind, ev.code, ev.text = evFailed, m.Code, text
	}
	return ev
}

// appendTimeline adds a rank's timeline file (JSON lines) to what its
// earlier processes wrote: a restarted rank's (--max-restarts) events
// follow its earlier ones' on the rank's one track.
func appendTimeline(old, b []byte) []byte {
	if len(old) == 0 {
		return b
	}
	if old[len(old)-1] != '\n' {
		old = append(old, '\n')
	}
	return append(old, b...)
}

// output passes on a line of a rank's output (or keeps a line of its
// goroutine dump).
func (d *driver) output(m *proto.Message) {
	switch m.Stream {
	case proto.StreamDump:
		d.ins.dumpLine(m.Rank, m.Data)
		return
	case proto.StreamStderr:
		d.j.ranks[m.Rank].stderr.add(string(m.Data))
	case proto.StreamStdout:
	default:
		return
	}
	d.status.clear()
	d.j.out.line(m.Rank, m.Stream, m.Data)
}

// fence enters a's PMI barrier, and releases every host when it was the
// last.
func (d *driver) fence(a *agentProc, m *proto.Message) error {
	puts, complete, err := d.relay.enter(a, m)
	if err != nil || !complete {
		return err
	}
	rel := &proto.Message{Kind: proto.MsgPMIRelease, Epoch: m.Epoch, Puts: puts}
	for _, b := range d.relay.agents {
		if !d.sv.done(b.index) {
			b.outbox.put(rel)
		}
	}
	return nil
}

// perform carries out the supervisor's actions.
func (d *driver) perform(acts []action) {
	j := d.j
	for _, act := range acts {
		switch act.kind {
		case actPrint:
			d.status.clear()
			fmt.Fprintf(j.cfg.Stderr, "gorun: %s\n", act.text)
		case actTerminate:
			j.agents[act.agent].outbox.put(&proto.Message{Kind: proto.MsgTerminate, Signal: int(act.sig)})
		case actDump:
			j.agents[act.agent].outbox.put(&proto.Message{Kind: proto.MsgDump})
		case actClock:
			j.agents[act.agent].outbox.put(&proto.Message{Kind: proto.MsgClock})
		case actCloseStdin:
			if j.agents[act.agent].stream == nil {
				j.agents[act.agent].outbox.close()
			} // one that dialed in waits for the job's result (supervise)
		case actKill:
			j.agents[act.agent].kill()
		case actView:
			d.viewed(act.view)
			j.agents[act.agent].outbox.put(&proto.Message{Kind: proto.MsgView, Epoch: act.view.Epoch, Live: act.view.Live, Joined: act.view.Joined})
		case actRestart:
			d.viewed(act.view)
			if act.spec != nil {
				// It moves to this agent's host: its messages come from
				// there now.
				rs := &j.ranks[act.rank]
				rs.agent, rs.host = act.agent, j.agents[act.agent].name
			}
			j.agents[act.agent].outbox.put(&proto.Message{Kind: proto.MsgRestart, Rank: act.rank, Count: act.count, Epoch: act.view.Epoch, Live: act.view.Live, RankSpec: act.spec})
		case actSignalRank:
			j.agents[act.agent].outbox.put(&proto.Message{Kind: proto.MsgSignalRank, Rank: act.rank, Signal: int(act.sig)})
		case actLaunched:
			j.cfg.Logger.Info("all ranks started", "ranks", len(j.ranks), "elapsed", d.sv.launch)
		}
	}
}

// finish prints the job's summary, its goroutine dumps and its timeline,
// and returns its result.
func (d *driver) finish() Result {
	cfg := d.j.cfg
	res := Result{LaunchTime: d.sv.launch}
	var note string
	res.ExitCode, res.Failure, note = d.sv.result()
	if note != "" {
		fmt.Fprintf(cfg.Stderr, "gorun: %s\n", note)
	}
	if res.Failure != "" {
		fmt.Fprintf(cfg.Stderr, "gorun: %s\n", res.Failure)
	}
	if dumps := d.ins.writeDumps(d.j.jobID); dumps != "" {
		fmt.Fprintf(cfg.Stderr, "gorun: %s\n", dumps)
	}
	if cfg.Timeline != "" {
		probes := make([]clockProbe, len(d.sv.agents))
		for i, a := range d.sv.agents {
			probes[i] = a.probe
		}
		if note, err := d.j.writeTimeline(cfg.Timeline, d.timelines, probes); err != nil {
			fmt.Fprintf(cfg.Stderr, "gorun: --timeline: %v\n", err)
		} else {
			fmt.Fprintf(cfg.Stderr, "gorun: %s\n", note)
		}
	}
	return res
}

// name is how messages call a rank or a hub.
func (j *job) name(rank int) string {
	if rank >= j.np {
		return fmt.Sprintf("hub %d", rank-j.np)
	}
	return fmt.Sprintf("rank %d", rank)
}

// describeExit is the summary of a rank's exit, with its last stderr
// lines.
func (j *job) describeExit(rank int, ex *proto.Exit) string {
	rs := j.ranks[rank]
	var b strings.Builder
	how := fmt.Sprintf("exited with code %d", ex.Code)
	if ex.Signal != 0 {
		how = fmt.Sprintf("was killed by signal %d (%v)", ex.Signal, syscall.Signal(ex.Signal))
	}
	switch {
	case ex.OOM:
		how += " (by the kernel's OOM killer: the memory cgroup counted an oom_kill)"
	case ex.ForeignKill:
		how += " (not by gorun; out of memory?)"
	}
	switch {
	case ex.Failure != "" && ex.Signal == int(syscall.SIGKILL):
		how = "was failed by gorun (killed): " + ex.Failure
	case ex.Failure != "":
		how += " " + ex.Failure
	}
	fmt.Fprintf(&b, "%s on %s (pid %d) %s", j.name(rank), rs.host, ex.Pid, how)
	if lines := rs.stderr.lines(); len(lines) > 0 {
		fmt.Fprintf(&b, "; its last stderr lines:")
		for _, l := range lines {
			fmt.Fprintf(&b, "\n    %s", l)
		}
	}
	return b.String()
}

// stdinBacklog bounds the stdin messages (32 KiB each) queued for rank 0's
// agent, and stdinWindow the bytes sent to it that it has not yet written
// to rank 0 (MsgStdinAck): past it, gorun stops reading its stdin until
// rank 0 reads, as a pipe would make a writer wait.
const (
	stdinBacklog = 32
	stdinWindow  = 1 << 20
)

// stdinFlow counts the stdin bytes rank 0's agent has not acknowledged.
type stdinFlow struct {
	mu       sync.Mutex
	cond     *sync.Cond
	inflight int
	closed   bool
}

func newStdinFlow() *stdinFlow {
	f := &stdinFlow{}
	f.cond = sync.NewCond(&f.mu)
	return f
}

// acquire waits until n more bytes fit in the window; false once closed.
func (f *stdinFlow) acquire(n int) bool {
	if f == nil {
		return true
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.inflight > 0 && f.inflight+n > stdinWindow && !f.closed {
		f.cond.Wait()
	}
	f.inflight += n
	return !f.closed
}

// release returns n acknowledged bytes to the window.
func (f *stdinFlow) release(n int) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inflight = max(0, f.inflight-n)
	f.cond.Broadcast()
}

func (f *stdinFlow) close() {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	f.cond.Broadcast()
}

// forwardStdin copies Config.Stdin to rank 0 until it ends, and returns
// how to stop the copy. stop waits for the copier when its read can be
// interrupted (the reader has SetReadDeadline, as a pollable pipe does);
// a read of a terminal cannot be, and the copier then ends at its next
// read, or with the process.
func (j *job) forwardStdin() (stop func()) {
	if j.cfg.Stdin == nil {
		return func() {}
	}
	target := j.agents[j.ranks[0].agent]
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 32<<10)
		for {
			n, err := j.cfg.Stdin.Read(buf)
			select {
			case <-quit:
				return
			default:
			}
			if n > 0 && (!j.stdin.acquire(n) || !target.outbox.putWait(&proto.Message{Kind: proto.MsgStdin, Data: append([]byte(nil), buf[:n]...)}, stdinBacklog)) {
				return
			}
			if err != nil {
				target.outbox.put(&proto.Message{Kind: proto.MsgStdinEOF})
				return
			}
		}
	}()
	return func() {
		close(quit)
		j.stdin.close()
		d, ok := j.cfg.Stdin.(interface{ SetReadDeadline(time.Time) error })
		if !ok || d.SetReadDeadline(time.Now()) != nil {
			return
		}
		<-done
		_ = d.SetReadDeadline(time.Time{})
	}
}
