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
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/gorun/gorun/internal/jobsecret"
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
	// of them, Seeds[r] is rank r's, and at a job's start a rank joins
	// only its parent in a join tree over the seeds' hosts (see
	// joinTree), which no rank is the parent of more than four: gossip
	// spreads the rest, so that start costs each rank a few exchanges,
	// not N, and no rank serves N of them. Otherwise every one is tried.
	Seeds []string
	// DataAddr is this rank's data-plane address, published to the others.
	DataAddr string
	// Host names this rank's host (a transport's host key), published to
	// the others so that ranks know who shares their host before they
	// connect.
	Host string

	// ProbeInterval and ProbeTimeout are gossip's timers for jobs of up to
	// 64 ranks; a larger job stretches them, and gossip's own interval, by
	// Size/64, at most 4 times (see gossipStretch).
	ProbeInterval time.Duration
	ProbeTimeout  time.Duration
	// SuspicionMult scales how long a suspect is given before it is
	// declared dead, in probe intervals.
	SuspicionMult int
	// StreamTimeout bounds a state exchange over TCP with another member
	// (a join, memberlist's periodic sync, a goodbye): its connection,
	// its send and its receive each. 0 scales it with Size (see
	// streamTimeout): a full state is a hundred bytes or so a rank, which
	// a loaded host reads, decrypts and merges slowly.
	StreamTimeout time.Duration
	// StallTimeout makes WaitFor give up once this long has passed with
	// no rank appearing (since it started, or since the last one
	// appeared), whatever its ctx allows: a start that is slow but moving
	// is waited for, one that has stopped is not. 0: only ctx bounds it.
	StallTimeout time.Duration
	Logger       *slog.Logger
}

// DefaultConfig has timers for a LAN: a silent member is declared dead in
// about two seconds (in a job of more than 64 ranks, up to four times as
// long).
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
	case jobsecret.Check(c.Secret) != nil:
		return fmt.Errorf("membership: %w", jobsecret.Check(c.Secret))
	case c.ProbeInterval <= 0 || c.ProbeTimeout <= 0 || c.SuspicionMult < 1:
		return errors.New("membership: timers must be positive")
	case c.StreamTimeout < 0 || c.StallTimeout < 0:
		return errors.New("membership: StreamTimeout and StallTimeout must not be negative")
	}
	return nil
}

// streamTimeout is Config.StreamTimeout when it is 0: 2 s, and 10 ms
// more a rank (4.6 s at 256 ranks), as a full state exchange grows with
// the job and is slowest when every rank starts at once on loaded hosts.
func streamTimeout(size int) time.Duration {
	return 2*time.Second + time.Duration(size)*10*time.Millisecond
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
	m := &Member{cfg: cfg, log: logger, peers: map[int]Peer{}, leaving: map[int]bool{}, nodes: map[int]memberlist.Node{}, joined: make(chan struct{}, 1), ev: ev, done: make(chan struct{})}
	m.meta = encodeMeta(cfg.Rank, cfg.DataAddr, cfg.Host)
	if len(m.meta) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("membership: rank %d: data address and host of %d bytes exceed memberlist's %d", cfg.Rank, len(m.meta), memberlist.MetaMaxSize)
	}

	mc := memberlist.DefaultLANConfig()
	mc.Name = cfg.JobID + "-" + strconv.Itoa(cfg.Rank)
	mc.Label = cfg.JobID
	mc.SecretKey = jobsecret.Key(cfg.Secret, jobsecret.Membership) // AES-256
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
	if f := gossipStretch(cfg.Size); f > 1 {
		mc.ProbeInterval *= f
		mc.ProbeTimeout *= f
		mc.GossipInterval *= f
	}
	mc.GossipToTheDeadTime = 2 * time.Second
	// A rank restarted on another host (gorun --max-restarts) comes back
	// under its name at a new address: once the old one is dead, the new
	// one may take the name at once (gossip is keyed with the job secret,
	// so no outsider can).
	mc.DeadNodeReclaimTime = time.Millisecond
	mc.PushPullInterval = 5 * time.Second
	mc.TCPTimeout = cmp.Or(cfg.StreamTimeout, streamTimeout(cfg.Size))
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

// WaitAll joins the seeds (again, until it is done; see Config.Seeds) and
// returns every rank's data address and host once all Size ranks are
// members. On failure (ctx, or Config.StallTimeout) it names the ranks
// that never appeared.
func (m *Member) WaitAll(ctx context.Context) ([]Peer, error) { return m.WaitFor(ctx, nil) }

