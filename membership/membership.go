// Package membership finds a job's ranks by gossip and watches them, using
// hashicorp/memberlist. It is the only package that imports memberlist;
// the rest of gorun sees a small "rank lost" callback.
//
// Every rank runs a member named "<job>-<rank>", labelled with the job id
// and encrypted with a key derived from the job secret, so neither another
// job nor an outsider can join. A member's metadata carries its rank and
// its data-plane address. The timers are tuned so that a silent peer
// (stopped, or cut off) is declared dead in one to one and a half seconds
// on a LAN; the transport then confirms the verdict with a ping.
package membership

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/memberlist"
)

// Config configures a member.
type Config struct {
	JobID      string
	Rank, Size int
	Secret     []byte
	// BindAddr and BindPort are where the member listens (TCP and UDP).
	BindAddr string
	BindPort int
	// AdvertiseAddr is the address other ranks reach this one at.
	AdvertiseAddr string
	// Seeds are "host:port" gossip addresses to join. When there are Size
	// of them, Seeds[r] is rank r's, and a rank joins only a few (rank 0
	// and its parent in a binary tree; later, ranks still missing):
	// gossip spreads the rest, so that start costs each rank a few
	// exchanges, not N. Otherwise every one is tried.
	Seeds []string
	// DataAddr is this rank's data-plane address, published to the others.
	DataAddr string
	// Host names this rank's host (a transport's host key), published to
	// the others so that ranks know who shares their host before they
	// connect.
	Host string

	ProbeInterval time.Duration
	ProbeTimeout  time.Duration
	// SuspicionMult scales how long a suspect is given before it is
	// declared dead, in probe intervals.
	SuspicionMult int
	Logger        *slog.Logger
}

// DefaultConfig has timers for a LAN: a silent member is declared dead in
// about two seconds.
func DefaultConfig() Config {
	return Config{
		BindAddr:      "0.0.0.0",
		ProbeInterval: 250 * time.Millisecond,
		ProbeTimeout:  200 * time.Millisecond,
		SuspicionMult: 3,
	}
}

func (c *Config) validate() error {
	switch {
	case c.JobID == "":
		return errors.New("membership: no job id")
	case c.Size < 1 || c.Rank < 0 || c.Rank >= c.Size:
		return fmt.Errorf("membership: rank %d out of range for size %d", c.Rank, c.Size)
	case len(c.Secret) == 0:
		return errors.New("membership: no job secret")
	case c.ProbeInterval <= 0 || c.ProbeTimeout <= 0 || c.SuspicionMult < 1:
		return errors.New("membership: timers must be positive")
	}
	return nil
}

// Events are called when a member goes away. They may be called from
// memberlist's goroutines and must not block.
type Events struct {
	// Dead: rank stopped answering or vanished.
	Dead func(rank int, reason string)
	// Left: rank left cleanly.
	Left func(rank int)
}

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
	joined  chan struct{}           // signalled on every join
	ev      Events
	byes    *memberlist.TransmitLimitedQueue // goodbyes to gossip on

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
	m := &Member{cfg: cfg, log: logger, peers: map[int]Peer{}, leaving: map[int]bool{}, nodes: map[int]memberlist.Node{}, joined: make(chan struct{}, 1), ev: ev}
	m.meta = encodeMeta(cfg.Rank, cfg.DataAddr, cfg.Host)
	if len(m.meta) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("membership: rank %d: data address and host of %d bytes exceed memberlist's %d", cfg.Rank, len(m.meta), memberlist.MetaMaxSize)
	}

	mc := memberlist.DefaultLANConfig()
	mc.Name = cfg.JobID + "-" + strconv.Itoa(cfg.Rank)
	mc.Label = cfg.JobID
	key := sha256.Sum256(append([]byte("gorun membership key\x00"), cfg.Secret...))
	mc.SecretKey = key[:]
	mc.BindAddr = cfg.BindAddr
	mc.BindPort = cfg.BindPort
	mc.AdvertisePort = cfg.BindPort
	if cfg.AdvertiseAddr != "" {
		mc.AdvertiseAddr = cfg.AdvertiseAddr
	}
	mc.ProbeInterval = cfg.ProbeInterval
	mc.ProbeTimeout = cfg.ProbeTimeout
	mc.SuspicionMult = cfg.SuspicionMult
	mc.SuspicionMaxTimeoutMult = 2
	mc.AwarenessMaxMultiplier = 4
	mc.GossipInterval = 50 * time.Millisecond
	mc.GossipToTheDeadTime = 2 * time.Second
	// A rank restarted on another host (gorun --max-restarts) comes back
	// under its name at a new address: once the old one is dead, the new
	// one may take the name at once (gossip is keyed with the job secret,
	// so no outsider can).
	mc.DeadNodeReclaimTime = time.Millisecond
	mc.PushPullInterval = 5 * time.Second
	mc.TCPTimeout = 2 * time.Second
	mc.EnableCompression = false
	mc.Delegate = (*delegate)(m)
	mc.Events = (*events)(m)
	mc.Logger = log.New(&logWriter{log: logger}, "", 0)
	m.byes = &memberlist.TransmitLimitedQueue{RetransmitMult: 3, NumNodes: func() int {
		m.mu.Lock()
		defer m.mu.Unlock()
		return max(1, len(m.peers))
	}}
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
	return m, nil
}

