package launcher

import (
	"fmt"
	"slices"
	"strings"
	"syscall"

	"github.com/gorun/gorun/internal/control"
	"github.com/gorun/gorun/launcher/proto"
)

// elasticity is how a job takes the loss of a rank.
type elasticity uint8

const (
	notElastic  elasticity = iota // the first failure ends the job
	hubElastic                    // --hub-elastic: the hubs finish their rounds without it
	ringElastic                   // --elastic: the launcher sequences views and fences suspects
)

// flag is the option that set e, for messages.
func (e elasticity) flag() string {
	if e == ringElastic {
		return "--elastic"
	}
	return "--hub-elastic"
}

// policy decides how a job ends: which exit code wins, when the ranks are
// told to stop and with which signal, and what the summary says. It is
// fed the job's events and returns what to do; it does no I/O and reads no
// clock, so its rules have table tests. The supervisor (supervisor.go)
// feeds it and turns its decisions into actions.
type policy struct {
	np          int // ranks 0..np-1; indices from np up are dedicated hubs
	elastic     elasticity
	minNP       int // elastic: the fewest running ranks a lost rank may leave
	maxRestarts int // ringElastic: how often each rank may be restarted

	exited, ok []bool
	fenced     []bool       // ranks killed on a suspect (ringElastic)
	joinedAt   []int        // per rank: the view it last joined (restarted) in, 0 if none
	inView     []bool       // ranks of the last view (ringElastic)
	epoch      int          // of the last view (ringElastic); 0 is the start
	last       control.View // the last view (ringElastic), without its joiners
	restarts   []int        // per rank: the restarts asked of its agent
	joining    []bool       // restarted ranks that have not joined a view yet
	hosts      []slotHost   // the job's hosts (agents), for restarts; nil: none known
	hostOf     []int        // per rank: its host in hosts (-1: none known)
	failed     bool
	code       int
	failure    string
	stopping   syscall.Signal // the last signal sent to every rank, 0 if none
	lost       []int          // ranks the job went on without (elastic)
	lostCode   int
	dumping    bool // the Go ranks are writing goroutine dumps before the stop
}

// decision is what the supervisor does after an event.
type decision struct {
	// Signal, if not 0, goes to every rank of every host that is not done.
	Signal syscall.Signal
	// HardStop: arm the deadline after which agents still running are
	// killed (the grace period plus a margin).
	HardStop bool
	// Note is a line to print now ("" for none).
	Note string
	// View, if not nil, is the job's new membership, for every running
	// rank (ringElastic).
	View *control.View
	// Fence, if not nil, is a rank to kill with SIGKILL: a rank reported
	// it lost (ringElastic).
	Fence *int
	// Restarts are lost ranks to start again, on their hosts or, when a
	// host is gone, on another (ringElastic, --max-restarts); they come
	// after View.
	Restarts []restart
}

// restart asks an agent to start a rank again: its Count-th restart,
// told View (the current one, which does not hold it) before anything
// else. Host is the index of the host (its agent) that runs it, -1 if
// the policy knows no hosts (its own); Spec, if not nil, is the rank's
// place on Host, which it moves to because its own host is gone.
type restart struct {
	Rank, Count int
	View        control.View
	Host        int
	Spec        *proto.RankSpec
}

// slotHost is one host of the job (one agent) as restarts see it. A rank
// whose host is gone is restarted on the live host with the most free
// slots (Slots minus the ranks placed there at the start, minus the
// restarts moved there since), the first such host on a tie; it takes
// the next slot there: LocalRank is the number of ranks the host had
// before it, LocalSize that number plus one, NodeRank the host's.
type slotHost struct {
	Name     string
	Slots    int // the hostfile's or the allocation's
	NodeRank int
	used     int  // ranks placed on it, and restarts moved to it
	gone     bool // its agent is done or lost
}

// newPolicy: np ranks and hubs hubs; minNP (0 counts as 1) is the fewest
// running ranks an elastic job goes on with; with ringElastic a lost rank
// is restarted up to maxRestarts times.
func newPolicy(np, hubs int, elastic elasticity, minNP, maxRestarts int) *policy {
	if elastic != ringElastic {
		maxRestarts = 0
	}
	p := &policy{np: np, elastic: elastic, minNP: max(minNP, 1), maxRestarts: max(maxRestarts, 0),
		exited: make([]bool, np+hubs), ok: make([]bool, np+hubs), fenced: make([]bool, np), joinedAt: make([]int, np), inView: make([]bool, np),
		restarts: make([]int, np), joining: make([]bool, np), hostOf: make([]int, np)}
	for r := range p.inView {
		p.inView[r] = true
		p.hostOf[r] = -1
	}
	return p
}

