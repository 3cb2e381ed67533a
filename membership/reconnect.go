package membership

import (
	"math/rand/v2"
	"net"
	"strconv"
	"time"
)

// Gossip does not heal a split by itself. Once a cut (a host's link down,
// a switch port flapping) has lasted longer than a verdict, each side
// declares the other dead and, after GossipToTheDeadTime, stops gossiping
// to it: no probe or gossip crosses again, though both sides run and the
// transport, which checks every verdict on the data connection, kept them
// in the job. A rank restarted after that waits for gossip to bring every
// rank of its view and never sees the other side, and gossip would not
// report a later death there. So a member keeps trying to reach the ranks
// gossip declared dead, as serf's reconnector does: a state exchange
// (memberlist's Join) with the dead rank's last address, in which each
// side learns the other's nodes. Where a side still remembers the other
// as dead, the first exchange makes each refute the verdict on itself and
// the next brings the refutations across; once memberlist has dropped the
// dead nodes (when its probe round wraps), one exchange does.
//
// The pacing keeps the job's cost flat: every reconnectEvery (give or take
// half, stretched as gossip's timers are) a member tries one rank, picked
// at random among those due, and only with the chance reconnectChance, so
// that the many ranks on the side that holds a rank dead try it about
// twice a round between them while the few on a cut-off side try every
// round. A rank is due reconnectAfter after its verdict, and after each
// try that did not bring it back the pause to its next doubles, up to
// reconnectMax: a process that is gone refuses at once, and a host that is
// gone costs a stream timeout, one try at a time. A rank that left
// cleanly is not tried.
const (
	reconnectEvery = 2 * time.Second
	reconnectAfter = 2 * time.Second
	reconnectMax   = time.Minute
)

// deadRank is a rank gossip holds dead: when it is next due a try, and the
// pause after that.
type deadRank struct {
	due   time.Time
	pause time.Duration
}

// reconnectChance is the chance that a member with alive members alive
// (itself included) tries a reconnect this round: 2/alive, at most 1.
func reconnectChance(alive int) float64 { return min(1, 2/float64(max(alive, 1))) }

// reconnect is the loop described above; it runs until Close.
func (m *Member) reconnect() {
	defer m.joins.Done()
	every := reconnectEvery * gossipStretch(m.cfg.Size)
	t := time.NewTimer(jitter(every))
	defer t.Stop()
	for {
		select {
		case <-m.done:
			return
		case <-t.C:
		}
		t.Reset(jitter(every))
		if rand.Float64() >= reconnectChance(m.ml.NumMembers()) {
			continue
		}
		addr, ok := m.pickDead(time.Now())
		if !ok {
			continue
		}
		select {
		case <-m.done: // Close began: no new exchange
			return
		default:
		}
		_, _ = m.ml.Join([]string{addr}) // a failure is the usual answer of the dead
	}
}

// pickDead picks, at random among the ranks gossip holds dead that are due
// a try at now, the gossip address of one and sets its next try; false if
// none is due.
func (m *Member) pickDead(now time.Time) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var due []int
	for r, d := range m.dead {
		if !now.Before(d.due) {
			due = append(due, r)
		}
	}
	if len(due) == 0 {
		return "", false
	}
	r := due[rand.IntN(len(due))]
	d := m.dead[r]
	d.due, d.pause = now.Add(d.pause), min(2*d.pause, reconnectMax)
	m.dead[r] = d
	n := m.nodes[r]
	return net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port))), true
}
