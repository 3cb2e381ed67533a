package membership

import (
	"net"
	"strconv"
	"time"

	"github.com/hashicorp/memberlist"
)

// Events are called when a member goes away. They may be called from
// memberlist's goroutines and must not block.
type Events struct {
	// Dead: rank stopped answering or vanished.
	Dead func(rank int, reason string)
	// Left: rank left cleanly.
	Left func(rank int)
	// Alive: a rank gossip had declared dead is alive again (its process
	// refuted the verdict, or a new one joined under its name).
	Alive func(rank int)
}

// events is the Member as memberlist's EventDelegate: a join makes a
// rank known; a leave is a clean departure or a death.
type events Member

func (e *events) NotifyJoin(n *memberlist.Node) {
	m := (*Member)(e)
	r, p, ok := parseMeta(n.Meta)
	if !ok || r >= m.cfg.Size || n.Name != m.cfg.JobID+"-"+strconv.Itoa(r) {
		m.log.Warn("ignoring a member with bad metadata", "name", n.Name)
		return
	}
	m.mu.Lock()
	m.peers[r] = p
	m.nodes[r] = memberlist.Node{Name: n.Name, Addr: append(net.IP(nil), n.Addr...), Port: n.Port}
	_, wasDead := m.dead[r]
	delete(m.dead, r)
	m.mu.Unlock()
	if wasDead && m.ev.Alive != nil {
		m.ev.Alive(r)
	}
	select {
	case m.joined <- struct{}{}:
	default:
	}
}

func (e *events) NotifyLeave(n *memberlist.Node) {
	m := (*Member)(e)
	r, _, ok := parseMeta(n.Meta)
	if !ok || r == m.cfg.Rank {
		return
	}
	m.mu.Lock()
	left := m.leaving[r]
	if left {
		delete(m.dead, r)
	} else if _, ok := m.nodes[r]; ok {
		m.dead[r] = deadRank{due: time.Now().Add(reconnectAfter), pause: reconnectAfter}
	}
	m.mu.Unlock()
	if left {
		if m.ev.Left != nil {
			m.ev.Left(r)
		}
		return
	}
	if m.ev.Dead != nil {
		m.ev.Dead(r, "declared dead by gossip (no answer to probes)")
	}
}

func (e *events) NotifyUpdate(*memberlist.Node) {}