// placeHosts tells the policy the job's hosts, with the ranks placed on
// each (ranks[h]: those of hosts[h]); a lost rank whose host is gone is
// then restarted on another host with a free slot.
func (p *policy) placeHosts(hosts []slotHost, ranks [][]int) {
	p.hosts = slices.Clone(hosts)
	for h, rs := range ranks {
		for _, r := range rs {
			if r >= 0 && r < p.np {
				p.hostOf[r] = h
				p.hosts[h].used++
			}
		}
	}
}

// exitCode is what a rank's exit counts as: its exit code, 128+N when
// signal N killed it, and 1 when its agent counts it as failed (a PMI
// error, MPI_Init without MPI_Finalize) although it exited with 0 or was
// killed by the agent.
func exitCode(ex *proto.Exit) int {
	if ex == nil {
		return 1
	}
	code := ex.Code
	if ex.Signal != 0 {
		code = 128 + ex.Signal
	}
	if ex.Failure != "" && (code == 0 || ex.Signal == int(syscall.SIGKILL)) {
		code = 1
	}
	return code
}

// fail records the first failure; later ones do not change the outcome.
func (p *policy) fail(code int, text string) {
	if !p.failed {
		p.failed, p.code, p.failure = true, code, text
	}
}

// stop sends sig to every rank unless it, or SIGKILL, was sent already.
func (p *policy) stop(sig syscall.Signal) decision {
	if p.stopping == syscall.SIGKILL || p.stopping == sig {
		return decision{HardStop: true}
	}
	p.stopping = sig
	return decision{Signal: sig, HardStop: true}
}

func (p *policy) workersDone() bool {
	for _, e := range p.exited[:p.np] {
		if !e {
			return false
		}
	}
	return true
}

// rankExited: rank (or hub) exited with code (128+N for signal N);
// describe is the summary of its exit, used if it ends the job.
//
// In an elastic job a rank that fails is lost, and the job goes on, while
// at least minNP ranks are still running; with --elastic every exit
// failure while the job goes on starts a new view for the ranks still
// running; a rank that finished (exit 0) does not. A lost rank with
// restarts left whose host's agent is there is restarted (after the
// view): it is not in a view until it joins. A restarted rank that fails
// before it joined makes no view (it was in none) and is restarted again
// while it has restarts left.
func (p *policy) rankExited(rank, code int, describe string) decision {
	worker := rank < p.np
	wasJoining := worker && p.joining[rank]
	p.exited[rank], p.ok[rank] = true, code == 0
	if worker {
		p.joining[rank] = false
	}
	var d decision
	switch {
	case p.stopping != 0 || p.dumping:
	case code == 0:
		// A rank that finished is not a loss: it took part in every
		// collective, and its data reached the others before its exit,
		// so a view would only interrupt their last ones. (One that left
		// too early is reported by a rank that still waits on it; see
		// suspect.)
	case p.elastic == notElastic || !worker:
		p.fail(code, describe)
		return p.stop(syscall.SIGTERM)
	case wasJoining:
		// It was in no view: the others need no new one.
		d = p.lose(rank, code, fmt.Sprintf("%s; --elastic: it had not joined (restart %d)", describe, p.restarts[rank]))
	case len(p.members()) < p.minNP:
		p.fail(code, fmt.Sprintf("%s; %s: %d rank(s) left, below --min-np %d", describe, p.elastic.flag(), len(p.members()), p.minNP))
		return p.stop(syscall.SIGTERM)
	case p.elastic == hubElastic:
		// The hubs finish their rounds without it.
		p.lostForGood(rank, code)
		d.Note = describe + "; --hub-elastic: the job goes on without it"
	default:
		v := p.nextView(nil)
		d = p.lose(rank, code, fmt.Sprintf("%s; --elastic: the job goes on with %d ranks (view %d)", describe, len(v.Live), v.Epoch))
		d.View = v
	}
	if worker {
		return p.settle(d)
	}
	return d
}

