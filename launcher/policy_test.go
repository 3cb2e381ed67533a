package launcher

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// step is one event fed to the policy, and what it must decide.
type step struct {
	event      string // "exit", "suspect", "agent-lost", "agent-lost-after-exits", "agent-error", "signal", "timeout", ...
	rank, code int    // suspect: rank reports rank code
	epoch      int    // suspect: the newest view the reporter had heard of (-1: the policy's last)
	ranks      []int  // host-lost: the ranks of rank's host that are lost (nil: rank and rank+1)
	sig        syscall.Signal
	wantSignal syscall.Signal
	wantNote   string // a substring of the note, "" for none
	wantView   string // the view's line, "" for none
	wantFence  string // the rank fenced, "" for none
	// wantRestart is the ranks restarted, "RANK #COUNT VIEW" ("2 #1 view
	// 1 0,1,3"), followed by " on HOST as LOCALRANK/LOCALSIZE node
	// NODERANK" for one moved to another host, joined by "; "; "" for
	// none.
	wantRestart string
}

// layout puts ranks 0..np-1 two to a host (h1 has 0 and 1, h2 2 and 3,
// ...); host h has slots[h] slots, or as many as it has ranks.
func layout(np int, slots []int) ([]slotHost, [][]int) {
	var hosts []slotHost
	var ranks [][]int
	for r := range np {
		h := r / 2
		if h == len(hosts) {
			hosts = append(hosts, slotHost{Name: fmt.Sprintf("h%d", h+1), NodeRank: h})
			ranks = append(ranks, nil)
		}
		ranks[h] = append(ranks[h], r)
		hosts[h].Slots = len(ranks[h])
		if h < len(slots) {
			hosts[h].Slots = slots[h]
		}
	}
	return hosts, ranks
}

// showRestarts renders d's restarts as step.wantRestart says.
func showRestarts(p *policy, d decision) string {
	var out []string
	for _, r := range d.Restarts {
		s := fmt.Sprintf("%d #%d %s", r.Rank, r.Count, r.View)
		if r.Spec != nil {
			s += fmt.Sprintf(" on %s as %d/%d node %d", p.hosts[r.Host].Name, r.Spec.LocalRank, r.Spec.LocalSize, r.Spec.NodeRank)
		}
		out = append(out, s)
	}
	return strings.Join(out, "; ")
}

func (s step) feed(p *policy) decision {
	switch s.event {
	case "exit":
		return p.rankExited(s.rank, s.code, "rank exit summary")
	case "suspect":
		epoch := s.epoch
		if epoch < 0 {
			epoch = p.epoch
		}
		return p.suspect(s.rank, s.code, epoch, "frozen")
	case "agent-lost": // rank's host: rank is lost with it
		p.hostGone(p.hostOf[s.rank])
		return p.agentLost([]int{s.rank}, "lost the agent on h2")
	case "host-lost": // rank's host: ranks (rank and rank+1 if not given) are lost with it
		ranks := s.ranks
		if ranks == nil {
			ranks = []int{s.rank, s.rank + 1}
		}
		p.hostGone(p.hostOf[s.rank])
		return p.agentLost(ranks, fmt.Sprintf("lost the agent on %s", p.hosts[p.hostOf[s.rank]].Name))
	case "host-gone": // rank's host's agent is done: nothing is restarted there
		p.hostGone(p.hostOf[s.rank])
		return decision{}
	case "join":
		return p.join(s.rank, "10.0.0.3:4021", "h2/1")
	case "agent-lost-after-exits":
		return p.agentLost(nil, "lost the agent on h2")
	case "agent-error":
		return p.agentError("h1: agent: cannot start")
	case "signal":
		return p.signal(s.sig)
	case "timeout":
		return p.timedOut("job timed out")
	case "dump":
		return p.beginDump(s.code, "stalled for 3s")
	case "dump-done":
		return p.endDump(s.sig)
	case "abort":
		return p.jobFailed(s.code, "rank 1 called MPI_Abort")
	}
	panic("unknown event " + s.event)
}

