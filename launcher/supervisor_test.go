package launcher

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/control"
	"github.com/gorun/gorun/launcher/proto"
)

// The supervisor's rules, one table row each. Every row runs a fresh
// supervisor through events at given times and checks the actions of each
// step and the job's result; nothing here sleeps or starts a process.

var t0 = time.Unix(1_000_000, 0)

// sstep is one event fed at t0+at, and the actions it must produce, in
// order, each rendered by show (a print matches by prefix).
type sstep struct {
	at   time.Duration
	ev   event
	want []string
}

func show(a action) string {
	switch a.kind {
	case actPrint:
		return "print: " + a.text
	case actTerminate:
		return fmt.Sprintf("terminate %d %s", a.agent, signalName(a.sig))
	case actDump:
		return fmt.Sprintf("dump %d", a.agent)
	case actClock:
		return fmt.Sprintf("clock %d", a.agent)
	case actCloseStdin:
		return fmt.Sprintf("close %d", a.agent)
	case actKill:
		return fmt.Sprintf("kill %d", a.agent)
	case actLaunched:
		return "launched"
	case actView:
		return fmt.Sprintf("tell %d %s", a.agent, a.view)
	case actSignalRank:
		return fmt.Sprintf("signal %d rank %d %s", a.agent, a.rank, signalName(a.sig))
	case actRestart:
		if a.spec != nil {
			return fmt.Sprintf("restart %d rank %d #%d %s as %d/%d node %d", a.agent, a.rank, a.count, a.view, a.spec.LocalRank, a.spec.LocalSize, a.spec.NodeRank)
		}
		return fmt.Sprintf("restart %d rank %d #%d %s", a.agent, a.rank, a.count, a.view)
	}
	return fmt.Sprintf("action %d", a.kind)
}

func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGTERM:
		return "TERM"
	case syscall.SIGKILL:
		return "KILL"
	case syscall.SIGINT:
		return "INT"
	}
	return fmt.Sprint(int(s))
}

// Event builders: agent 0 is h1 with ranks 0 and 1, agent 1 is h2 with
// ranks 2 and 3 (testConfig).
func exited(agent, rank, code int) event {
	return event{kind: evExited, agent: agent, rank: rank, exit: &proto.Exit{Code: code}, text: fmt.Sprintf("rank %d exited with code %d", rank, code)}
}
func started(agent, rank int) event { return event{kind: evStarted, agent: agent, rank: rank} }
func heard(agent int) event         { return event{kind: evHeard, agent: agent} }
func clockAns(agent int, ns int64) event {
	return event{kind: evClock, agent: agent, clock: ns}
}
func doneEv(agent int) event { return event{kind: evDone, agent: agent} }
func lost(agent int) event {
	return event{kind: evLost, agent: agent, text: fmt.Sprintf("lost the agent on h%d", agent+1)}
}
func declared(agent, rank int) event {
	return event{kind: evStatus, agent: agent, rank: rank, declared: true}
}
func signal(s syscall.Signal) event { return event{kind: evSignal, sig: s} }

// suspects is rank's report of target from a rank that has heard of every
// view so far.
func suspects(agent, rank, target int) event {
	return event{kind: evSuspect, agent: agent, rank: rank, target: target, epoch: 1 << 20, text: "frozen"}
}
func tick() event { return event{kind: evTick} }
func joins(agent, rank int) event {
	return event{kind: evJoin, agent: agent, rank: rank, joiner: control.Joiner{Rank: rank, Addr: "10.0.0.3:4021", Host: "h2/1"}}
}

func testConfig() supervisorConfig {
	return supervisorConfig{
		NP: 4, Grace: 5 * time.Second, DumpWait: 2 * time.Second, AgentWait: 2 * time.Second,
		Agents: []supervisedAgent{{Name: "h1", Ranks: []int{0, 1}}, {Name: "h2", Ranks: []int{2, 3}}},
	}
}

// bothStop is what the first stop of a job on h1 and h2 does: both agents
// signal their ranks, then both are pinged.
var bothStop = []string{"terminate 0 TERM", "terminate 1 TERM", "clock 0", "clock 1"}