// lose: rank failed (code) while the job goes on with --elastic; note
// says so. It is restarted if it can be (see revive), else it is lost for
// good, and the note says why.
func (p *policy) lose(rank, code int, note string) decision {
	d := decision{Note: note}
	r, why := p.revive(rank, code)
	if r != nil {
		d.Restarts = []restart{*r}
	}
	if why != "" {
		d.Note += "; " + why
	}
	return d
}

// revive decides what becomes of rank, lost (code) while the job goes on
// with --elastic: with restarts left it is restarted on its own host if
// that host's agent is there, else on the live host with the most free
// slots (see slotHost); otherwise it is lost for good. why says which
// ("" when restarts are off).
func (p *policy) revive(rank, code int) (r *restart, why string) {
	h := p.hostOf[rank]
	var spec *proto.RankSpec
	switch {
	case p.maxRestarts == 0:
		p.lostForGood(rank, code)
		return nil, ""
	case p.restarts[rank] >= p.maxRestarts:
		p.lostForGood(rank, code)
		return nil, fmt.Sprintf("not restarted: it was restarted %d time(s) (--max-restarts %d)", p.restarts[rank], p.maxRestarts)
	case h >= 0 && p.hosts[h].gone:
		if h = p.freeHost(); h < 0 {
			p.lostForGood(rank, code)
			return nil, "its host is gone, and no other host has a free slot: not restarted"
		}
		to := &p.hosts[h]
		spec = &proto.RankSpec{Rank: rank, LocalRank: to.used, LocalSize: to.used + 1, NodeRank: to.NodeRank}
		to.used++
		p.hostOf[rank] = h
	}
	p.restarts[rank]++
	p.exited[rank], p.joining[rank], p.fenced[rank] = false, true, false
	r = &restart{Rank: rank, Count: p.restarts[rank], View: control.View{Epoch: p.last.Epoch, Live: slices.Clone(p.last.Live)}, Host: h, Spec: spec}
	if spec != nil {
		return r, fmt.Sprintf("its host is gone: restarting it on %s (restart %d of %d)", p.hosts[h].Name, p.restarts[rank], p.maxRestarts)
	}
	return r, fmt.Sprintf("restarting it (restart %d of %d)", p.restarts[rank], p.maxRestarts)
}

// freeHost is the host a rank whose host is gone is restarted on: of the
// hosts whose agent is there, the one with the most free slots, the
// first on a tie; -1 if none has a free slot.
func (p *policy) freeHost() int {
	best, most := -1, 0
	for h, s := range p.hosts {
		if free := s.Slots - s.used; !s.gone && free > most {
			best, most = h, free
		}
	}
	return best
}

// lostForGood: the job goes on without rank, which failed with code.
func (p *policy) lostForGood(rank, code int) {
	p.lost = append(p.lost, rank)
	if p.lostCode == 0 {
		p.lostCode = code
	}
}

// settle ends the job once no rank is left to work: when every rank
// (not hub) has exited, the hubs are stopped; when the only ranks left
// are restarted ones that have not joined (every rank of the view
// finished), they have nobody to join and are stopped too, and the job
// counts them as lost.
func (p *policy) settle(d decision) decision {
	if p.stopping != 0 || p.dumping {
		return d
	}
	if p.workersDone() {
		// Every rank is done: the hubs have nothing left to serve.
		s := p.stop(syscall.SIGTERM)
		s.Note = d.Note
		return s
	}
	if len(p.members()) > 0 {
		return d
	}
	var joiners []int
	for r, j := range p.joining {
		if j {
			joiners = append(joiners, r)
			p.lostForGood(r, 1)
		}
	}
	s := p.stop(syscall.SIGTERM)
	s.Note = fmt.Sprintf("every rank of view %d finished; --elastic: stopping restarted rank(s) %v, which had not joined", p.epoch, joiners)
	if d.Note != "" {
		s.Note = d.Note + "; " + s.Note
	}
	return s
}

// members lists the ranks (not hubs) that are running and not waiting to
// join, in order: those of the next view.
func (p *policy) members() []int {
	var live []int
	for r, e := range p.exited[:p.np] {
		if !e && !p.joining[r] {
			live = append(live, r)
		}
	}
	return live
}