func TestPolicy(t *testing.T) {
	for _, tc := range []struct {
		name        string
		np, hubs    int
		elastic     elasticity
		minNP       int
		maxRestarts int
		slots       []int // per host (see layout)
		steps       []step
		wantCode    int
		wantFailure string // substring; "" means success
		wantNote    string // substring of the closing note
		exactNote   bool   // the closing note is wantNote
	}{
		// The last rank's exit stops whatever is left (dedicated hubs).
		{name: "all succeed", np: 2, steps: []step{{event: "exit", rank: 0}, {event: "exit", rank: 1, wantSignal: syscall.SIGTERM}}},
		{name: "first failure wins and stops the rest", np: 3, steps: []step{
			{event: "exit", rank: 1, code: 3, wantSignal: syscall.SIGTERM},
			{event: "exit", rank: 0, code: 143}, // killed by our SIGTERM: not the cause
			{event: "exit", rank: 2, code: 0},
		}, wantCode: 3, wantFailure: "rank exit summary"},
		{name: "killed rank gives 128+signal", np: 2, steps: []step{
			{event: "exit", rank: 0, code: 128 + 9, wantSignal: syscall.SIGTERM},
			{event: "exit", rank: 1, code: 143},
		}, wantCode: 137, wantFailure: "rank exit summary"},
		{name: "ctrl-c forwarded, second escalates to SIGKILL", np: 2, steps: []step{
			{event: "signal", sig: syscall.SIGINT, wantSignal: syscall.SIGINT},
			{event: "signal", sig: syscall.SIGINT, wantSignal: syscall.SIGKILL},
			{event: "signal", sig: syscall.SIGINT},
			{event: "exit", rank: 0, code: 130}, {event: "exit", rank: 1, code: 137},
		}, wantCode: 130, wantFailure: "received interrupt"},
		{name: "timeout", np: 1, steps: []step{
			{event: "timeout", wantSignal: syscall.SIGTERM}, {event: "exit", rank: 0, code: 143},
		}, wantCode: ExitTimeout, wantFailure: "timed out"},
		{name: "dumps before a stall abort: exits meanwhile do not stop the job", np: 2, steps: []step{
			{event: "dump", code: ExitTimeout},
			{event: "exit", rank: 0, code: 2}, // a Go program after its dump
			{event: "dump-done", sig: syscall.SIGTERM, wantSignal: syscall.SIGTERM},
			{event: "exit", rank: 1, code: 143},
		}, wantCode: ExitTimeout, wantFailure: "stalled for 3s"},
		{name: "MPI_Abort sets the code", np: 3, steps: []step{
			{event: "abort", code: 3, wantSignal: syscall.SIGTERM},
			{event: "exit", rank: 1, code: 3}, {event: "exit", rank: 0, code: 143},
		}, wantCode: 3, wantFailure: "MPI_Abort"},
		{name: "lost agent", np: 2, steps: []step{
			{event: "agent-lost", wantSignal: syscall.SIGTERM}, {event: "exit", rank: 0, code: 143},
		}, wantCode: ExitAgentLost, wantFailure: "lost the agent on h2"},
		{name: "agent gone after its ranks exited is fine", np: 1, steps: []step{
			{event: "exit", rank: 0, wantSignal: syscall.SIGTERM}, {event: "agent-lost-after-exits"},
		}},
		{name: "agent error", np: 1, steps: []step{{event: "agent-error", wantSignal: syscall.SIGTERM}}, wantCode: ExitAgentLost, wantFailure: "cannot start"},
		{name: "hubs stopped once every rank is done", np: 2, hubs: 1, steps: []step{
			{event: "exit", rank: 0}, {event: "exit", rank: 1, wantSignal: syscall.SIGTERM}, {event: "exit", rank: 2, code: 143},
		}},
		{name: "a failing hub ends the job", np: 2, hubs: 1, steps: []step{
			{event: "exit", rank: 2, code: 1, wantSignal: syscall.SIGTERM}, {event: "exit", rank: 0, code: 143}, {event: "exit", rank: 1, code: 143},
		}, wantCode: 1, wantFailure: "rank exit summary"},
		{name: "elastic: the job goes on without a lost rank", np: 3, hubs: 1, elastic: hubElastic, steps: []step{
			{event: "exit", rank: 1, code: 137, wantNote: "goes on without it"},
			{event: "exit", rank: 0}, {event: "exit", rank: 2, wantSignal: syscall.SIGTERM},
			{event: "exit", rank: 3, code: 143},
		}, wantNote: "finished without 1 lost rank(s) [1]"},
		{name: "elastic: every rank lost", np: 2, elastic: hubElastic, steps: []step{
			{event: "exit", rank: 0, code: 137, wantNote: "goes on without it"},
			{event: "exit", rank: 1, code: 1, wantSignal: syscall.SIGTERM},
		}, wantCode: 1, wantFailure: "rank exit summary"},
		{name: "elastic: the last rank failing still fails", np: 2, elastic: hubElastic, steps: []step{
			{event: "exit", rank: 0},
			{event: "exit", rank: 1, code: 5, wantSignal: syscall.SIGTERM},
		}, wantCode: 5, wantFailure: "rank exit summary"},
		{name: "elastic: only lost ranks and nobody finished", np: 3, elastic: hubElastic, steps: []step{
			{event: "exit", rank: 0, code: 9, wantNote: "goes on"},
			{event: "exit", rank: 1, code: 137, wantNote: "goes on"},
			{event: "signal", sig: syscall.SIGTERM, wantSignal: syscall.SIGTERM},
			{event: "exit", rank: 2, code: 143},
		}, wantCode: 128 + int(syscall.SIGTERM), wantFailure: "received terminated"},
		{name: "hub-elastic: --min-np", np: 3, elastic: hubElastic, minNP: 2, steps: []step{
			{event: "exit", rank: 0, code: 137, wantNote: "--hub-elastic: the job goes on without it"},
			{event: "exit", rank: 1, code: 1, wantSignal: syscall.SIGTERM},
			{event: "exit", rank: 2, code: 143},
		}, wantCode: 1, wantFailure: "rank exit summary; --hub-elastic: 1 rank(s) left, below --min-np 2"},

		// --elastic (the ring): the launcher sequences views.
		{name: "ring: a death makes view 1 of the others", np: 4, elastic: ringElastic, steps: []step{
			{event: "exit", rank: 2, code: 7, wantNote: "rank exit summary; --elastic: the job goes on with 3 ranks (view 1)", wantView: "view 1 0,1,3"},
			{event: "exit", rank: 0}, {event: "exit", rank: 1}, // finished: no view
			{event: "exit", rank: 3, wantSignal: syscall.SIGTERM},
		}, wantNote: "finished without 1 lost rank(s) [2] (--elastic)"},
		{name: "ring: two deaths, epochs 1 and 2", np: 4, elastic: ringElastic, steps: []step{
			{event: "exit", rank: 3, code: 137, wantNote: "goes on with 3 ranks (view 1)", wantView: "view 1 0,1,2"},
			{event: "exit", rank: 0, code: 1, wantNote: "goes on with 2 ranks (view 2)", wantView: "view 2 1,2"},
			{event: "exit", rank: 1}, {event: "exit", rank: 2, wantSignal: syscall.SIGTERM},
		}, wantNote: "finished without 2 lost rank(s) [3 0] (--elastic)"},
		{name: "ring: below --min-np fails", np: 4, elastic: ringElastic, minNP: 4, steps: []step{
			{event: "exit", rank: 1, code: 7, wantSignal: syscall.SIGTERM},
			{event: "exit", rank: 0, code: 143}, {event: "exit", rank: 2, code: 143}, {event: "exit", rank: 3, code: 143},
		}, wantCode: 7, wantFailure: "rank exit summary; --elastic: 3 rank(s) left, below --min-np 4"},
		{name: "ring: --min-np holds until it does not", np: 4, elastic: ringElastic, minNP: 2, steps: []step{
			{event: "exit", rank: 1, code: 7, wantNote: "view 1", wantView: "view 1 0,2,3"},
			{event: "exit", rank: 0},
			{event: "exit", rank: 2, code: 9, wantSignal: syscall.SIGTERM},
			{event: "exit", rank: 3, code: 143},
		}, wantCode: 9, wantFailure: "1 rank(s) left, below --min-np 2"},
		{name: "ring: exit 0 never fails, even below --min-np", np: 3, elastic: ringElastic, minNP: 3, steps: []step{
			{event: "exit", rank: 0},
			{event: "exit", rank: 2},
			{event: "exit", rank: 1, wantSignal: syscall.SIGTERM},
		}},
		{name: "ring: a rank that finished while another waits on it leaves the view", np: 4, elastic: ringElastic, steps: []step{
			{event: "exit", rank: 0},
			{event: "suspect", rank: 1, code: 0, wantNote: "rank 1 waits on rank 0, which finished; --elastic: the job goes on with 3 ranks (view 1)", wantView: "view 1 1,2,3"},
			{event: "suspect", rank: 2, code: 0}, // out of the view already
			{event: "exit", rank: 1}, {event: "exit", rank: 2},
			{event: "exit", rank: 3, wantSignal: syscall.SIGTERM},
		}},
		{name: "ring: a suspect of a running rank fences it; its exit makes the view", np: 4, elastic: ringElastic, steps: []step{
			{event: "suspect", rank: 1, code: 3, wantNote: "rank 1 suspects rank 3 (frozen); --elastic: fenced it", wantFence: "3"},
			{event: "suspect", rank: 0, code: 3}, // fenced already
			{event: "suspect", rank: 3, code: 0}, // from the fenced rank
			{event: "exit", rank: 3, code: 137, wantNote: "goes on with 3 ranks (view 1)", wantView: "view 1 0,1,2"},
			{event: "exit", rank: 0}, {event: "exit", rank: 1},
			{event: "exit", rank: 2, wantSignal: syscall.SIGTERM},
		}, wantNote: "finished without 1 lost rank(s) [3]"},
		{name: "ring: suspects of gone, unknown or self are ignored, and from gone ranks", np: 4, hubs: 1, elastic: ringElastic, steps: []step{
			{event: "exit", rank: 2, code: 1, wantNote: "view 1", wantView: "view 1 0,1,3"},
			{event: "suspect", rank: 0, code: 2}, {event: "suspect", rank: 0, code: 9}, {event: "suspect", rank: 0, code: -1},
			{event: "suspect", rank: 0, code: 4}, // the hub
			{event: "suspect", rank: 1, code: 1},
			{event: "suspect", rank: 2, code: 0}, // rank 2 is gone
			{event: "suspect", rank: 4, code: 0}, // hubs do not report
			{event: "exit", rank: 0}, {event: "exit", rank: 1},
			{event: "exit", rank: 3, wantSignal: syscall.SIGTERM}, {event: "exit", rank: 4, code: 143},
		}, wantNote: "finished without 1 lost rank(s) [2]"},
		{name: "ring: a lost host is a loss of its ranks, one view", np: 6, elastic: ringElastic, steps: []step{
			{event: "host-lost", rank: 2, wantNote: "lost the agent on h2; --elastic: its ranks [2 3] are lost, the job goes on with 4 ranks (view 1)", wantView: "view 1 0,1,4,5"},
			{event: "suspect", rank: 0, code: 3}, // gone with its host
			{event: "exit", rank: 0}, {event: "exit", rank: 1}, {event: "exit", rank: 4},
			{event: "exit", rank: 5, wantSignal: syscall.SIGTERM},
		}, wantNote: "finished without 2 lost rank(s) [2 3] (--elastic)"},
		{name: "ring: a lost host below --min-np fails the job", np: 4, elastic: ringElastic, minNP: 3, steps: []step{
			{event: "host-lost", rank: 2, wantSignal: syscall.SIGTERM},
			{event: "exit", rank: 0, code: 143}, {event: "exit", rank: 1, code: 143},
		}, wantCode: ExitAgentLost, wantFailure: "lost the agent on h2; --elastic: 2 rank(s) left, below --min-np 3"},
		{name: "ring: no views or fences once the job is ending", np: 3, elastic: ringElastic, steps: []step{
			{event: "signal", sig: syscall.SIGTERM, wantSignal: syscall.SIGTERM},
			{event: "suspect", rank: 0, code: 1},
			{event: "exit", rank: 1, code: 143}, {event: "exit", rank: 0, code: 0}, {event: "exit", rank: 2, code: 143},
		}, wantCode: 143, wantFailure: "received terminated"},
		{name: "ring: a failing hub still ends the job", np: 2, hubs: 1, elastic: ringElastic, steps: []step{
			{event: "exit", rank: 2, code: 1, wantSignal: syscall.SIGTERM}, {event: "exit", rank: 0, code: 143}, {event: "exit", rank: 1, code: 143},
		}, wantCode: 1, wantFailure: "rank exit summary"},

		// --max-restarts: a lost rank is restarted on its host and joins
		// the next view once it says join.
		{name: "restart: the view without it at once, then the restart in that view; its join makes the next view", np: 4, elastic: ringElastic, maxRestarts: 2, steps: []step{
			{event: "exit", rank: 2, code: 7, wantNote: "rank exit summary; --elastic: the job goes on with 3 ranks (view 1); restarting it (restart 1 of 2)",
				wantView: "view 1 0,1,3", wantRestart: "2 #1 view 1 0,1,3"},
			{event: "join", rank: 2, wantNote: "rank 2 joined (restart 1, at 10.0.0.3:4021); --elastic: the job goes on with 4 ranks (view 2)",
				wantView: "view 2 0,1,2,3 +2 10.0.0.3:4021 h2/1"},
			{event: "exit", rank: 0}, {event: "exit", rank: 1}, {event: "exit", rank: 2},
			{event: "exit", rank: 3, wantSignal: syscall.SIGTERM},
		}, wantNote: "rank 2 restarted 1 time (--max-restarts 2)", exactNote: true},
		{name: "restart: a kill and a fence count as losses; a restarted rank may finish before it joined", np: 4, elastic: ringElastic, maxRestarts: 1, steps: []step{
			{event: "suspect", rank: 1, code: 3, wantNote: "fenced it", wantFence: "3"},
			{event: "exit", rank: 3, code: 137, wantNote: "goes on with 3 ranks (view 1); restarting it (restart 1 of 1)", wantView: "view 1 0,1,2", wantRestart: "3 #1 view 1 0,1,2"},
			{event: "exit", rank: 1, code: 128 + 15, wantNote: "goes on with 2 ranks (view 2); restarting it (restart 1 of 1)", wantView: "view 2 0,2", wantRestart: "1 #1 view 2 0,2"},
			{event: "exit", rank: 3}, // finished before it joined: no view, not lost
			{event: "join", rank: 1, wantNote: "rank 1 joined (restart 1", wantView: "view 3 0,1,2 +1 10.0.0.3:4021 h2/1"},
			{event: "exit", rank: 0}, {event: "exit", rank: 1},
			{event: "exit", rank: 2, wantSignal: syscall.SIGTERM},
		}, wantNote: "rank 1 restarted 1 time, rank 3 restarted 1 time (--max-restarts 1)", exactNote: true},
		{name: "restart: a restarted rank that dies before it joined makes no view and is restarted again in the same view", np: 4, elastic: ringElastic, maxRestarts: 2, steps: []step{
			{event: "exit", rank: 2, code: 1, wantNote: "(view 1); restarting it (restart 1 of 2)", wantView: "view 1 0,1,3", wantRestart: "2 #1 view 1 0,1,3"},
			{event: "exit", rank: 2, code: 1, wantNote: "rank exit summary; --elastic: it had not joined (restart 1); restarting it (restart 2 of 2)", wantRestart: "2 #2 view 1 0,1,3"},
			{event: "join", rank: 2, wantNote: "rank 2 joined (restart 2", wantView: "view 2 0,1,2,3 +2 10.0.0.3:4021 h2/1"},
			{event: "exit", rank: 0}, {event: "exit", rank: 1}, {event: "exit", rank: 2},
			{event: "exit", rank: 3, wantSignal: syscall.SIGTERM},
		}, wantNote: "rank 2 restarted 2 times (--max-restarts 2)", exactNote: true},
		{name: "restart: budget exhausted before the join, the rank is lost for good without a view", np: 4, elastic: ringElastic, maxRestarts: 1, steps: []step{
			{event: "exit", rank: 2, code: 7, wantNote: "restarting it (restart 1 of 1)", wantView: "view 1 0,1,3", wantRestart: "2 #1 view 1 0,1,3"},
			{event: "exit", rank: 2, code: 1, wantNote: "rank exit summary; --elastic: it had not joined (restart 1); not restarted: it was restarted 1 time(s) (--max-restarts 1)"},
			{event: "join", rank: 2, wantNote: "rank 2 said join, but it is not a restarted rank waiting to join; ignored"},
			{event: "exit", rank: 0}, {event: "exit", rank: 1},
			{event: "exit", rank: 3, wantSignal: syscall.SIGTERM},
		}, wantNote: "finished without 1 lost rank(s) [2] (--elastic); rank 2 restarted 1 time (--max-restarts 1)", exactNote: true},
		{name: "restart: a report about a rank's old process (the reporter had not heard of its join) is dropped", np: 4, elastic: ringElastic, maxRestarts: 1, steps: []step{
			{event: "exit", rank: 2, code: 7, wantView: "view 1 0,1,3", wantNote: "restarting it", wantRestart: "2 #1 view 1 0,1,3"},
			{event: "join", rank: 2, wantNote: "joined", wantView: "view 2 0,1,2,3 +2 10.0.0.3:4021 h2/1"},
			{event: "suspect", rank: 1, code: 2, epoch: 1}, // written before rank 1 read view 2
			{event: "suspect", rank: 3, code: 2, epoch: 2, wantNote: "rank 3 suspects rank 2 (frozen); --elastic: fenced it", wantFence: "2"},
		}, wantNote: "rank 2 restarted 1 time"},
		{name: "restart: a joined rank that dies is a loss like any other; budget exhausted after", np: 4, elastic: ringElastic, maxRestarts: 1, steps: []step{
			{event: "exit", rank: 2, code: 7, wantView: "view 1 0,1,3", wantNote: "restarting it", wantRestart: "2 #1 view 1 0,1,3"},
			{event: "join", rank: 2, wantNote: "joined", wantView: "view 2 0,1,2,3 +2 10.0.0.3:4021 h2/1"},
			{event: "exit", rank: 2, code: 9, wantNote: "rank exit summary; --elastic: the job goes on with 3 ranks (view 3); not restarted: it was restarted 1 time(s) (--max-restarts 1)", wantView: "view 3 0,1,3"},
			{event: "exit", rank: 0}, {event: "exit", rank: 1},
			{event: "exit", rank: 3, wantSignal: syscall.SIGTERM},
		}, wantNote: "finished without 1 lost rank(s) [2] (--elastic); rank 2 restarted 1 time", exactNote: false},
		{name: "restart: a joined rank that dies again is restarted in the view without it", np: 3, elastic: ringElastic, maxRestarts: 3, steps: []step{
			{event: "exit", rank: 0, code: 7, wantView: "view 1 1,2", wantNote: "restarting it (restart 1 of 3)", wantRestart: "0 #1 view 1 1,2"},
			{event: "join", rank: 0, wantNote: "joined", wantView: "view 2 0,1,2 +0 10.0.0.3:4021 h2/1"},
			{event: "suspect", rank: 0, code: 1, wantNote: "rank 0 suspects rank 1 (frozen); --elastic: fenced it", wantFence: "1"}, // a joined rank's reports count
			{event: "exit", rank: 1, code: 137, wantView: "view 3 0,2", wantNote: "restarting it (restart 1 of 3)", wantRestart: "1 #1 view 3 0,2"},
			{event: "exit", rank: 0, code: 9, wantView: "view 4 2", wantNote: "restarting it (restart 2 of 3)", wantRestart: "0 #2 view 4 2"},
			{event: "join", rank: 1, wantNote: "joined", wantView: "view 5 1,2 +1 10.0.0.3:4021 h2/1"},
			{event: "join", rank: 0, wantNote: "joined", wantView: "view 6 0,1,2 +0 10.0.0.3:4021 h2/1"},
			{event: "exit", rank: 0}, {event: "exit", rank: 1},
			{event: "exit", rank: 2, wantSignal: syscall.SIGTERM},
		}, wantNote: "rank 0 restarted 2 times, rank 1 restarted 1 time (--max-restarts 3)", exactNote: true},
		{name: "restart: below --min-np the job ends, restarts or not", np: 4, elastic: ringElastic, minNP: 4, maxRestarts: 3, steps: []step{
			{event: "exit", rank: 1, code: 7, wantSignal: syscall.SIGTERM},
			{event: "exit", rank: 0, code: 143}, {event: "exit", rank: 2, code: 143}, {event: "exit", rank: 3, code: 143},
		}, wantCode: 7, wantFailure: "rank exit summary; --elastic: 3 rank(s) left, below --min-np 4"},
		{name: "restart: a rank waiting to join does not count for --min-np", np: 4, elastic: ringElastic, minNP: 3, maxRestarts: 3, steps: []step{
			{event: "exit", rank: 1, code: 7, wantView: "view 1 0,2,3", wantNote: "restarting it", wantRestart: "1 #1 view 1 0,2,3"},
			{event: "exit", rank: 2, code: 7, wantSignal: syscall.SIGTERM},
			{event: "join", rank: 1}, // the job is ending
			{event: "exit", rank: 1, code: 143}, {event: "exit", rank: 0, code: 143}, {event: "exit", rank: 3, code: 143},
		}, wantCode: 7, wantFailure: "rank exit summary; --elastic: 2 rank(s) left, below --min-np 3", wantNote: "rank 1 restarted 1 time"},
		{name: "restart: not once the job is ending", np: 3, elastic: ringElastic, maxRestarts: 3, steps: []step{
			{event: "signal", sig: syscall.SIGTERM, wantSignal: syscall.SIGTERM},
			{event: "exit", rank: 1, code: 1}, {event: "exit", rank: 0, code: 143}, {event: "exit", rank: 2, code: 143},
		}, wantCode: 143, wantFailure: "received terminated"},
		{name: "restart: a rank whose host's agent is gone is not restarted", np: 4, elastic: ringElastic, maxRestarts: 2, steps: []step{
			{event: "host-gone", rank: 2},
			{event: "exit", rank: 2, code: 7, wantNote: "goes on with 3 ranks (view 1); its host is gone, and no other host has a free slot: not restarted", wantView: "view 1 0,1,3"},
			{event: "exit", rank: 0}, {event: "exit", rank: 1},
			{event: "exit", rank: 3, wantSignal: syscall.SIGTERM},
		}, wantNote: "finished without 1 lost rank(s) [2] (--elastic)", exactNote: true},
		{name: "restart: a lost host takes its rank waiting to join, without a view", np: 4, elastic: ringElastic, maxRestarts: 2, steps: []step{
			{event: "exit", rank: 2, code: 7, wantView: "view 1 0,1,3", wantNote: "restarting it", wantRestart: "2 #1 view 1 0,1,3"},
			{event: "agent-lost", rank: 2, wantNote: "lost the agent on h2; --elastic: its restarted rank(s) [2], which had not joined, are lost"},
			{event: "join", rank: 2, wantNote: "ignored"},
			{event: "exit", rank: 0}, {event: "exit", rank: 1},
			{event: "exit", rank: 3, wantSignal: syscall.SIGTERM},
		}, wantNote: "finished without 1 lost rank(s) [2] (--elastic); rank 2 restarted 1 time (--max-restarts 2)", exactNote: true},
		{name: "restart: a lost host of a member and a rank waiting to join: one view", np: 6, elastic: ringElastic, maxRestarts: 1, steps: []step{
			{event: "exit", rank: 2, code: 7, wantView: "view 1 0,1,3,4,5", wantNote: "restarting it", wantRestart: "2 #1 view 1 0,1,3,4,5"},
			{event: "host-lost", rank: 2, wantNote: "its ranks [2 3] are lost, the job goes on with 4 ranks (view 2)", wantView: "view 2 0,1,4,5"},
			{event: "exit", rank: 0}, {event: "exit", rank: 1}, {event: "exit", rank: 4},
			{event: "exit", rank: 5, wantSignal: syscall.SIGTERM},
		}, wantNote: "finished without 2 lost rank(s) [2 3] (--elastic); rank 2 restarted 1 time (--max-restarts 1)", exactNote: true},
		{name: "restart: a lost host's ranks are restarted on the hosts with the most free slots, the first on a tie; a moved rank is later restarted in its new place", np: 6, elastic: ringElastic, maxRestarts: 2, slots: []int{3, 3, 4}, steps: []step{
			{event: "host-lost", rank: 2, wantNote: "lost the agent on h2; --elastic: its ranks [2 3] are lost, the job goes on with 4 ranks (view 1); rank 2: its host is gone: restarting it on h3 (restart 1 of 2); rank 3: its host is gone: restarting it on h1 (restart 1 of 2)",
				wantView: "view 1 0,1,4,5", wantRestart: "2 #1 view 1 0,1,4,5 on h3 as 2/3 node 2; 3 #1 view 1 0,1,4,5 on h1 as 2/3 node 0"},
			{event: "join", rank: 2, wantNote: "rank 2 joined (restart 1", wantView: "view 2 0,1,2,4,5 +2 10.0.0.3:4021 h2/1"},
			{event: "exit", rank: 2, code: 9, wantNote: "(view 3); restarting it (restart 2 of 2)", wantView: "view 3 0,1,4,5", wantRestart: "2 #2 view 3 0,1,4,5"},
			// h3 goes too: rank 2 has no restart left, and no host has a free slot for 4 and 5.
			{event: "host-lost", rank: 4, ranks: []int{2, 4, 5}, wantNote: "lost the agent on h3; --elastic: its ranks [2 4 5] are lost, the job goes on with 2 ranks (view 4); rank 2: not restarted: it was restarted 2 time(s) (--max-restarts 2); rank 4: its host is gone, and no other host has a free slot: not restarted; rank 5: its host is gone, and no other host has a free slot: not restarted",
				wantView: "view 4 0,1"},
			{event: "join", rank: 3, wantNote: "rank 3 joined (restart 1", wantView: "view 5 0,1,3 +3 10.0.0.3:4021 h2/1"},
			{event: "exit", rank: 0}, {event: "exit", rank: 1},
			{event: "exit", rank: 3, wantSignal: syscall.SIGTERM},
		}, wantNote: "finished without 3 lost rank(s) [2 4 5] (--elastic); rank 2 restarted 2 times, rank 3 restarted 1 time (--max-restarts 2)", exactNote: true},
		{name: "restart: a lost host's ranks with no free slot anywhere are lost for good", np: 4, elastic: ringElastic, maxRestarts: 1, steps: []step{
			{event: "host-lost", rank: 2, wantNote: "its ranks [2 3] are lost, the job goes on with 2 ranks (view 1); rank 2: its host is gone, and no other host has a free slot: not restarted; rank 3: its host is gone, and no other host has a free slot: not restarted",
				wantView: "view 1 0,1"},
			{event: "exit", rank: 0},
			{event: "exit", rank: 1, wantSignal: syscall.SIGTERM},
		}, wantNote: "finished without 2 lost rank(s) [2 3] (--elastic)", exactNote: true},
		{name: "restart: a lost host's rank waiting to join is restarted on another host, without a view", np: 4, elastic: ringElastic, maxRestarts: 2, slots: []int{3, 2}, steps: []step{
			{event: "exit", rank: 3}, // finished
			{event: "exit", rank: 2, code: 7, wantView: "view 1 0,1", wantNote: "restarting it", wantRestart: "2 #1 view 1 0,1"},
			{event: "agent-lost", rank: 2, wantNote: "lost the agent on h2; --elastic: its restarted rank(s) [2], which had not joined, are lost; rank 2: its host is gone: restarting it on h1 (restart 2 of 2)",
				wantRestart: "2 #2 view 1 0,1 on h1 as 2/3 node 0"},
			{event: "join", rank: 2, wantNote: "rank 2 joined (restart 2", wantView: "view 2 0,1,2 +2 10.0.0.3:4021 h2/1"},
			{event: "exit", rank: 0}, {event: "exit", rank: 1},
			{event: "exit", rank: 2, wantSignal: syscall.SIGTERM},
		}, wantNote: "rank 2 restarted 2 times (--max-restarts 2)", exactNote: true},
		{name: "restart: joins from ranks that are not waiting to join are ignored", np: 4, hubs: 1, elastic: ringElastic, maxRestarts: 1, steps: []step{
			{event: "join", rank: 0, wantNote: "rank 0 said join, but it is not a restarted rank waiting to join; ignored"}, // in the view
			{event: "join", rank: 4, wantNote: "rank 4 said join"},                                                          // the hub
			{event: "join", rank: -1, wantNote: "rank -1 said join"},
			{event: "exit", rank: 2, code: 1, wantView: "view 1 0,1,3", wantNote: "restarting it", wantRestart: "2 #1 view 1 0,1,3"},
			{event: "join", rank: 2, wantNote: "joined", wantView: "view 2 0,1,2,3 +2 10.0.0.3:4021 h2/1"},
			{event: "join", rank: 2, wantNote: "rank 2 said join, but"}, // twice
			{event: "suspect", rank: 1, code: 3, wantNote: "fenced it", wantFence: "3"},
			{event: "join", rank: 3, wantNote: "rank 3 said join, but"}, // fenced, not yet exited
			{event: "exit", rank: 0},
			{event: "join", rank: 0, wantNote: "rank 0 said join, but"}, // finished
			{event: "exit", rank: 3, code: 137, wantView: "view 3 1,2", wantNote: "restarting it", wantRestart: "3 #1 view 3 1,2"},
			{event: "join", rank: 3, wantNote: "joined", wantView: "view 4 1,2,3 +3 10.0.0.3:4021 h2/1"},
			{event: "exit", rank: 1}, {event: "exit", rank: 2},
			{event: "exit", rank: 3, wantSignal: syscall.SIGTERM},
			{event: "exit", rank: 4, code: 143},
		}, wantNote: "rank 2 restarted 1 time, rank 3 restarted 1 time (--max-restarts 1)", exactNote: true},
		{name: "restart: suspects from or of a rank waiting to join are ignored", np: 4, elastic: ringElastic, maxRestarts: 1, steps: []step{
			{event: "exit", rank: 2, code: 1, wantView: "view 1 0,1,3", wantNote: "restarting it", wantRestart: "2 #1 view 1 0,1,3"},
			{event: "suspect", rank: 2, code: 0}, {event: "suspect", rank: 0, code: 2},
			{event: "join", rank: 2, wantNote: "joined", wantView: "view 2 0,1,2,3 +2 10.0.0.3:4021 h2/1"},
			{event: "suspect", rank: 0, code: 2, epoch: -1, wantNote: "fenced it", wantFence: "2"},
			{event: "exit", rank: 2, code: 137, wantView: "view 3 0,1,3", wantNote: "not restarted"},
			{event: "exit", rank: 0}, {event: "exit", rank: 1},
			{event: "exit", rank: 3, wantSignal: syscall.SIGTERM},
		}, wantNote: "finished without 1 lost rank(s) [2] (--elastic); rank 2 restarted 1 time"},
		{name: "restart: once every rank of the view finished, ranks waiting to join are stopped and lost", np: 3, elastic: ringElastic, maxRestarts: 1, steps: []step{
			{event: "exit", rank: 2, code: 1, wantView: "view 1 0,1", wantNote: "restarting it", wantRestart: "2 #1 view 1 0,1"},
			{event: "exit", rank: 0},
			{event: "exit", rank: 1, wantSignal: syscall.SIGTERM, wantNote: "every rank of view 1 finished; --elastic: stopping restarted rank(s) [2], which had not joined"},
			{event: "join", rank: 2},
			{event: "exit", rank: 2, code: 143},
		}, wantNote: "finished without 1 lost rank(s) [2] (--elastic); rank 2 restarted 1 time (--max-restarts 1)", exactNote: true},
		{name: "restart: only with --elastic's ring", np: 3, hubs: 1, elastic: hubElastic, maxRestarts: 2, steps: []step{
			{event: "exit", rank: 1, code: 137, wantNote: "--hub-elastic: the job goes on without it"},
			{event: "join", rank: 1},
			{event: "exit", rank: 0}, {event: "exit", rank: 2, wantSignal: syscall.SIGTERM}, {event: "exit", rank: 3, code: 143},
		}, wantNote: "finished without 1 lost rank(s) [1] (--hub-elastic)", exactNote: true},
		{name: "not elastic: suspects are ignored and a death ends the job", np: 3, steps: []step{
			{event: "suspect", rank: 0, code: 1},
			{event: "exit", rank: 1, code: 7, wantSignal: syscall.SIGTERM},
		}, wantCode: 7, wantFailure: "rank exit summary"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPolicy(tc.np, tc.hubs, tc.elastic, tc.minNP, tc.maxRestarts)
			p.placeHosts(layout(tc.np, tc.slots))
			for i, s := range tc.steps {
				d := s.feed(p)
				if d.Signal != s.wantSignal {
					t.Fatalf("step %d (%s): signal %v, want %v", i, s.event, d.Signal, s.wantSignal)
				}
				if (s.wantNote == "") != (d.Note == "") || !strings.Contains(d.Note, s.wantNote) {
					t.Fatalf("step %d (%s): note %q, want %q", i, s.event, d.Note, s.wantNote)
				}
				view, fence := "", ""
				if d.View != nil {
					view = d.View.String()
				}
				if d.Fence != nil {
					fence = strconv.Itoa(*d.Fence)
				}
				if view != s.wantView || fence != s.wantFence {
					t.Fatalf("step %d (%s): view %q, fence %q; want %q, %q", i, s.event, view, fence, s.wantView, s.wantFence)
				}
				if restart := showRestarts(p, d); restart != s.wantRestart {
					t.Fatalf("step %d (%s): restarts %q, want %q", i, s.event, restart, s.wantRestart)
				}
				if d.Signal != 0 && !d.HardStop {
					t.Fatalf("step %d: stops the ranks without arming the hard stop", i)
				}
			}
			code, failure, note := p.result()
			if code != tc.wantCode || (tc.wantFailure == "") != (failure == "") || !strings.Contains(failure, tc.wantFailure) {
				t.Fatalf("result %d %q, want %d %q", code, failure, tc.wantCode, tc.wantFailure)
			}
			if (tc.wantNote == "") != (note == "") || !strings.Contains(note, tc.wantNote) || tc.exactNote && note != tc.wantNote {
				t.Fatalf("closing note %q, want %q", note, tc.wantNote)
			}
		})
	}
}