// WaitFor is WaitAll for the given ranks only (nil: every rank), this
// one among them: a rank restarted into a running elastic job waits for
// the ranks of the job's view, not for those lost for good. The result
// has an entry for every rank of the job, empty for those not waited
// for; seeds are picked among the ranks waited for.
//
// Joins run in the background, one at a time, paced by how long the last
// one took (a slow seed is not asked again at once), so WaitFor returns
// as soon as gossip has brought every rank, even with a join to a slow
// seed still under way; Close waits for it.
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
	var (
		lastErr  error
		a        = attempt{rejoin: rejoin}
		inflight chan joinResult // the join under way; nil: none
		now      = time.Now()
		retryAt  = now // the next join no sooner
		grew     = now // when a rank last appeared (or the wait began)
		repaired = now // when the last repair began
		nmissing = len(ranks) + 1
	)
	wake := time.NewTimer(time.Hour)
	defer wake.Stop()
	for {
		if peers, ok := m.all(ranks); ok {
			return peers, nil
		}
		now = time.Now()
		if k := len(m.missing(ranks)); k < nmissing {
			nmissing, grew = k, now
		}
		if st := m.cfg.StallTimeout; st > 0 && now.Sub(grew) >= st {
			return nil, m.waitError(ranks, fmt.Errorf("none appeared for %v", st), lastErr)
		}
		if inflight == nil && !now.Before(retryAt) {
			a.idle, a.sinceRepair = now.Sub(grew), now.Sub(repaired)
			if seeds, repair := m.seedsFor(ranks, a); len(seeds) > 0 && m.ml.NumMembers() < len(ranks) {
				if repair {
					repaired = now
				}
				a.n++
				inflight = make(chan joinResult, 1)
				if !m.startJoin(seeds, inflight) {
					return nil, m.waitError(ranks, errClosed, lastErr)
				}
			} else {
				retryAt = now.Add(jitter(retryInterval))
			}
		}
		// Wake for the next join or the stall deadline, whichever is
		// first; a rank appearing or the join ending wakes sooner.
		next := time.Hour
		if inflight == nil {
			next = retryAt.Sub(now)
		}
		if st := m.cfg.StallTimeout; st > 0 {
			next = min(next, grew.Add(st).Sub(now))
		}
		wake.Reset(max(next, time.Millisecond))
		select {
		case <-ctx.Done():
			return nil, m.waitError(ranks, context.Cause(ctx), lastErr)
		case <-m.done:
			return nil, m.waitError(ranks, errClosed, lastErr)
		case <-m.joined:
		case r := <-inflight:
			inflight = nil
			pause := retryInterval
			switch {
			case r.err != nil:
				lastErr = r.err
				pause = max(pause, r.took)
			case r.n > 0:
				a.joined = true
			}
			retryAt = time.Now().Add(jitter(pause))
		case <-wake.C:
		}
	}
}

// A join's pacing: a failed one is retried after retryInterval (or as
// long as it took, if longer: the seed is slow or far), give or take
// half; once joined, a rank repairs once every repairAfter while ranks
// are missing.
const (
	retryInterval = 200 * time.Millisecond
	repairAfter   = time.Second
)

// repairEvery is how often a joined rank repairs while ranks are
// missing: 4 ms a rank of the job, from retryInterval up to repairAfter.
// Each repair carries the whole member list, so a small job repairs
// often (a tree of 8 ranks over 4 hosts knew itself ~1 s late when every
// level waited a second) and a large one no more than once a second.
func repairEvery(size int) time.Duration {
	return min(max(time.Duration(size)*4*time.Millisecond, retryInterval), repairAfter)
}

// jitter is d give or take half, so that ranks started together do not
// retry together.
func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d)
}

// errClosed: WaitFor was waiting when the member was closed.
var errClosed = errors.New("member closed")

// startJoin joins seeds in the background, to report on done; false if
// the member is closed.
func (m *Member) startJoin(seeds []string, done chan<- joinResult) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	select {
	case <-m.done:
		return false
	default:
	}
	m.joins.Add(1)
	go func() {
		defer m.joins.Done()
		t0 := time.Now()
		n, err := m.ml.Join(seeds)
		done <- joinResult{n: n, err: err, took: time.Since(t0)}
	}()
	return true
}

type joinResult struct {
	n    int
	err  error
	took time.Duration
}