func TestSupervisor(t *testing.T) {
	for _, tc := range []struct {
		name        string
		cfg         func(*supervisorConfig)
		steps       []sstep
		wantCode    int
		wantFailure string // substring; "" means success
		notDone     bool   // the job is still running after the steps
	}{
		{name: "all ranks succeed: the agents finish", steps: []sstep{
			{ev: started(0, 0)}, {ev: started(0, 1)}, {ev: started(1, 2)},
			{at: time.Second, ev: started(1, 3), want: []string{"launched"}},
			{ev: exited(0, 0, 0)}, {ev: exited(0, 1, 0)}, {ev: exited(1, 2, 0)},
			// The last rank's exit stops what is left (dedicated hubs).
			{ev: exited(1, 3, 0), want: bothStop},
			{ev: doneEv(0), want: []string{"close 0"}}, {ev: doneEv(1), want: []string{"close 1"}},
		}},
		{name: "a failed rank stops every host and sets the code", steps: []sstep{
			{ev: exited(1, 2, 3), want: bothStop},
			{ev: exited(0, 0, 143)}, {ev: exited(0, 1, 143)}, {ev: exited(1, 3, 143)},
			{ev: doneEv(0), want: []string{"close 0"}}, {ev: doneEv(1), want: []string{"close 1"}},
		}, wantCode: 3, wantFailure: "rank 2 exited with code 3"},
		{name: "exit code: a signal counts as 128+N", steps: []sstep{
			{ev: event{kind: evExited, agent: 0, rank: 0, exit: &proto.Exit{Code: -1, Signal: 9}, text: "killed"}, want: bothStop},
		}, wantCode: 137, wantFailure: "killed", notDone: true},
		{name: "exit code: the agent's failure of a rank that exited 0 is 1", steps: []sstep{
			{ev: event{kind: evExited, agent: 0, rank: 0, exit: &proto.Exit{Failure: "without MPI_Finalize"}, text: "no finalize"}, want: bothStop},
		}, wantCode: 1, wantFailure: "no finalize", notDone: true},
		{name: "silent host: reported, killed, and the job ends without it", steps: []sstep{
			{ev: exited(0, 0, 1), want: bothStop},
			{at: 100 * time.Millisecond, ev: clockAns(0, 0)},
			{at: 200 * time.Millisecond, ev: exited(0, 1, 143)},
			{at: 300 * time.Millisecond, ev: doneEv(0), want: []string{"close 0"}},
			{at: 1999 * time.Millisecond, ev: tick()},
			{at: 2 * time.Second, ev: tick(), want: []string{"kill 1", "print: h2 unreachable: no word from its agent within 2s of the stop"}},
			// Its stream ends when the kill lands: nothing more to do.
			{at: 2100 * time.Millisecond, ev: lost(1)},
		}, wantCode: 1, wantFailure: "rank 0 exited with code 1"},
		{name: "a host that answers is not silent, however long its ranks take", steps: []sstep{
			{ev: exited(0, 0, 1), want: bothStop},
			{at: time.Second, ev: heard(1)}, {at: time.Second, ev: started(0, 1)},
			{at: 2 * time.Second, ev: tick()},
			{at: 15 * time.Second, ev: tick(), want: []string{"kill 0", "kill 1"}},
		}, wantCode: 1, wantFailure: "rank 0 exited", notDone: true},
		{name: "what an agent said before the stop does not count", steps: []sstep{
			{ev: heard(1)},
			{at: time.Second, ev: exited(0, 0, 1), want: bothStop},
			{at: 3 * time.Second, ev: tick(), want: []string{"kill 0", "print: h1 unreachable", "kill 1", "print: h2 unreachable"}},
		}, wantCode: 1, wantFailure: "rank 0 exited"},
		{name: "silent host on the way to success fails the job naming it", steps: []sstep{
			{ev: exited(0, 0, 0)}, {ev: exited(0, 1, 0)}, {ev: exited(1, 2, 0)},
			{ev: exited(1, 3, 0), want: bothStop},
			{ev: doneEv(0), want: []string{"close 0"}},
			// h2's ranks have all exited: only its goodbye is missing.
			{at: 2 * time.Second, ev: tick(), want: []string{"kill 1", "print: h2 unreachable"}},
		}},
		{name: "silent host with live ranks fails a job that had not failed", cfg: func(c *supervisorConfig) {
			c.Hubs = 1
			c.Agents[1].Ranks = append(c.Agents[1].Ranks, 4)
		}, steps: []sstep{
			{ev: exited(0, 0, 0)}, {ev: exited(0, 1, 0)}, {ev: exited(1, 2, 0)},
			{ev: exited(1, 3, 0), want: bothStop}, // the hub is told to stop
			{ev: doneEv(0), want: []string{"close 0"}},
			{at: 2 * time.Second, ev: tick(), want: []string{"kill 1"}},
		}, wantCode: ExitAgentLost, wantFailure: "h2 unreachable"},
		{name: "AgentWait 0: no pings, silent hosts wait for the hard stop", cfg: func(c *supervisorConfig) { c.AgentWait = 0 }, steps: []sstep{
			{ev: exited(0, 0, 1), want: []string{"terminate 0 TERM", "terminate 1 TERM"}},
			{at: 5 * time.Second, ev: tick()},
			{at: 15 * time.Second, ev: tick(), want: []string{"kill 0", "kill 1"}},
			{ev: lost(0)}, {ev: lost(1)},
		}, wantCode: 1, wantFailure: "rank 0 exited"},
		{name: "lost agent with running ranks", steps: []sstep{
			{ev: lost(1), want: []string{"terminate 0 TERM", "clock 0"}},
			{ev: exited(0, 0, 143)}, {ev: exited(0, 1, 143)},
			{ev: doneEv(0), want: []string{"close 0"}},
		}, wantCode: ExitAgentLost, wantFailure: "lost the agent on h2"},
		{name: "agent gone after its ranks exited is fine", steps: []sstep{
			{ev: exited(1, 2, 0)}, {ev: exited(1, 3, 0)}, {ev: lost(1)},
			{ev: exited(0, 0, 0)}, {ev: exited(0, 1, 0), want: []string{"terminate 0 TERM", "clock 0"}},
			{ev: doneEv(0), want: []string{"close 0"}},
		}},
		{name: "agent error", steps: []sstep{
			{ev: event{kind: evAgentError, agent: 1, text: "h2: agent: no PMI"}, want: bothStop},
		}, wantCode: ExitAgentLost, wantFailure: "no PMI", notDone: true},
		{name: "MPI_Abort sets the code", steps: []sstep{
			{ev: event{kind: evFailed, agent: 0, code: 7, text: "rank 1 called MPI_Abort"}, want: bothStop},
			{ev: exited(0, 1, 7)},
		}, wantCode: 7, wantFailure: "MPI_Abort", notDone: true},
		{name: "ctrl-c forwarded, the second kills", steps: []sstep{
			{ev: signal(syscall.SIGINT), want: []string{"terminate 0 INT", "terminate 1 INT", "clock 0", "clock 1"}},
			{ev: signal(syscall.SIGINT), want: []string{"terminate 0 KILL", "terminate 1 KILL"}},
			{ev: signal(syscall.SIGINT)},
		}, wantCode: 130, wantFailure: "received interrupt", notDone: true},
		{name: "second ctrl-c: Go ranks dump first, then SIGKILL", steps: []sstep{
			{ev: declared(0, 0)},
			{ev: signal(syscall.SIGINT), want: []string{"terminate 0 INT", "terminate 1 INT", "clock 0", "clock 1"}},
			{ev: heard(0)}, {ev: heard(1)},
			{at: time.Second, ev: signal(syscall.SIGINT), want: []string{"dump 0", "dump 1"}},
			{at: 2 * time.Second, ev: tick()},
			{at: 3 * time.Second, ev: tick(), want: []string{"terminate 0 KILL", "terminate 1 KILL"}},
		}, wantCode: 130, wantFailure: "received interrupt", notDone: true},
		{name: "timeout", cfg: func(c *supervisorConfig) { c.Timeout = time.Minute }, steps: []sstep{
			{ev: event{kind: evStart}},
			{at: 59 * time.Second, ev: tick()},
			{at: time.Minute, ev: tick(), want: bothStop},
		}, wantCode: ExitTimeout, wantFailure: "timed out after 1m0s", notDone: true},
		{name: "timeout with Go ranks: dumps first, exits meanwhile do not stop the job", cfg: func(c *supervisorConfig) { c.Timeout = time.Minute }, steps: []sstep{
			{ev: event{kind: evStart}},
			{ev: declared(1, 2)},
			{at: time.Minute, ev: tick(), want: []string{"dump 0", "dump 1"}},
			{at: time.Minute + time.Second, ev: exited(1, 2, 2)},
			{at: time.Minute + 2*time.Second, ev: tick(), want: bothStop},
		}, wantCode: ExitTimeout, wantFailure: "timed out", notDone: true},
		{name: "a Go rank that exited cannot dump", cfg: func(c *supervisorConfig) { c.Timeout = time.Minute }, steps: []sstep{
			{ev: event{kind: evStart}},
			{ev: declared(1, 2)}, {ev: exited(1, 2, 0)},
			{at: time.Minute, ev: tick(), want: bothStop},
		}, wantCode: ExitTimeout, wantFailure: "timed out", notDone: true},
		{name: "stall warning is printed, the abort stops the job", steps: []sstep{
			{ev: event{kind: evStall, text: "rank 1 waits in all-reduce #3"}, want: []string{"print: stall: rank 1 waits"}},
			{ev: event{kind: evStall, abort: true, text: "stalled for 10s"}, want: bothStop},
		}, wantCode: ExitTimeout, wantFailure: "stalled for 10s", notDone: true},
		{name: "cancelled context", steps: []sstep{
			{ev: event{kind: evCancelled, text: "context canceled"}, want: bothStop},
		}, wantCode: ExitTimeout, wantFailure: "cancelled: context canceled", notDone: true},
		{name: "timeline: clocks probed at the start, a ping in between does not confuse them", cfg: func(c *supervisorConfig) { c.Timeline = true }, steps: []sstep{
			{ev: event{kind: evStart}, want: []string{"clock 0", "clock 1"}},
			{at: 10 * time.Millisecond, ev: clockAns(0, 0), want: []string{"clock 0"}},
			{at: 10 * time.Millisecond, ev: exited(1, 2, 1), want: bothStop},
			{at: 20 * time.Millisecond, ev: clockAns(0, 0), want: []string{"clock 0"}}, // the probe's answer
			{at: 20 * time.Millisecond, ev: clockAns(0, 0)},                            // the ping's
			{at: 30 * time.Millisecond, ev: clockAns(0, 0), want: []string{"clock 0"}},
		}, wantCode: 1, wantFailure: "rank 2 exited", notDone: true},
		{name: "elastic: a death, a view to both hosts; then one host's ranks are done", cfg: ring(1), steps: []sstep{
			{ev: exited(1, 2, 7), want: []string{"print: rank 2 exited with code 7; --elastic: the job goes on with 3 ranks (view 1)", "tell 0 view 1 0,1,3", "tell 1 view 1 0,1,3"}},
			{ev: exited(1, 3, 0)}, // finished: no view
			{ev: doneEv(1), want: []string{"close 1"}},
			{ev: exited(0, 0, 0)},
			{ev: exited(0, 1, 0), want: []string{"terminate 0 TERM", "clock 0"}},
			{ev: doneEv(0), want: []string{"close 0"}},
		}},
		{name: "elastic: a suspect fences the rank on its own host; its exit makes the view", cfg: ring(1), steps: []sstep{
			{ev: suspects(0, 1, 3), want: []string{"print: rank 1 suspects rank 3 (frozen); --elastic: fenced it", "signal 1 rank 3 KILL"}},
			{ev: suspects(1, 2, 3)},
			{ev: event{kind: evExited, agent: 1, rank: 3, exit: &proto.Exit{Code: -1, Signal: 9}, text: "rank 3 was killed by signal 9"},
				want: []string{"print: rank 3 was killed by signal 9; --elastic: the job goes on with 3 ranks (view 1)", "tell 0 view 1 0,1,2", "tell 1 view 1 0,1,2"}},
			{ev: suspects(0, 0, 3)},
			{ev: exited(0, 0, 0)},
			{ev: exited(0, 1, 0)},
			{ev: exited(1, 2, 0), want: bothStop},
			{ev: doneEv(0), want: []string{"close 0"}}, {ev: doneEv(1), want: []string{"close 1"}},
		}},
		{name: "elastic: a lost host is a loss of its ranks; the other host gets the view", cfg: ring(1), steps: []sstep{
			{ev: exited(1, 3, 0)},
			{ev: lost(1), want: []string{"print: lost the agent on h2; --elastic: its ranks [2] are lost, the job goes on with 2 ranks (view 1)", "tell 0 view 1 0,1"}},
			{ev: exited(0, 0, 0)},
			{ev: exited(0, 1, 0), want: []string{"terminate 0 TERM", "clock 0"}},
			{ev: doneEv(0), want: []string{"close 0"}},
		}},
		{name: "elastic: below --min-np the job fails as before", cfg: ring(4), steps: []sstep{
			{ev: exited(1, 2, 7), want: bothStop},
		}, wantCode: 7, wantFailure: "rank 2 exited with code 7; --elastic: 3 rank(s) left, below --min-np 4", notDone: true},
		{name: "restart: the view to both hosts, then the restart on the rank's own host; its join's view to both", cfg: restarts(1, 2), steps: []sstep{
			{ev: exited(1, 2, 7), want: []string{"print: rank 2 exited with code 7; --elastic: the job goes on with 3 ranks (view 1); restarting it (restart 1 of 2)",
				"tell 0 view 1 0,1,3", "tell 1 view 1 0,1,3", "restart 1 rank 2 #1 view 1 0,1,3"}},
			{ev: started(1, 2)}, // the restarted process
			{ev: joins(1, 2), want: []string{"print: rank 2 joined (restart 1, at 10.0.0.3:4021); --elastic: the job goes on with 4 ranks (view 2)",
				"tell 0 view 2 0,1,2,3 +2 10.0.0.3:4021 h2/1", "tell 1 view 2 0,1,2,3 +2 10.0.0.3:4021 h2/1"}},
			{ev: joins(1, 2), want: []string{"print: rank 2 said join, but it is not a restarted rank waiting to join; ignored"}},
			{ev: exited(0, 0, 0)}, {ev: exited(0, 1, 0)}, {ev: exited(1, 2, 0)},
			{ev: exited(1, 3, 0), want: bothStop},
			{ev: doneEv(0), want: []string{"close 0"}}, {ev: doneEv(1), want: []string{"close 1"}},
		}},
		{name: "restart: a fenced rank is restarted; a restarted rank that dies before it joined is restarted without a view", cfg: restarts(1, 2), steps: []sstep{
			{ev: suspects(0, 1, 3), want: []string{"print: rank 1 suspects rank 3 (frozen); --elastic: fenced it", "signal 1 rank 3 KILL"}},
			{ev: event{kind: evExited, agent: 1, rank: 3, exit: &proto.Exit{Code: -1, Signal: 9}, text: "rank 3 was killed by signal 9"},
				want: []string{"print: rank 3 was killed by signal 9; --elastic: the job goes on with 3 ranks (view 1); restarting it (restart 1 of 2)",
					"tell 0 view 1 0,1,2", "tell 1 view 1 0,1,2", "restart 1 rank 3 #1 view 1 0,1,2"}},
			{ev: exited(1, 3, 1), want: []string{"print: rank 3 exited with code 1; --elastic: it had not joined (restart 1); restarting it (restart 2 of 2)", "restart 1 rank 3 #2 view 1 0,1,2"}},
			{ev: exited(1, 3, 1), want: []string{"print: rank 3 exited with code 1; --elastic: it had not joined (restart 2); not restarted: it was restarted 2 time(s) (--max-restarts 2)"}},
			{ev: exited(0, 0, 0)}, {ev: exited(0, 1, 0)},
			{ev: exited(1, 2, 0), want: bothStop},
		}, notDone: true},
		{name: "restart: a lost host restarts nothing; its rank waiting to join is lost with it", cfg: restarts(1, 2), steps: []sstep{
			{ev: exited(0, 1, 7), want: []string{"print: rank 1 exited with code 7; --elastic: the job goes on with 3 ranks (view 1); restarting it (restart 1 of 2)",
				"tell 0 view 1 0,2,3", "tell 1 view 1 0,2,3", "restart 0 rank 1 #1 view 1 0,2,3"}},
			{ev: lost(0), want: []string{"print: lost the agent on h1; --elastic: its ranks [0 1] are lost, the job goes on with 2 ranks (view 2)", "tell 1 view 2 2,3"}},
			{ev: exited(1, 2, 9), want: []string{"print: rank 2 exited with code 9; --elastic: the job goes on with 1 ranks (view 3); restarting it (restart 1 of 2)", "tell 1 view 3 3", "restart 1 rank 2 #1 view 3 3"}},
			{ev: joins(0, 1), want: []string{"print: rank 1 said join, but it is not a restarted rank waiting to join; ignored"}}, // lost with its host
			{ev: joins(1, 2), want: []string{"print: rank 2 joined", "tell 1 view 4 2,3 +2 10.0.0.3:4021 h2/1"}},
			{ev: exited(1, 2, 0)}, {ev: exited(1, 3, 0), want: []string{"terminate 1 TERM", "clock 1"}},
			{ev: doneEv(1), want: []string{"close 1"}},
		}, wantCode: 0},
		{name: "restart: an agent done with a rank to restart (it waits for restarts: not seen) counts it lost", cfg: restarts(1, 2), steps: []sstep{
			{ev: exited(1, 3, 0)},
			{ev: exited(1, 2, 7), want: []string{"print: rank 2 exited", "tell 0 view 1 0,1", "tell 1 view 1 0,1", "restart 1 rank 2 #1 view 1 0,1"}},
			{ev: doneEv(1), want: []string{"close 1", "print: the agent on h2 finished while rank(s) [2] were to run; --elastic: its restarted rank(s) [2], which had not joined, are lost"}},
			{ev: exited(0, 0, 0)}, {ev: exited(0, 1, 0), want: []string{"terminate 0 TERM", "clock 0"}},
			{ev: doneEv(0), want: []string{"close 0"}},
		}},
		{name: "restart: a restarted rank that has not joined within JoinWait (frozen: no rank suspects it) is killed, and restarted again", cfg: restarts(1, 2), steps: []sstep{
			{ev: exited(1, 2, 7), want: []string{"print: rank 2 exited", "tell 0 view 1 0,1,3", "tell 1 view 1 0,1,3", "restart 1 rank 2 #1 view 1 0,1,3"}},
			{at: 29 * time.Second, ev: tick()},
			{at: 30 * time.Second, ev: tick(), want: []string{"print: rank 2 has not joined 30s after its restart 1 (frozen?); --elastic: killed it", "signal 1 rank 2 KILL"}},
			{at: 30 * time.Second, ev: event{kind: evExited, agent: 1, rank: 2, exit: &proto.Exit{Code: -1, Signal: 9}, text: "rank 2 was killed by signal 9"},
				want: []string{"print: rank 2 was killed by signal 9; --elastic: it had not joined (restart 1); restarting it (restart 2 of 2)", "restart 1 rank 2 #2 view 1 0,1,3"}},
			{at: 31 * time.Second, ev: joins(1, 2), want: []string{"print: rank 2 joined", "tell 0 view 2 0,1,2,3 +2 10.0.0.3:4021 h2/1", "tell 1 view 2 0,1,2,3 +2 10.0.0.3:4021 h2/1"}},
			{at: 70 * time.Second, ev: tick()}, // joined: no kill
			{at: 70 * time.Second, ev: exited(0, 0, 0)}, {at: 70 * time.Second, ev: exited(0, 1, 0)}, {at: 70 * time.Second, ev: exited(1, 2, 0)},
			{at: 70 * time.Second, ev: exited(1, 3, 0), want: bothStop},
			{at: 70 * time.Second, ev: doneEv(0), want: []string{"close 0"}}, {at: 70 * time.Second, ev: doneEv(1), want: []string{"close 1"}},
		}},
		{name: "restart: once the others finished, a rank waiting to join is stopped", cfg: restarts(1, 1), steps: []sstep{
			{ev: exited(1, 2, 7), want: []string{"print: rank 2 exited", "tell 0 view 1 0,1,3", "tell 1 view 1 0,1,3", "restart 1 rank 2 #1 view 1 0,1,3"}},
			{ev: exited(0, 0, 0)}, {ev: exited(0, 1, 0)},
			{ev: exited(1, 3, 0), want: append([]string{"print: every rank of view 1 finished; --elastic: stopping restarted rank(s) [2], which had not joined"}, bothStop...)},
			{ev: exited(1, 2, 143)},
			{ev: doneEv(0), want: []string{"close 0"}}, {ev: doneEv(1), want: []string{"close 1"}},
		}},
		{name: "restart: a lost host's ranks move to the freest live host; fences, views and the end of that agent follow them", cfg: threeHosts, steps: []sstep{
			{ev: lost(1), want: []string{"print: lost the agent on h2; --elastic: its ranks [2 3] are lost, the job goes on with 3 ranks (view 1); rank 2: its host is gone: restarting it on h3 (restart 1 of 1); rank 3: its host is gone: restarting it on h3 (restart 1 of 1)",
				"tell 0 view 1 0,1,4", "tell 2 view 1 0,1,4", "restart 2 rank 2 #1 view 1 0,1,4 as 1/2 node 2", "restart 2 rank 3 #1 view 1 0,1,4 as 2/3 node 2"}},
			{ev: started(2, 2)}, {ev: started(2, 3)},
			{ev: joins(2, 2), want: []string{"print: rank 2 joined", "tell 0 view 2 0,1,2,4 +2 10.0.0.3:4021 h2/1", "tell 2 view 2 0,1,2,4 +2 10.0.0.3:4021 h2/1"}},
			// Its fence goes to its new agent, and its exit there is its own.
			{ev: suspects(0, 0, 2), want: []string{"print: rank 0 suspects rank 2 (frozen); --elastic: fenced it", "signal 2 rank 2 KILL"}},
			{ev: event{kind: evExited, agent: 2, rank: 2, exit: &proto.Exit{Code: -1, Signal: 9}, text: "rank 2 was killed by signal 9"},
				want: []string{"print: rank 2 was killed by signal 9; --elastic: the job goes on with 3 ranks (view 3); not restarted: it was restarted 1 time(s)", "tell 0 view 3 0,1,4", "tell 2 view 3 0,1,4"}},
			{ev: exited(2, 4, 0)},
			// Its new agent done while rank 3 was to run: rank 3 is lost with it.
			{ev: doneEv(2), want: []string{"close 2", "print: the agent on h3 finished while rank(s) [3] were to run; --elastic: its restarted rank(s) [3], which had not joined, are lost; rank 3: not restarted"}},
			{ev: exited(0, 0, 0)}, {ev: exited(0, 1, 0), want: []string{"terminate 0 TERM", "clock 0"}},
			{ev: doneEv(0), want: []string{"close 0"}},
		}},
		{name: "restart: a lost host's ranks with no free slot are lost", cfg: func(c *supervisorConfig) {
			threeHosts(c)
			c.Agents[2].Slots = 1
		}, steps: []sstep{
			{ev: lost(1), want: []string{"print: lost the agent on h2; --elastic: its ranks [2 3] are lost, the job goes on with 3 ranks (view 1); rank 2: its host is gone, and no other host has a free slot: not restarted; rank 3: its host is gone, and no other host has a free slot: not restarted",
				"tell 0 view 1 0,1,4", "tell 2 view 1 0,1,4"}},
			{ev: exited(0, 0, 0)}, {ev: exited(0, 1, 0)}, {ev: exited(2, 4, 0), want: []string{"terminate 0 TERM", "terminate 2 TERM", "clock 0", "clock 2"}},
			{ev: doneEv(0), want: []string{"close 0"}}, {ev: doneEv(2), want: []string{"close 2"}},
		}},
		{name: "restart: below --min-np the job fails without a restart", cfg: restarts(4, 3), steps: []sstep{
			{ev: exited(1, 2, 7), want: bothStop},
		}, wantCode: 7, wantFailure: "below --min-np 4", notDone: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			s := newSupervisor(cfg, t0)
			for i, st := range tc.steps {
				st.ev.now = t0.Add(st.at)
				var got []string
				for _, a := range s.step(st.ev) {
					got = append(got, show(a))
				}
				if !matchActions(got, st.want) {
					t.Fatalf("step %d (event %d at %v): actions\n  %q\nwant\n  %q", i, st.ev.kind, st.at, got, st.want)
				}
			}
			if s.finished() == tc.notDone {
				t.Fatalf("finished %v, want %v", s.finished(), !tc.notDone)
			}
			code, failure, _ := s.result()
			if code != tc.wantCode || (tc.wantFailure == "") != (failure == "") || !strings.Contains(failure, tc.wantFailure) {
				t.Fatalf("result %d %q, want %d %q", code, failure, tc.wantCode, tc.wantFailure)
			}
		})
	}
}