// Port is the port the member listens on.
func (m *Member) Port() int { return int(m.ml.LocalNode().Port) }

// Peer is what gossip says of a rank.
type Peer struct {
	Data string // its data-plane address
	Host string // its host, as it published it
}

// WaitAll joins the seeds (again and again, until it is done; see
// Config.Seeds) and returns every rank's data address and host once all
// Size ranks are members. On timeout it names the ranks that never
// appeared.
func (m *Member) WaitAll(ctx context.Context) ([]Peer, error) { return m.WaitFor(ctx, nil) }

// WaitFor is WaitAll for the given ranks only (nil: every rank), this
// one among them: a rank restarted into a running elastic job waits for
// the ranks of the job's view, not for those lost for good. The result
// has an entry for every rank of the job, empty for those not waited
// for; seeds are picked among the ranks waited for.
func (m *Member) WaitFor(ctx context.Context, ranks []int) ([]Peer, error) {
	rejoin := ranks != nil // WaitAll is the job's start; WaitFor a restart's
	if ranks == nil {
		ranks = make([]int, m.cfg.Size)
		for r := range ranks {
			ranks[r] = r
		}
	}
	for _, r := range ranks {
		if r < 0 || r >= m.cfg.Size {
			return nil, fmt.Errorf("membership: rank %d: cannot wait for rank %d of a job of %d", m.cfg.Rank, r, m.cfg.Size)
		}
	}
	var lastErr error
	retry := time.NewTicker(200 * time.Millisecond)
	defer retry.Stop()
	joined := false
	for round := 0; ; round++ {
		if peers, ok := m.all(ranks); ok {
			return peers, nil
		}
		if seeds := m.seedsFor(ranks, round, joined, rejoin); len(seeds) > 0 && m.ml.NumMembers() < len(ranks) {
			if n, err := m.ml.Join(seeds); err != nil {
				lastErr = err
			} else if n > 0 {
				joined = true
			}
		}
		if peers, ok := m.all(ranks); ok {
			return peers, nil
		}
		select {
		case <-ctx.Done():
			missing := m.missing(ranks)
			msg := fmt.Sprintf("membership: rank %d: ranks %v never appeared: %v", m.cfg.Rank, missing, context.Cause(ctx))
			if lastErr != nil {
				last := strings.Join(strings.Fields(lastErr.Error()), " ")
				switch {
				case strings.Contains(last, "decrypt"):
					msg += "; wrong job secret: the other ranks cannot decrypt this rank's messages (" + last + ")"
				case len(missing) == len(ranks)-1:
					msg += "; no rank was reached: are they running, with the same job id? (" + last + ")"
				default:
					msg += " (last join error: " + last + ")"
				}
			}
			return nil, errors.New(msg)
		case <-m.joined:
		case <-retry.C:
		}
	}
}