// waitError is WaitFor's error: the ranks that never appeared, why it
// stopped waiting, and what the last failed join said.
func (m *Member) waitError(ranks []int, cause, lastErr error) error {
	missing := m.missing(ranks)
	var hint string
	if lastErr != nil {
		last := strings.Join(strings.Fields(lastErr.Error()), " ")
		switch {
		case strings.Contains(last, "decrypt"):
			hint = "; wrong job secret: the other ranks cannot decrypt this rank's messages (" + last + ")"
		case len(missing) == len(ranks)-1:
			hint = "; no rank was reached: are they running, with the same job id? (" + last + ")"
		default:
			hint = " (last join error: " + last + ")"
		}
	}
	return fmt.Errorf("membership: rank %d: ranks %v never appeared: %w%s", m.cfg.Rank, missing, cause, hint)
}

// attempt is where WaitFor stands when it picks a join's seeds.
type attempt struct {
	n      int  // joins tried so far
	joined bool // one of them succeeded
	rejoin bool // a restarted rank's WaitFor, not the job's start
	// idle is how long since a rank last appeared (or the wait began),
	// sinceRepair since the last repair began (or the wait began).
	idle, sinceRepair time.Duration
}

// seedsFor picks the seeds of WaitFor's next join, and says whether it is
// a repair. With a seed per rank:
//
//   - At a job's start, a rank joins its parent in the join tree (see
//     joinTree), every fifth try with one other rank picked at random
//     (the parent may be gone or swamped), until a join succeeds. The
//     root, rank 0, joins no one: the others join it.
//   - A restarted rank (rejoin) joins the first other rank of the view,
//     rank 0 too (else a restarted rank 0 joined no one, and no one knew
//     its new address: it never came back), and its parent in a binary
//     tree over the ranks if that is in the view; every fifth try also
//     two others of the view (the first may be gone).
//   - Once joined (the root: from the start), gossip brings the rest,
//     and while ranks are missing a rank repairs once every repairAfter:
//     it exchanges its whole state with a rank it knows, picked at random
//     (what any other has heard of spreads in a few such rounds, where
//     gossip alone, a message at a time, takes many times as long on a
//     loaded host; and each rank is asked about once a round, whatever
//     the job's size). When it knows no one, or, with missingChance, when
//     no rank has appeared for a while, it also joins a rank still
//     missing. Exchanges with known ranks cannot bring a rank that they
//     hold suspect or dead (memberlist ignores a verdict on a node it
//     does not know): one that was swamped or starved and missed its
//     probes, as rank 0 did at 256 ranks, stays missing until it refutes
//     the verdict, or it is joined directly; and groups that formed apart
//     only merge so.
//
// A rank never joins itself. Without a seed per rank, every seed is
// tried each time.
func (m *Member) seedsFor(ranks []int, a attempt) (seeds []string, repair bool) {
	r := m.cfg.Rank
	if len(m.cfg.Seeds) != m.cfg.Size {
		return m.cfg.Seeds, false
	}
	var pick []int
	switch parent := m.joinParent(); {
	case !a.joined && a.rejoin:
		first := ranks[0]
		for _, q := range ranks {
			if q != r {
				first = q
				break
			}
		}
		pick = []int{first}
		if p := (r - 1) / 2; slices.Contains(ranks, p) {
			pick = append(pick, p)
		}
		if a.n > 0 && a.n%5 == 0 {
			pick = append(pick, pickOthers(ranks, 2, append(slices.Clone(pick), r)...)...)
		}
	case !a.joined && parent >= 0:
		pick = []int{parent}
		if a.n > 0 && a.n%5 == 0 {
			pick = append(pick, pickOthers(ranks, 1, parent, r)...)
		}
	case a.sinceRepair >= repairEvery(m.cfg.Size):
		known, missing := m.split(ranks)
		pick = pickOthers(known, 1, r)
		if len(pick) == 0 || rand.Float64() < missingChance(a.idle, len(known)) {
			pick = append(pick, pickOthers(missing, 1, r)...)
		}
		repair = true
	}
	for _, p := range pick {
		if p != r && !slices.Contains(seeds, m.cfg.Seeds[p]) {
			seeds = append(seeds, m.cfg.Seeds[p])
		}
	}
	return seeds, repair
}

// missingChance is the chance that a repair also joins a rank still
// missing, once no rank has appeared for idle, of a rank that knows known
// ranks: none for 3 repairAfter, then 2/known, doubling every 2
// repairAfter up to 1 (at 256 ranks, 17 s after the last appearance). A
// rank missing from many is so joined by about two of them a round at
// first, more as the stall lasts, not by all of them at once: near the
// end of a large start, or when one rank starts late or was swamped,
// every rank misses the same few, and all joining them at once would
// swamp them as it swamped rank 0 when every rank joined it.
func missingChance(idle time.Duration, known int) float64 {
	if idle < 3*repairAfter {
		return 0
	}
	doublings := float64(idle-3*repairAfter) / float64(2*repairAfter)
	return min(1, 2/float64(max(known, 1))*math.Exp2(doublings))
}