// ring makes the job --elastic (the ring) with --min-np minNP.
func ring(minNP int) func(*supervisorConfig) {
	return func(c *supervisorConfig) { c.Elastic, c.MinNP = ringElastic, minNP }
}

// threeHosts: --elastic, --max-restarts 1, 5 ranks: h1 has 0 and 1 in
// 2 slots, h2 2 and 3 in 2, h3 4 in 3 (2 free).
func threeHosts(c *supervisorConfig) {
	c.NP, c.Elastic, c.MinNP, c.MaxRestarts = 5, ringElastic, 1, 1
	c.Agents = []supervisedAgent{{Name: "h1", Ranks: []int{0, 1}, Slots: 2}, {Name: "h2", Ranks: []int{2, 3}, Slots: 2, NodeRank: 1}, {Name: "h3", Ranks: []int{4}, Slots: 3, NodeRank: 2}}
}

// restarts makes the job --elastic (the ring) with --min-np minNP and
// --max-restarts max.
func restarts(minNP, max int) func(*supervisorConfig) {
	return func(c *supervisorConfig) { c.Elastic, c.MinNP, c.MaxRestarts = ringElastic, minNP, max }
}

func matchActions(got, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if !strings.HasPrefix(got[i], want[i]) {
			return false
		}
	}
	return true
}

