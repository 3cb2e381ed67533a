package launcher

import (
	"cmp"
	"fmt"
	"slices"
	"syscall"
	"time"

	"github.com/gorun/gorun/internal/control"
	"github.com/gorun/gorun/launcher/proto"
)

// The job's supervision, from the start of the ranks to the end of the
// job, is a pure state machine: supervisor.step takes one event (a rank
// exited, gorun got a signal, time passed, ...) and returns the actions to
// take (tell the agents to signal their ranks, print a line, kill a host's
// session, ...). It reads no clock (every event carries the time) and does
// no I/O, so each of its rules has a table test (supervisor_test.go).
// The driver (driver.go, job.supervise) turns channel receives into events
// and performs the actions; policy, inside the supervisor, decides the
// exit code.
//
// The rules, besides policy's:
//   - --timeout and a --stall-abort first ask the Go ranks for goroutine
//     dumps (if any rank can write one), and stop every rank DumpWait
//     later; a second signal does the same before SIGKILL.
//   - Once the ranks are told to stop, every agent is pinged (MsgClock).
//     An agent that says nothing within AgentWait is gone silent: its host
//     is reported unreachable, its session is killed, and the job goes on
//     without waiting for it (a partitioned host).
//   - Grace plus hardStopMargin after the first stop, agents still
//     running are killed (their ranks die with them).
//   - With --timeline, each agent's clock is probed clockProbes times at
//     the start to align the ranks' timelines.
//   - With --elastic, a new view goes to every host that has a rank still
//     running, and a fenced rank is killed through its own host's agent.
//   - With --max-restarts, a lost rank is restarted through its own
//     host's agent, after the view without it; a host whose agent is done
//     or lost restarts nothing, and its lost ranks are restarted on
//     another host with a free slot (policy's revive): the rank moves to
//     that host's agent, which its later fences, views and restarts go
//     to, and whose end (done or lost) is the rank's.

// hardStopMargin is how long after the grace period the launcher kills
// agents that are still running.
const hardStopMargin = 10 * time.Second

// eventKind is what happened.
type eventKind uint8

const (
	evStart      eventKind = iota + 1 // the agents were told to start the ranks
	evStarted                         // agent's rank started
	evExited                          // agent's rank exited (exit); text describes it
	evStatus                          // agent's rank's status page changed; declared: it is a Go rank that can dump
	evClock                           // agent answered a MsgClock with its clock
	evHeard                           // agent said something else (output, a timeline, a PMI barrier)
	evDone                            // agent: every rank of its host is gone
	evLost                            // agent's stream ended (text says why)
	evAgentError                      // agent reported an error of its own (text)
	evFailed                          // the job failed with code for another reason (text): MPI_Abort, a broken PMI barrier
	evSignal                          // gorun received sig
	evCancelled                       // the caller's context ended (text)
	evStall                           // the stall inspector's report (text); abort: stalled for --stall-abort
	evTick                            // time passed: a deadline may be due
	evSuspect                         // agent's rank reports rank target lost (text: why)
	evJoin                            // agent's restarted rank says join (joiner: its address and host key)
)

// fromAgent says whether events of kind k come from an agent (and so show
// that it is reachable).
func (k eventKind) fromAgent() bool {
	switch k {
	case evStarted, evExited, evStatus, evClock, evHeard, evDone, evAgentError, evFailed, evSuspect, evJoin:
		return true
	}
	return false
}

// event is one input of the supervisor. now is when it happened; the
// other fields are set as its kind says.
type event struct {
	kind     eventKind
	now      time.Time
	agent    int // index of the agent it came from
	rank     int
	target   int // evSuspect: the rank suspected
	epoch    int // evSuspect: the newest view the reporter had heard of
	code     int
	exit     *proto.Exit
	sig      syscall.Signal
	clock    int64
	text     string
	joiner   control.Joiner // evJoin
	declared bool
	abort    bool
}

// actionKind is what to do.
type actionKind uint8

const (
	actPrint      actionKind = iota + 1 // print "gorun: text" on stderr
	actTerminate                        // tell agent to signal its ranks with sig (MsgTerminate)
	actDump                             // tell agent to SIGQUIT its Go ranks (MsgDump)
	actClock                            // send agent a MsgClock (a clock probe, or a ping)
	actCloseStdin                       // close agent's stream: it is done
	actKill                             // kill agent's process (its SSH session) and its process group
	actLaunched                         // every rank started (log it)
	actView                             // tell agent's running ranks the new view (MsgView)
	actSignalRank                       // tell agent to signal its rank with sig (MsgSignalRank)
	actRestart                          // tell agent to start its rank again, the count-th time, with view first (MsgRestart; spec: it moves there)
)