// pickOthers picks up to k of ranks at random, none of not.
func pickOthers(ranks []int, k int, not ...int) []int {
	others := slices.DeleteFunc(slices.Clone(ranks), func(q int) bool { return slices.Contains(not, q) })
	rand.Shuffle(len(others), func(i, j int) { others[i], others[j] = others[j], others[i] })
	return others[:min(k, len(others))]
}

// joinParent is this rank's parent in the start's join tree, -1 for the
// root or without a seed per rank.
func (m *Member) joinParent() int {
	if len(m.cfg.Seeds) != m.cfg.Size {
		return -1
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.tree == nil {
		m.tree = joinTree(m.cfg.Seeds)
	}
	return m.tree[m.cfg.Rank]
}

// joinTree is the tree the ranks join along at a job's start, from every
// rank's gossip address: parent[r] is the rank that rank r joins, -1 for
// the root (rank 0). The ranks are grouped by their address's host,
// hosts numbered in the order of their first rank. On a host, the ranks
// form a binary tree under the host's first rank (its j-th rank joins its
// (j-1)/2-th), and the hosts' first ranks form one across the hosts (the
// i-th host's joins the (i-1)/2-th host's). So a rank is the parent of
// at most four (two on its host, two hosts' first ranks), whatever the
// job's size, where every rank used to join rank 0; most joins stay on
// their host, and H-1 cross hosts.
func joinTree(seeds []string) []int {
	parent := make([]int, len(seeds))
	index := map[string]int{}
	var hosts [][]int // each host's ranks, in rank order
	for r, s := range seeds {
		h := s
		if host, _, err := net.SplitHostPort(s); err == nil {
			h = host
		}
		i, ok := index[h]
		if !ok {
			i = len(hosts)
			index[h] = i
			hosts = append(hosts, nil)
		}
		hosts[i] = append(hosts[i], r)
	}
	for i, rs := range hosts {
		for j, r := range rs {
			switch {
			case j > 0:
				parent[r] = rs[(j-1)/2]
			case i > 0:
				parent[r] = hosts[(i-1)/2][0]
			default:
				parent[r] = -1
			}
		}
	}
	return parent
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
	_, missing := m.split(ranks)
	return missing
}

// split parts ranks into those gossip has brought and those it has not.
func (m *Member) split(ranks []int) (known, missing []int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range ranks {
		if _, ok := m.peers[r]; ok {
			known = append(known, r)
		} else {
			missing = append(missing, r)
		}
	}
	return known, missing
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

// gossipStretch is how much a job of size ranks stretches gossip's probe
// interval, probe timeout and gossip interval: 1 up to 64 ranks, then
// size/64, at most 4. A member's own gossip work does not grow with the
// job, but a member that misses probes for want of CPU is suspected, and
// every verdict reaches every member: at 256 ranks on 64 test hosts
// sharing 2 cores, with the timers for 64, gossip declared live ranks
// dead about 4,000 times a second, taking them back as often, and that
// churn took most of the CPU (a small job's wall time 60-80 s; stretched
// 4 times, 20-24 s; results/scale). A silent member is then declared dead
// in as many times as long.
func gossipStretch(size int) time.Duration {
	return time.Duration(min(4, max(1, size/64)))
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
// failures and foreign labels (the mark of a wrong job secret or another
// job) into warnings. A stream that ended before its first byte shows up
// as one with the empty label: a peer that gave up a dial before it could
// write (on an overloaded host), not a stranger, so it stays a debug record
// (a packet always carries what its sender wrote).
type logWriter struct{ log *slog.Logger }

func (w *logWriter) Write(p []byte) (int, error) {
	sc := bufio.NewScanner(strings.NewReader(string(p)))
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, `discarding stream with unacceptable label ""`) {
			w.log.Debug("memberlist: a stream ended before it began", "msg", line)
		} else if strings.Contains(line, "decrypt") || strings.Contains(line, "label") {
			w.log.Warn("membership: rejected a message (wrong job secret or job id?)", "memberlist", line)
		} else {
			w.log.Debug("memberlist", "msg", line)
		}
	}
	return len(p), nil
}

var _ io.Writer = (*logWriter)(nil)
