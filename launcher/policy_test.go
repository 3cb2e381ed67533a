package launcher

import (
	"strings"
	"syscall"
	"testing"
)

// step is one event fed to the policy, and what it must decide.
type step struct {
	event      string // "exit R CODE", "agent-lost", "agent-lost-after-exits", "agent-error", "signal", "timeout"
	rank, code int
	sig        syscall.Signal
	wantSignal syscall.Signal
	wantNote   string // a substring of the note, "" for none
}

func (s step) feed(p *policy) decision {
	switch s.event {
	case "exit":
		return p.rankExited(s.rank, s.code, "rank exit summary")
	case "agent-lost":
		return p.agentLost(false, "lost the agent on h2")
	case "agent-lost-after-exits":
		return p.agentLost(true, "lost the agent on h2")
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
		elastic     bool
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
		{name: "elastic: the job goes on without a lost rank", np: 3, hubs: 1, elastic: true, steps: []step{
			{event: "exit", rank: 1, code: 137, wantNote: "goes on without it"},
			{event: "exit", rank: 0}, {event: "exit", rank: 2, wantSignal: syscall.SIGTERM},
			{event: "exit", rank: 3, code: 143},
		}, wantNote: "finished without 1 lost rank(s) [1]"},
		{name: "elastic: every rank lost", np: 2, elastic: true, steps: []step{
			{event: "exit", rank: 0, code: 137, wantNote: "goes on without it"},
			{event: "exit", rank: 1, code: 1, wantSignal: syscall.SIGTERM},
		}, wantCode: 1, wantFailure: "rank exit summary"},
		{name: "elastic: the last rank failing still fails", np: 2, elastic: true, steps: []step{
			{event: "exit", rank: 0},
			{event: "exit", rank: 1, code: 5, wantSignal: syscall.SIGTERM},
		}, wantCode: 5, wantFailure: "rank exit summary"},
		{name: "elastic: only lost ranks and nobody finished", np: 3, elastic: true, steps: []step{
			{event: "exit", rank: 0, code: 9, wantNote: "goes on"},
			{event: "exit", rank: 1, code: 137, wantNote: "goes on"},
			{event: "signal", sig: syscall.SIGTERM, wantSignal: syscall.SIGTERM},
			{event: "exit", rank: 2, code: 143},
		}, wantCode: 128 + int(syscall.SIGTERM), wantFailure: "received terminated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPolicy(tc.np, tc.hubs, tc.elastic)
			for i, s := range tc.steps {
				d := s.feed(p)
				if d.Signal != s.wantSignal {
					t.Fatalf("step %d (%s): signal %v, want %v", i, s.event, d.Signal, s.wantSignal)
				}
				if (s.wantNote == "") != (d.Note == "") || !strings.Contains(d.Note, s.wantNote) {
					t.Fatalf("step %d (%s): note %q, want %q", i, s.event, d.Note, s.wantNote)
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
