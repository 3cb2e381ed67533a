package membership

import (
	"math/rand/v2"
	"net"
	"strconv"
	"time"
)

// Gossip does not heal a partition by itself. Once a cut (a host's link
// down, a switch port flapping) has lasted longer than a verdict, each
// side declares the other dead, and memberlist forgets a dead node once
// GossipToTheDeadTime has passed: no probe, gossip or state exchange
// crosses again, though both sides run and the transport, which checks
// every verdict on the data connection, kept them in the job. A rank
// restarted after that waits for gossip to bring every rank of its view
// and never sees the other side; and gossip would never report a later
// death there. So a member keeps trying to reach the ranks gossip
// declared dead, as serf's reconnector does: every reconnectEvery (give
// or take half; stretched as gossip's timers are) it joins one of them,
// picked at random, dead for at least reconnectAfter. A join is one state
// exchange in which each side learns the other's nodes; to a process that
// is gone it fails at once (refused) or within the stream timeout (a host
// that is gone), one at a time. A rank that left cleanly is not tried.
const (
	reconnectEvery = 2 * time.Second
	reconnectAfter = 2 * time.Second
)

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
		if addr, ok := m.pickDead(time.Now()); ok {
			_, _ = m.ml.Join([]string{addr}) // a failure is the usual answer of the dead
		}
		t.Reset(jitter(every))
	}
}

// pickDead picks, at random, the gossip address of a rank that gossip
// declared dead at least reconnectAfter before now and still holds dead;
// false if there is none.
func (m *Member) pickDead(now time.Time) (string, bool) {
	m.mu.Lock()
	var cands []int
	for r, at := range m.deadAt {
		if now.Sub(at) >= reconnectAfter {
			cands = append(cands, r)
		}
	}
	m.mu.Unlock()
	if len(cands) == 0 {
		return "", false
	}
	live := map[string]bool{}
	for _, n := range m.ml.Members() {
		live[n.Name] = true
	}
	rand.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range cands {
		n, ok := m.nodes[r]
		if _, dead := m.deadAt[r]; !ok || !dead || live[n.Name] {
			continue
		}
		return net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port))), true
	}
	return "", false
}
