package launcher

import (
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// step is one event fed to the policy, and what it must decide.
type step struct {
	event      string // "exit", "suspect", "agent-lost", "agent-lost-after-exits", "agent-error", "signal", "timeout", ...
	rank, code int    // suspect: rank reports rank code
	sig        syscall.Signal
	wantSignal syscall.Signal
	wantNote   string // a substring of the note, "" for none
	wantView   string // the view's line, "" for none
	wantFence  string // the rank fenced, "" for none
}

func (s step) feed(p *policy) decision {
	switch s.event {
	case "exit":
		return p.rankExited(s.rank, s.code, "rank exit summary")
	case "suspect":
		return p.suspect(s.rank, s.code, "frozen")
	case "agent-lost":
		return p.agentLost([]int{s.rank}, "lost the agent on h2")
	case "host-lost": // ranks rank and rank+1
		return p.agentLost([]int{s.rank, s.rank + 1}, "lost the agent on h2")
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
		steps       []step
		wantCode    int
		wantFailure string // substring; "" means success
		wantNote    string // substring of the closing note
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
		{name: "not elastic: suspects are ignored and a death ends the job", np: 3, steps: []step{
			{event: "suspect", rank: 0, code: 1},
			{event: "exit", rank: 1, code: 7, wantSignal: syscall.SIGTERM},
		}, wantCode: 7, wantFailure: "rank exit summary"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPolicy(tc.np, tc.hubs, tc.elastic, tc.minNP)
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
				if d.Signal != 0 && !d.HardStop {
					t.Fatalf("step %d: stops the ranks without arming the hard stop", i)
				}
			}
			code, failure, note := p.result()
			if code != tc.wantCode || (tc.wantFailure == "") != (failure == "") || !strings.Contains(failure, tc.wantFailure) {
				t.Fatalf("result %d %q, want %d %q", code, failure, tc.wantCode, tc.wantFailure)
			}
			if (tc.wantNote == "") != (note == "") || !strings.Contains(note, tc.wantNote) {
				t.Fatalf("closing note %q, want %q", note, tc.wantNote)
			}
		})
	}
}