// TestSupervisorDeadlines: next is the earliest deadline armed, and a
// deadline fires once.
func TestSupervisorDeadlines(t *testing.T) {
	cfg := testConfig()
	cfg.Timeout = time.Minute
	s := newSupervisor(cfg, t0)
	if !s.next().IsZero() {
		t.Fatalf("deadline %v before the start", s.next())
	}
	s.step(event{kind: evStart, now: t0})
	if want := t0.Add(time.Minute); !s.next().Equal(want) {
		t.Fatalf("next %v, want the timeout %v", s.next(), want)
	}
	s.step(event{kind: evExited, now: t0.Add(time.Second), agent: 0, rank: 0, exit: &proto.Exit{Code: 1}})
	if want := t0.Add(3 * time.Second); !s.next().Equal(want) {
		t.Fatalf("next %v, want the silence deadline %v", s.next(), want)
	}
	s.step(event{kind: evHeard, now: t0.Add(2 * time.Second), agent: 0})
	s.step(event{kind: evHeard, now: t0.Add(2 * time.Second), agent: 1})
	if acts := s.step(event{kind: evTick, now: t0.Add(3 * time.Second)}); len(acts) != 0 {
		t.Fatalf("agents that answered: %v", acts)
	}
	if want := t0.Add(16 * time.Second); !s.next().Equal(want) {
		t.Fatalf("next %v, want the hard stop %v (grace + %v after the stop)", s.next(), want, hardStopMargin)
	}
	if acts := s.step(event{kind: evTick, now: t0.Add(16 * time.Second)}); len(acts) != 2 {
		t.Fatalf("hard stop: %v", acts)
	}
	if acts := s.step(event{kind: evTick, now: t0.Add(time.Hour)}); len(acts) != 0 || !s.next().IsZero() {
		t.Fatalf("after every deadline: %v, next %v", acts, s.next())
	}
}