type action struct {
	kind  actionKind
	agent int
	rank  int // actSignalRank, actRestart
	count int // actRestart
	sig   syscall.Signal
	text  string
	view  control.View    // actView, actRestart
	spec  *proto.RankSpec // actRestart: the rank's place on agent's host, when it moves there
}

// supervisedAgent is one host's agent as the supervisor sees it.
type supervisedAgent struct {
	Name  string
	Ranks []int // the ranks and hubs it runs
	// Slots is its host's slots (the hostfile's or the allocation's),
	// NodeRank the host's node rank: a rank restarted on it, its own host
	// gone, takes a free slot (--max-restarts).
	Slots, NodeRank int
}

// supervisorConfig is what the supervisor needs from the job.
type supervisorConfig struct {
	NP, Hubs int
	Elastic  elasticity
	MinNP    int // with Elastic: the fewest running ranks the job goes on with (0: 1)
	// MaxRestarts, with Elastic (ring): how often each lost rank is
	// restarted (on its host, or on another with a free slot if its
	// host's agent is gone).
	MaxRestarts int
	Timeout     time.Duration // 0: none
	DumpWait    time.Duration
	Grace       time.Duration
	AgentWait   time.Duration // 0: no bound (the hard stop only)
	// JoinWait bounds how long a restarted rank may take to say join: one
	// that has not (frozen before it joined: it is in no view, so no rank
	// suspects it) is killed, and its exit restarts it again while it has
	// restarts left. 0: joinWait. It does not stretch with the host's
	// load, as the transport's deadlines do: a frozen joiner is told from
	// a slow one by nothing else, and must be killed in bounded time;
	// restarts beside four busy processes on 2 cores join within 10 s.
	JoinWait time.Duration
	Timeline bool
	Agents   []supervisedAgent
}

// agentState is the supervisor's view of one agent.
type agentState struct {
	supervisedAgent
	done   bool
	heard  bool       // it said something since the ranks were told to stop
	clocks []clockReq // its MsgClocks not answered yet, oldest first
	probe  clockProbe // its clock against the launcher's (--timeline)
}

// clockReq is a MsgClock in flight: a clock probe, or a ping.
type clockReq struct {
	sent  time.Time
	probe bool
}

type supervisor struct {
	cfg      supervisorConfig
	t0       time.Time // when Run began
	pol      *policy
	agents   []agentState
	owner    []int  // per rank and hub: the index of its agent
	declared []bool // per rank: a Go rank that can write a goroutine dump
	started  int
	launch   time.Duration // from t0 to the last rank started

	dumped   bool
	dumpSig  syscall.Signal
	stopped  bool // the ranks were told to stop: the agents were pinged
	hardSet  bool // the hard stop was armed (it is armed once)
	timeout  time.Time
	dumpEnd  time.Time
	silentAt time.Time
	hardStop time.Time
	joinBy   map[int]joinDeadline // restarted ranks that have not joined

	acts []action
}

// joinDeadline is when a rank's count-th restart must have joined.
type joinDeadline struct {
	at    time.Time
	count int
}

// joinWait is supervisorConfig.JoinWait's default.
const joinWait = 30 * time.Second

func newSupervisor(cfg supervisorConfig, t0 time.Time) *supervisor {
	s := &supervisor{cfg: cfg, t0: t0, pol: newPolicy(cfg.NP, cfg.Hubs, cfg.Elastic, cfg.MinNP, cfg.MaxRestarts), declared: make([]bool, cfg.NP)}
	s.owner = make([]int, cfg.NP+cfg.Hubs)
	var hosts []slotHost
	var placed [][]int
	for i, a := range cfg.Agents {
		a.Ranks = slices.Clone(a.Ranks) // a restart moves ranks between agents
		s.agents = append(s.agents, agentState{supervisedAgent: a})
		for _, r := range a.Ranks {
			if r >= 0 && r < len(s.owner) {
				s.owner[r] = i
			}
		}
		hosts = append(hosts, slotHost{Name: a.Name, Slots: a.Slots, NodeRank: a.NodeRank})
		placed = append(placed, a.Ranks)
	}
	s.pol.placeHosts(hosts, placed)
	return s
}