// nextView is the next epoch's view of the members, with joined the
// restarted ranks that join in it; nil if none is left to tell.
func (p *policy) nextView(joined []control.Joiner) *control.View {
	live := p.members()
	if len(live) == 0 {
		return nil
	}
	p.epoch++
	clear(p.inView)
	for _, r := range live {
		p.inView[r] = true
	}
	p.last = control.View{Epoch: p.epoch, Live: live}
	return &control.View{Epoch: p.epoch, Live: slices.Clone(live), Joined: joined}
}

// join: restarted rank says it is ready to join, its transport at addr,
// host key host. The next view holds it, names it as joining, and goes
// to every running rank, the joiner too. A join from any other rank (in
// the view already, fenced, exited, never restarted) is ignored, with a
// note; so is every join while the job is ending.
func (p *policy) join(rank int, addr, host string) decision {
	if p.elastic != ringElastic || p.stopping != 0 || p.dumping {
		return decision{}
	}
	if rank < 0 || rank >= p.np || p.exited[rank] || !p.joining[rank] {
		return decision{Note: fmt.Sprintf("rank %d said join, but it is not a restarted rank waiting to join; ignored", rank)}
	}
	p.joining[rank] = false
	d := decision{View: p.nextView([]control.Joiner{{Rank: rank, Addr: addr, Host: host}})}
	p.joinedAt[rank] = d.View.Epoch
	d.Note = fmt.Sprintf("rank %d joined (restart %d, at %s); --elastic: the job goes on with %d ranks (view %d)", rank, p.restarts[rank], addr, len(d.View.Live), d.View.Epoch)
	return d
}

// suspect: rank reporter says rank target is lost (reason), having heard
// of views up to epoch. With --elastic, a target that is running is
// fenced (killed); its exit then makes the new view. A report is ignored
// while the job is ending, and when either rank is not running, is a
// restarted rank that has not joined, or was fenced already (a fenced
// rank's reports do not count), or names itself; and when the target
// joined (restarted) in a view newer than epoch: the reporter had not
// heard of its new process yet, and its report is about the old one (a
// write that failed on the old process's connection fenced the new one).
func (p *policy) suspect(reporter, target, epoch int, reason string) decision {
	if p.elastic != ringElastic || p.stopping != 0 || p.dumping || reporter == target || !p.standing(reporter) || p.joining[reporter] {
		return decision{}
	}
	if target >= 0 && target < p.np && epoch < p.joinedAt[target] {
		return decision{}
	}
	if target >= 0 && target < p.np && p.exited[target] && p.ok[target] && p.inView[target] {
		// It finished (exit 0) while a rank still waits on it: the
		// others go on without it.
		d := decision{View: p.nextView(nil)}
		d.Note = fmt.Sprintf("rank %d waits on rank %d, which finished; --elastic: the job goes on with %d ranks (view %d)", reporter, target, len(d.View.Live), d.View.Epoch)
		return d
	}
	if !p.standing(target) || p.joining[target] {
		// A restarted rank that has not joined is in no view: nobody
		// waits on it.
		return decision{}
	}
	p.fenced[target] = true
	why := ""
	if reason != "" {
		why = " (" + reason + ")"
	}
	return decision{Fence: &target, Note: fmt.Sprintf("rank %d suspects rank %d%s; --elastic: fenced it", reporter, target, why)}
}

// standing: r is a rank (not a hub) that is running and was not fenced.
func (p *policy) standing(r int) bool {
	return r >= 0 && r < p.np && !p.exited[r] && !p.fenced[r]
}

// hostGone: host h's agent is gone (lost, or done): no rank is
// restarted there, and its ranks, when lost, are restarted elsewhere.
func (p *policy) hostGone(h int) {
	if h >= 0 && h < len(p.hosts) {
		p.hosts[h].gone = true
	}
}