// TestClockProbe: the fastest round trip wins, and an agent's clock is
// probed clockProbes times.
func TestClockProbe(t *testing.T) {
	cfg := testConfig()
	cfg.Timeline = true
	s := newSupervisor(cfg, t0)
	s.step(event{kind: evStart, now: t0})
	// Agent 0's clock runs 5 s ahead; the third round trip is the fastest.
	now := t0
	for i, rtt := range []time.Duration{40, 20, 4, 30, 10} {
		rtt *= time.Millisecond
		sent := now
		now = now.Add(rtt)
		acts := s.step(event{kind: evClock, now: now, agent: 0, clock: sent.Add(rtt / 2).Add(5 * time.Second).UnixNano()})
		if again := len(acts) == 1; again != (i < clockProbes-1) {
			t.Fatalf("probe %d: %v", i, acts)
		}
	}
	p := s.agents[0].probe
	if !p.ok || p.offset != 5*time.Second || p.err != 2*time.Millisecond {
		t.Fatalf("probe %+v, want offset 5s within 2ms", p)
	}
}

func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		ex   *proto.Exit
		want int
	}{
		{&proto.Exit{}, 0},
		{&proto.Exit{Code: 3}, 3},
		{&proto.Exit{Code: -1, Signal: 15}, 143},
		{&proto.Exit{Failure: "PMI: bad command"}, 1},
		{&proto.Exit{Code: -1, Signal: 9, Failure: "PMI: bad command"}, 1},
		{&proto.Exit{Code: 5, Failure: "no finalize"}, 5},
		{nil, 1},
	} {
		if got := exitCode(tc.ex); got != tc.want {
			t.Errorf("exitCode(%+v) = %d, want %d", tc.ex, got, tc.want)
		}
	}
}