// move makes agent i the owner of rank, restarted there because its own
// host is gone: its fences, signals and later restarts go to i, and i's
// end is its end.
func (s *supervisor) move(rank, i int) {
	old := &s.agents[s.owner[rank]]
	old.Ranks = slices.DeleteFunc(old.Ranks, func(r int) bool { return r == rank })
	s.agents[i].Ranks = append(s.agents[i].Ranks, rank)
	s.owner[rank] = i
}

// step takes one event and returns what to do, in order.
func (s *supervisor) step(ev event) []action {
	s.acts = nil
	if ev.kind.fromAgent() && ev.agent >= 0 && ev.agent < len(s.agents) {
		s.agents[ev.agent].heard = true
	}
	switch ev.kind {
	case evStart:
		s.start(ev.now)
	case evStarted:
		s.rankStarted(ev.now)
	case evExited:
		s.apply(s.pol.rankExited(ev.rank, exitCode(ev.exit), ev.text), ev.now)
	case evSuspect:
		s.apply(s.pol.suspect(ev.rank, ev.target, ev.epoch, ev.text), ev.now)
	case evJoin:
		s.apply(s.pol.join(ev.rank, ev.joiner.Addr, ev.joiner.Host), ev.now)
	case evStatus:
		if ev.rank >= 0 && ev.rank < len(s.declared) {
			s.declared[ev.rank] = ev.declared
		}
	case evClock:
		s.clockReply(ev.agent, ev.clock, ev.now)
	case evDone:
		if a := &s.agents[ev.agent]; !a.done {
			a.done = true
			s.pol.hostGone(ev.agent)
			s.emit(action{kind: actCloseStdin, agent: ev.agent})
			if left := s.unexited(ev.agent); len(left) > 0 {
				// Not seen: an agent waits for the restarts it expects,
				// and reports every exit before it is done.
				s.apply(s.pol.agentLost(left, fmt.Sprintf("the agent on %s finished while rank(s) %v were to run", a.Name, left)), ev.now)
			}
		}
	case evLost:
		if a := &s.agents[ev.agent]; !a.done {
			a.done = true
			s.pol.hostGone(ev.agent)
			s.apply(s.pol.agentLost(s.unexited(ev.agent), ev.text), ev.now)
		}
	case evAgentError:
		s.apply(s.pol.agentError(ev.text), ev.now)
	case evFailed:
		s.apply(s.pol.jobFailed(ev.code, ev.text), ev.now)
	case evSignal:
		// A second signal kills; the Go ranks first write their dumps.
		if s.pol.stopping == 0 || !s.dump(ev.now, 0, "", syscall.SIGKILL) {
			s.apply(s.pol.signal(ev.sig), ev.now)
		}
	case evCancelled:
		s.apply(s.pol.timedOut("cancelled: "+ev.text), ev.now)
	case evStall:
		s.stall(ev)
	case evTick:
		s.tick(ev.now)
	}
	return s.acts
}

func (s *supervisor) emit(a action) { s.acts = append(s.acts, a) }

// start: the ranks are starting; --timeout runs from now, and the agents'
// clocks are probed for --timeline.
func (s *supervisor) start(now time.Time) {
	if s.cfg.Timeout > 0 {
		s.timeout = now.Add(s.cfg.Timeout)
	}
	if s.cfg.Timeline {
		for i := range s.agents {
			s.sendClock(i, now, true)
		}
	}
}

func (s *supervisor) rankStarted(now time.Time) {
	s.started++
	if s.started == s.cfg.NP+s.cfg.Hubs {
		s.launch = now.Sub(s.t0)
		s.emit(action{kind: actLaunched})
	}
}

func (s *supervisor) sendClock(i int, now time.Time, probe bool) {
	a := &s.agents[i]
	a.clocks = append(a.clocks, clockReq{sent: now, probe: probe})
	s.emit(action{kind: actClock, agent: i})
}

// clockReply pairs agent i's answer with its oldest MsgClock in flight
// (the agent answers in order); a probe's answer may call for another.
func (s *supervisor) clockReply(i int, clock int64, now time.Time) {
	a := &s.agents[i]
	if len(a.clocks) == 0 {
		return
	}
	req := a.clocks[0]
	a.clocks = a.clocks[1:]
	if req.probe && a.probe.reply(req.sent, clock, now) {
		s.sendClock(i, now, true)
	}
}