// seedsFor picks the seeds to join in the given round of WaitFor (one
// every 200 ms): with a seed per rank, the first rank waited for and the
// tree parent (if waited for) until a join has succeeded, then, every
// fifth round (a second), two ranks that gossip has not brought yet;
// otherwise all of them. At a job's start rank 0 is the root that the
// others join; a restarted rank (rejoin) joins the first other rank of
// the view instead, rank 0 too (else a restarted rank 0 joined no one,
// and no one knew its new address: it never came back), and while no
// join has succeeded it also tries two others of the view every second
// (the first may be gone).
func (m *Member) seedsFor(ranks []int, round int, joined, rejoin bool) []string {
	seeds, r := m.cfg.Seeds, m.cfg.Rank
	if len(seeds) != m.cfg.Size {
		return seeds
	}
	var pick []int
	if !joined {
		first := ranks[0]
		if rejoin {
			for _, q := range ranks {
				if q != r {
					first = q
					break
				}
			}
		}
		pick = []int{first}
		if parent := (r - 1) / 2; slices.Contains(ranks, parent) {
			pick = append(pick, parent)
		}
		if rejoin && round > 0 && round%5 == 0 {
			others := slices.DeleteFunc(slices.Clone(ranks), func(q int) bool { return q == r })
			rand.Shuffle(len(others), func(i, j int) { others[i], others[j] = others[j], others[i] })
			pick = append(pick, others[:min(2, len(others))]...)
		}
	} else if round%5 == 0 {
		missing := m.missing(ranks)
		rand.Shuffle(len(missing), func(i, j int) { missing[i], missing[j] = missing[j], missing[i] })
		pick = missing[:min(2, len(missing))]
	}
	var out []string
	for _, p := range pick {
		if p != r && !slices.Contains(out, seeds[p]) {
			out = append(out, seeds[p])
		}
	}
	return out
}

// all returns the peers of ranks (the others' entries empty) once each of
// them is known.
func (m *Member) all(ranks []int) ([]Peer, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	peers := make([]Peer, m.cfg.Size)
	for _, r := range ranks {
		p, ok := m.peers[r]
		if !ok {
			return nil, false
		}
		peers[r] = p
	}
	return peers, true
}

// missing lists the ranks of ranks that gossip has not brought yet.
func (m *Member) missing(ranks []int) []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []int
	for _, r := range ranks {
		if _, ok := m.peers[r]; !ok {
			out = append(out, r)
		}
	}
	return out
}

// Close leaves the group (so the others see a clean departure) and shuts
// the member down. It is idempotent.
func (m *Member) Close() error {
	var err error
	m.closeOnce.Do(func() {
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
	})
	return err
}

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

// encodeMeta is a member's metadata: its rank, data address and host.
func encodeMeta(rank int, data, host string) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(rank))
	b = append(b, byte(min(len(data), 255)))
	b = append(b, data[:min(len(data), 255)]...)
	return append(b, host...)
}

// parseMeta decodes a member's rank, data address and host.
func parseMeta(b []byte) (int, Peer, bool) {
	if len(b) < 5 || len(b) < 5+int(b[4]) {
		return 0, Peer{}, false
	}
	r := int(binary.LittleEndian.Uint32(b))
	n := int(b[4])
	p := Peer{Data: string(b[5 : 5+n]), Host: string(b[5+n:])}
	if _, _, err := net.SplitHostPort(p.Data); err != nil {
		return 0, Peer{}, false
	}
	return r, p, true
}

type delegate Member

func (d *delegate) NodeMeta(limit int) []byte {
	if len(d.meta) > limit {
		return nil
	}
	return d.meta
}
func (d *delegate) NotifyMsg(b []byte) {
	m := (*Member)(d)
	if r, ok := parseBye(b); ok && r >= 0 && r < m.cfg.Size {
		m.mu.Lock()
		seen := m.leaving[r]
		m.leaving[r] = true
		m.mu.Unlock()
		if !seen {
			m.byes.QueueBroadcast(bye(append([]byte(nil), b...)))
		}
	}
}
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte {
	return d.byes.GetBroadcasts(overhead, limit)
}
func (d *delegate) LocalState(bool) []byte        { return nil }
func (d *delegate) MergeRemoteState([]byte, bool) {}

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
	m.mu.Unlock()
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
	m.mu.Unlock()
	if left || n.State == memberlist.StateLeft {
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

// logWriter turns memberlist's log lines into debug records, and decrypt
// failures (the mark of a wrong job secret) into warnings.
type logWriter struct{ log *slog.Logger }

func (w *logWriter) Write(p []byte) (int, error) {
	sc := bufio.NewScanner(strings.NewReader(string(p)))
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, "decrypt") || strings.Contains(line, "label") {
			w.log.Warn("membership: rejected a message (wrong job secret or job id?)", "memberlist", line)
		} else {
			w.log.Debug("memberlist", "msg", line)
		}
	}
	return len(p), nil
}

var _ io.Writer = (*logWriter)(nil)
