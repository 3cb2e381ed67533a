package membership

import (
	"encoding/binary"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// leaveLinger is how long a leaving member keeps gossiping.
const leaveLinger = 100 * time.Millisecond

// byeMsg is the user message a member sends every other member, over
// memberlist's encrypted and labelled channel, just before it leaves.
// memberlist hands NotifyLeave a node whose State field is never set
// (it updates a field of its own that shadows it), so a clean leave cannot
// be told from a death without it.
const byeMsg = 'B'

func encodeBye(rank int) []byte {
	return binary.LittleEndian.AppendUint32([]byte{byeMsg}, uint32(rank))
}

// parseBye decodes a goodbye; anything else is not one.
func parseBye(b []byte) (int, bool) {
	if len(b) != 5 || b[0] != byeMsg {
		return 0, false
	}
	return int(binary.LittleEndian.Uint32(b[1:])), true
}

// byeFanout is how many members a leaving rank tells directly; they pass
// it on by gossip.
const byeFanout = 3

// sayGoodbye tells a few other members, at once, that this rank is
// leaving cleanly; every member that hears it gossips it on (see
// NotifyMsg), so it reaches the job in a few gossip rounds at a cost per
// rank that does not grow with the job. It gives up after d.
func (m *Member) sayGoodbye(d time.Duration) {
	msg := encodeBye(m.cfg.Rank)
	done := make(chan struct{})
	var wg sync.WaitGroup
	// The copies NotifyJoin took: memberlist's own nodes change under it.
	m.mu.Lock()
	nodes := make([]memberlist.Node, 0, len(m.nodes))
	for r, n := range m.nodes {
		if r != m.cfg.Rank && !m.leaving[r] {
			nodes = append(nodes, n)
		}
	}
	m.mu.Unlock()
	rand.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
	for _, n := range nodes[:min(byeFanout, len(nodes))] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = m.ml.SendReliable(&n, msg)
		}()
	}
	m.byes.QueueBroadcast(bye(msg))
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
	}
}

// bye is a goodbye in memberlist's gossip queue.
type bye []byte

func (b bye) Invalidates(memberlist.Broadcast) bool { return false }
func (b bye) Message() []byte                       { return b }
func (b bye) Finished()                             {}