// apply carries out one of policy's decisions.
func (s *supervisor) apply(d decision, now time.Time) {
	if d.Note != "" {
		s.emit(action{kind: actPrint, text: d.Note})
	}
	if d.Fence != nil {
		if i := s.owner[*d.Fence]; !s.agents[i].done {
			s.emit(action{kind: actSignalRank, agent: i, rank: *d.Fence, sig: syscall.SIGKILL})
		}
	}
	if d.View != nil {
		// Every host with a rank still running tells it.
		for i := range s.agents {
			if !s.agents[i].done && s.runsRank(i) {
				s.emit(action{kind: actView, agent: i, view: *d.View})
			}
		}
	}
	for _, r := range d.Restarts {
		// After the view: the restarted rank gets the view it is not
		// in, then later ones.
		if r.Spec != nil && r.Host >= 0 && r.Host < len(s.agents) && r.Host != s.owner[r.Rank] {
			s.move(r.Rank, r.Host)
		}
		if i := s.owner[r.Rank]; !s.agents[i].done {
			s.emit(action{kind: actRestart, agent: i, rank: r.Rank, count: r.Count, view: r.View, spec: r.Spec})
			if s.joinBy == nil {
				s.joinBy = map[int]joinDeadline{}
			}
			s.joinBy[r.Rank] = joinDeadline{now.Add(cmp.Or(s.cfg.JoinWait, joinWait)), r.Count}
		}
	}
	if d.Signal != 0 {
		for i, a := range s.agents {
			if !a.done {
				s.emit(action{kind: actTerminate, agent: i, sig: d.Signal})
			}
		}
		s.ping(now)
	}
	if d.HardStop && !s.hardSet {
		s.hardSet = true
		s.hardStop = now.Add(s.cfg.Grace + hardStopMargin)
	}
}

// ping asks every agent that is not done for a sign of life, once, when
// the ranks are first told to stop; silence sets the deadline.
func (s *supervisor) ping(now time.Time) {
	if s.stopped || s.cfg.AgentWait <= 0 {
		return
	}
	s.stopped = true
	s.silentAt = now.Add(s.cfg.AgentWait)
	for i := range s.agents {
		if !s.agents[i].done {
			s.agents[i].heard = false
			s.sendClock(i, now, false)
		}
	}
}

// dump asks the Go ranks for goroutine dumps, once, if some running rank
// can write one; DumpWait later the ranks get sig. A code of 0 leaves the
// job's outcome as it is (a second signal).
func (s *supervisor) dump(now time.Time, code int, text string, sig syscall.Signal) bool {
	if s.dumped || !s.dumpable() {
		return false
	}
	s.dumped = true
	if code != 0 {
		s.apply(s.pol.beginDump(code, text), now)
	} else {
		s.pol.dumping = true
	}
	for i, a := range s.agents {
		if !a.done {
			s.emit(action{kind: actDump, agent: i})
		}
	}
	s.dumpEnd, s.dumpSig = now.Add(s.cfg.DumpWait), sig
	return true
}

// dumpable: some running rank is a Go program using gorun's collectives.
func (s *supervisor) dumpable() bool {
	for r, d := range s.declared {
		if d && !s.pol.exited[r] {
			return true
		}
	}
	return false
}

// stall: the stall inspector's warning is printed; --stall-abort ends the
// job as --timeout does.
func (s *supervisor) stall(ev event) {
	if !ev.abort {
		s.emit(action{kind: actPrint, text: "stall: " + ev.text})
		return
	}
	if !s.dump(ev.now, ExitTimeout, ev.text, syscall.SIGTERM) {
		s.apply(s.pol.timedOut(ev.text), ev.now)
	}
}

// due reports whether deadline t is set and has come at now.
func due(t, now time.Time) bool { return !t.IsZero() && !now.Before(t) }