// agentLost: a host's agent (its SSH session) ended; ranks are the ranks
// and hubs of that host that had not exited. With --elastic a host whose
// ranks (no hub) are lost is a loss of each of them, and the job goes on
// with one view without them while at least minNP ranks run; otherwise
// the job fails. Restarted ranks of the host that had not joined are lost
// too, but need no view. With --max-restarts each of them with restarts
// left is restarted on another host with a free slot (see revive), after
// the view.
func (p *policy) agentLost(ranks []int, text string) decision {
	if len(ranks) == 0 {
		return decision{}
	}
	elastic := p.elastic == ringElastic && p.stopping == 0 && !p.dumping
	for _, r := range ranks {
		elastic = elastic && r < p.np
	}
	if !elastic {
		p.fail(ExitAgentLost, text)
		return p.stop(syscall.SIGTERM)
	}
	members := false
	for _, r := range ranks {
		members = members || !p.joining[r]
		p.exited[r], p.joining[r] = true, false
	}
	var d decision
	if !members {
		d.Note = fmt.Sprintf("%s; --elastic: its restarted rank(s) %v, which had not joined, are lost", text, ranks)
	} else {
		if n := len(p.members()); n < p.minNP {
			for _, r := range ranks {
				p.lostForGood(r, ExitAgentLost)
			}
			p.fail(ExitAgentLost, fmt.Sprintf("%s; --elastic: %d rank(s) left, below --min-np %d", text, n, p.minNP))
			return p.stop(syscall.SIGTERM)
		}
		if d.View = p.nextView(nil); d.View == nil {
			for _, r := range ranks {
				p.lostForGood(r, ExitAgentLost)
			}
			return decision{Note: text + "; --elastic: no rank is left"}
		}
		d.Note = fmt.Sprintf("%s; --elastic: its ranks %v are lost, the job goes on with %d ranks (view %d)", text, ranks, len(d.View.Live), d.View.Epoch)
	}
	for _, r := range ranks {
		re, why := p.revive(r, ExitAgentLost)
		if re != nil {
			d.Restarts = append(d.Restarts, *re)
		}
		if why != "" {
			d.Note += fmt.Sprintf("; rank %d: %s", r, why)
		}
	}
	return p.settle(d)
}

// jobFailed: the job failed for a reason other than a rank's exit (a rank
// called MPI_Abort, the PMI barrier broke); code is the job's exit code.
func (p *policy) jobFailed(code int, text string) decision {
	p.fail(code, text)
	return p.stop(syscall.SIGTERM)
}

// beginDump: the job is to end with code (a timeout, a stall) once the Go
// ranks wrote their goroutine dumps; until endDump, ranks that exit (as
// Go programs do after a dump) do not stop the others.
func (p *policy) beginDump(code int, text string) decision {
	p.fail(code, text)
	p.dumping = true
	return decision{}
}

// endDump: the dumps had their time; stop every rank with sig.
func (p *policy) endDump(sig syscall.Signal) decision {
	p.dumping = false
	return p.stop(sig)
}

// agentError: an agent reported a failure of its own.
func (p *policy) agentError(text string) decision {
	p.fail(ExitAgentLost, text)
	return p.stop(syscall.SIGTERM)
}

// signal: gorun received sig. The first is forwarded; one that arrives
// while the ranks are already stopping escalates to SIGKILL.
func (p *policy) signal(sig syscall.Signal) decision {
	if p.stopping != 0 {
		return p.stop(syscall.SIGKILL)
	}
	p.fail(128+int(sig), fmt.Sprintf("gorun received %v; forwarded it to every rank", sig))
	return p.stop(sig)
}

// timedOut: --timeout ran out, or the caller's context ended.
func (p *policy) timedOut(text string) decision {
	p.fail(ExitTimeout, text)
	return p.stop(syscall.SIGTERM)
}

// result is the job's exit code and summary once every agent is done, and
// a closing note ("" for none): the ranks the job went on without, and
// the restarts.
func (p *policy) result() (code int, failure, note string) {
	if len(p.lost) > 0 && !p.failed {
		anyOK := false
		for _, ok := range p.ok[:p.np] {
			anyOK = anyOK || ok
		}
		if !anyOK {
			p.fail(p.lostCode, fmt.Sprintf("every rank was lost (elastic: %v)", p.lost))
		} else {
			note = fmt.Sprintf("finished without %d lost rank(s) %v (%s)", len(p.lost), p.lost, p.elastic.flag())
		}
	}
	var restarted []string
	for r, n := range p.restarts {
		if n > 0 {
			restarted = append(restarted, fmt.Sprintf("rank %d restarted %d %s", r, n, plural(n, "time", "times")))
		}
	}
	if len(restarted) > 0 {
		if note != "" {
			note += "; "
		}
		note += strings.Join(restarted, ", ") + " (--max-restarts " + fmt.Sprint(p.maxRestarts) + ")"
	}
	return p.code, p.failure, note
}

func plural(n int, one, more string) string {
	if n == 1 {
		return one
	}
	return more
}
