package liveness_test

import (
	"fmt"
	"time"

	"github.com/gorun/gorun/transport/liveness"
)

// A rank (0 of 4) connected to rank 1 hears from gossip that rank 1 is
// dead. The machine pings it, asks for its reader's progress and, with no
// pong a quarter of the way into the window, knocks (a probe: does its
// process answer a connection at all?); rank 1 sends
// nothing, does not answer the ping for a window, and its process does
// not answer the knock, so it is lost, and the job with it. The owner
// would write the ping, answer the Sample from its reader's counters,
// dial for the probe, and step a Tick at Deadline.
func Example() {
	cfg := liveness.DefaultConfig()
	cfg.Rank, cfg.Size = 0, 4
	m, err := liveness.New(cfg)
	if err != nil {
		panic(err)
	}
	start := time.Unix(1_000_000, 0)
	show := func(acts []liveness.Action) {
		for _, a := range acts {
			fmt.Println(a)
		}
	}
	m.Step(start, liveness.Connected{Peer: 1, Gen: m.Gen(1), Conn: 1})
	show(m.Step(start, liveness.Verdict{Peer: 1, Reason: "declared dead by gossip (no answer to probes)"}))
	show(m.Step(start, liveness.Progress{Peer: 1, Conn: 1, Reads: 42}))
	knock, _ := m.Deadline()
	fmt.Println("knock in", knock.Sub(start))
	show(m.Step(knock, liveness.Tick{}))
	show(m.Step(knock.Add(500*time.Millisecond), liveness.ProbeDone{Peer: 1, Gen: m.Gen(1), Seq: 1, Answered: false}))
	at, _ := m.Deadline()
	fmt.Println("deadline in", at.Sub(start))
	show(m.Step(at, liveness.Tick{}))
	show(m.Step(at, liveness.Progress{Peer: 1, Conn: 1, Reads: 42}))
	fmt.Println(m.Status(1), m.Lost()[1])
	// Output:
	// ping 1 c1
	// sample 1 c1
	// knock in 250ms
	// knock 1 gen=0 #1 within 500ms
	// deadline in 1s
	// sample 1 c1
	// lost 1 gen=0 fail-job: declared dead by gossip (no answer to probes), and no answer on its data connection for 1s, nor to a connection
	// lost declared dead by gossip (no answer to probes), and no answer on its data connection for 1s, nor to a connection
}