// tick acts on the deadlines that have come.
func (s *supervisor) tick(now time.Time) {
	if due(s.timeout, now) {
		s.timeout = time.Time{}
		text := fmt.Sprintf("job timed out after %v; terminated every rank", s.cfg.Timeout)
		if !s.dump(now, ExitTimeout, text, syscall.SIGTERM) {
			s.apply(s.pol.timedOut(text), now)
		}
	}
	if due(s.dumpEnd, now) {
		s.dumpEnd = time.Time{}
		s.apply(s.pol.endDump(s.dumpSig), now)
	}
	if due(s.silentAt, now) {
		s.silentAt = time.Time{}
		s.silent(now)
	}
	for rank, jd := range s.joinBy {
		if !due(jd.at, now) {
			continue
		}
		delete(s.joinBy, rank)
		i := s.owner[rank]
		if s.pol.joining[rank] && s.pol.restarts[rank] == jd.count && !s.pol.exited[rank] && s.pol.stopping == 0 && !s.agents[i].done {
			s.emit(action{kind: actPrint, text: fmt.Sprintf("rank %d has not joined %v after its restart %d (frozen?); --elastic: killed it", rank, cmp.Or(s.cfg.JoinWait, joinWait), jd.count)})
			s.emit(action{kind: actSignalRank, agent: i, rank: rank, sig: syscall.SIGKILL})
		}
	}
	if due(s.hardStop, now) {
		s.hardStop = time.Time{}
		// Agents that do not finish after the grace period plus a
		// margin are killed; their ranks die with them.
		for i, a := range s.agents {
			if !a.done {
				s.emit(action{kind: actKill, agent: i})
			}
		}
	}
}

// silent ends the wait on every agent that said nothing within AgentWait
// of the stop: its host is reported unreachable and its session killed,
// and it counts as lost now rather than when its stream ends.
func (s *supervisor) silent(now time.Time) {
	for i := range s.agents {
		a := &s.agents[i]
		if a.done || a.heard {
			continue
		}
		a.done = true
		s.pol.hostGone(i)
		text := fmt.Sprintf("%s unreachable: no word from its agent within %v of the stop; killed its session", a.Name, s.cfg.AgentWait)
		s.emit(action{kind: actKill, agent: i})
		failed := s.pol.failed
		left := s.unexited(i)
		s.apply(s.pol.agentLost(left, text), now)
		if failed || len(left) == 0 {
			// Not the job's failure: report it here.
			s.emit(action{kind: actPrint, text: text})
		}
	}
}

// runsRank reports whether agent i has a rank (not a hub) still running.
func (s *supervisor) runsRank(i int) bool {
	for _, r := range s.agents[i].Ranks {
		if r < s.cfg.NP && !s.pol.exited[r] {
			return true
		}
	}
	return false
}

// unexited lists the ranks (and hubs) of agent i that have not exited.
func (s *supervisor) unexited(i int) []int {
	var out []int
	for _, r := range s.agents[i].Ranks {
		if !s.pol.exited[r] {
			out = append(out, r)
		}
	}
	return out
}

// next is the earliest deadline to wake up for with an evTick (zero:
// none).
func (s *supervisor) next() time.Time {
	var t time.Time
	for _, d := range []time.Time{s.timeout, s.dumpEnd, s.silentAt, s.hardStop} {
		if !d.IsZero() && (t.IsZero() || d.Before(t)) {
			t = d
		}
	}
	for _, jd := range s.joinBy {
		if t.IsZero() || jd.at.Before(t) {
			t = jd.at
		}
	}
	return t
}

// finished: every agent is done (or lost); the job is over.
func (s *supervisor) finished() bool {
	for _, a := range s.agents {
		if !a.done {
			return false
		}
	}
	return true
}

// done reports whether agent i is done: it gets no more messages.
func (s *supervisor) done(i int) bool { return s.agents[i].done }

// result is the job's exit code and summary, and a closing note ("" for
// none), once it is finished.
func (s *supervisor) result() (code int, failure, note string) { return s.pol.result() }

// clockProbe measures an agent's clock against the launcher's: the
// fastest of clockProbes round trips wins.
type clockProbe struct {
	n      int
	offset time.Duration // agent minus launcher
	err    time.Duration // half the round trip
	ok     bool
}

const clockProbes = 5

// reply takes the agent's time for a probe sent at sent and answered at
// now, and says whether to probe again.
func (c *clockProbe) reply(sent time.Time, agentNs int64, now time.Time) (again bool) {
	rtt := now.Sub(sent)
	mid := sent.Add(rtt / 2)
	if !c.ok || rtt/2 < c.err {
		c.offset, c.err, c.ok = time.Unix(0, agentNs).Sub(mid), rtt/2, true
	}
	c.n++
	return c.n < clockProbes
}
