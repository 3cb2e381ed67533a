// Package membership finds a job's ranks by gossip and watches them, using
// hashicorp/memberlist. It is the only package that imports memberlist;
// the rest of gorun sees three callbacks (Events: a rank dead, left, or
// alive again after it was declared dead).
//
// Every rank runs a member named "<job>-<rank>", labelled with the job id
// and encrypted with a key derived from the job secret, so neither another
// job nor an outsider can join. A member's metadata carries its rank and
// its data-plane address. The timers are tuned so that a silent peer
// (stopped, or cut off) is declared dead in about two seconds on a LAN;
// the transport then confirms the verdict with a ping. A verdict
// the transport refutes leaves gossip split; a member heals that by
// joining the ranks gossip holds dead, one at a time (reconnect.go), and
// says when gossip holds such a rank alive again (Events.Alive): until
// then the transport keeps checking it, for gossip declares a rank dead
// only once.
package membership

import (
	"errors"
	"fmt"
	"log"
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/memberlist"
)

// Member is this rank's place in the job's gossip group.
type Member struct {
	cfg  Config
	ml   *memberlist.Memberlist
	log  *slog.Logger
	meta []byte

	mu      sync.Mutex
	peers   map[int]Peer            // rank -> data address and host
	leaving map[int]bool            // ranks that said goodbye before leaving
	nodes   map[int]memberlist.Node // rank -> a copy of its node (name and address)
	dead    map[int]deadRank        // ranks gossip holds dead (not left), for reconnect
	joined  chan struct{}           // signalled on every join
	ev      Events
	byes    *memberlist.TransmitLimitedQueue // goodbyes to gossip on
	// tree is every rank's parent in the start's join tree (-1: the
	// root), made on first use; see joinTree.
	tree []int
	// joins are the joins WaitFor started in the background (a join may
	// outlast the WaitFor that started it); Close waits for them. done
	// is closed by Close (under mu: no join starts after it).
	joins sync.WaitGroup
	done  chan struct{}

	closeOnce sync.Once
}

// Start creates the member and starts listening. It does not join yet.
func Start(cfg Config, ev Events) (*Member, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m := &Member{cfg: cfg, log: logger, peers: map[int]Peer{}, leaving: map[int]bool{}, nodes: map[int]memberlist.Node{}, dead: map[int]deadRank{}, joined: make(chan struct{}, 1), ev: ev, done: make(chan struct{})}
	m.meta = encodeMeta(cfg.Rank, cfg.DataAddr, cfg.Host)
	if len(m.meta) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("membership: rank %d: data address and host of %d bytes exceed memberlist's %d", cfg.Rank, len(m.meta), memberlist.MetaMaxSize)
	}

	mc := cfg.memberlistConfig()
	mc.Delegate = (*delegate)(m)
	mc.Events = (*events)(m)
	mc.Logger = log.New(&logWriter{log: logger}, "", 0)
	m.byes = &memberlist.TransmitLimitedQueue{RetransmitMult: 3, NumNodes: func() int {
		m.mu.Lock()
		defer m.mu.Unlock()
		return max(1, len(m.peers))
	}}
	if cfg.wrapNet != nil {
		nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{mc.BindAddr}, BindPort: mc.BindPort, Logger: mc.Logger})
		if err != nil {
			return nil, fmt.Errorf("membership: rank %d: %w", cfg.Rank, err)
		}
		mc.BindPort, mc.AdvertisePort = nt.GetAutoBindPort(), nt.GetAutoBindPort()
		mc.Transport = cfg.wrapNet(nt)
	}
	ml, err := memberlist.Create(mc)
	if err != nil && cfg.BindPort != 0 && (errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "address already in use")) {
		// The launcher reserved the port, but another socket took it
		// before this rank bound it (ports are checked, not held). The
		// port is only where peers first look: listen on one the kernel
		// picks and let gossip tell them, as this rank joins them.
		logger.Warn("gossip port taken; listening on another", "rank", cfg.Rank, "port", cfg.BindPort, "err", err)
		mc.BindPort, mc.AdvertisePort = 0, 0
		ml, err = memberlist.Create(mc)
	}
	if err != nil {
		return nil, fmt.Errorf("membership: rank %d: %w", cfg.Rank, err)
	}
	m.ml = ml
	m.joins.Add(1)
	go m.reconnect()
	return m, nil
}

// Port is the port the member listens on.
func (m *Member) Port() int { return int(m.ml.LocalNode().Port) }

// Peer is what gossip says of a rank.
type Peer struct {
	Data string // its data-plane address
	Host string // its host, as it published it
}

// Close leaves the group (so the others see a clean departure) and shuts
// the member down. It is idempotent.
func (m *Member) Close() error {
	var err error
	m.closeOnce.Do(func() {
		m.mu.Lock()
		close(m.done)
		m.mu.Unlock()
		m.sayGoodbye(500 * time.Millisecond)
		// Give gossip a moment to carry the goodbye on. memberlist's own
		// leave waits for its broadcast to go out, which, when every
		// rank leaves at once, never happens: the goodbye does its job.
		time.Sleep(leaveLinger)
		err = m.ml.Leave(leaveLinger)
		if err != nil && strings.Contains(err.Error(), "timeout") {
			err = nil
		}
		if serr := m.ml.Shutdown(); err == nil {
			err = serr
		}
		// A join WaitFor left under way ends within its stream timeouts.
		m.joins.Wait()
	})
	return err
}
