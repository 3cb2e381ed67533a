package collective

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorun/gorun/internal/inspect"
	"github.com/gorun/gorun/internal/tick"
	"github.com/gorun/gorun/membership"
	"github.com/gorun/gorun/ps"
	"github.com/gorun/gorun/reduce"
	"github.com/gorun/gorun/ring"
	"github.com/gorun/gorun/transport"
	"github.com/gorun/gorun/transport/mem"
	"github.com/gorun/gorun/transport/tcp"
)

// Sentinel errors; see doc.go for what triggers each.
var (
	ErrPeerLost     = transport.ErrPeerLost
	ErrSizeMismatch = transport.ErrSizeMismatch
	ErrClosed       = transport.ErrClosed
	ErrAuth         = transport.ErrAuth
	ErrAborted      = transport.ErrAborted
)

// Comm is one rank's handle on its job.
type Comm struct {
	cfg Config
	log *slog.Logger
	tr  transport.Transport
	// mux hands each collective the frames of its own communicator and
	// number (exec.go); a Comm's children share it.
	mux *transport.Mux
	// id is this communicator's (0: the job's own; Split's children have
	// their own), rank and members its place and ranks (members nil: the
	// job's ranks, or with Elastic the view's).
	id      uint32
	rank    int
	members []int
	parent  *Comm    // a child's parent; nil for the job's Comm
	root    *Comm    // a child's job Comm; nil for the job's Comm
	hostOf  []string // every job rank's host key; nil: unknown (one host)
	ids     *idGen   // the communicator ids in use, shared with children
	el      *elastic // nil unless Config.Elastic
	member  *membership.Member

	mu  sync.Mutex // progress and unordered
	seq uint32     // an elastic Comm's last collective number (exec.go)
	// nstart collectives were started; the first nfinish of them have
	// finished (they finish in order); progress, when not nil, is closed
	// when nfinish grows. unordered: a collective gave up waiting for
	// the one before it (the Comm has failed); nobody waits any more.
	nstart    atomic.Uint64
	seqBase   uint32               // a child's first number - 1 (its epoch's, elastic)
	spare     atomic.Pointer[call] // a call to reuse (exec.go)
	nfinish   atomic.Uint64
	waiting   atomic.Int32 // goroutines in waitFor
	doomed    atomic.Bool  // elastic: Start forms fail with ErrViewChanged (see doom)
	progress  chan struct{}
	unordered bool
	wg        sync.WaitGroup
	topo      *topology            // which ranks share hosts; nil: one host
	closed    chan struct{}        // closed by Close
	page      *inspect.Page        // nil: no status page
	timed     bool                 // Config.Timing with a page: collectives are timed on it
	rec       *inspect.Recorder    // nil: no timeline
	recMu     *sync.Mutex          // rec's collectives are written by one goroutine at a time
	waited    *transport.WaitMeter // with rec: the transport's blocked time
	// epoch is a child's view epoch when it was split (elastic parents).
	epoch int

	// The hub strategy (see hub.go).
	hub       *ps.Client
	ownHub    *ps.Hub
	localHubs *localHubs // NewLocal's hubs, shared by its Comms
	useHub    atomic.Bool
	exact     atomic.Bool // Config.Exact, or SetExact's
	stopWatch chan struct{}
	watchDone chan struct{}

	closeOnce sync.Once
	closeErr  error
}

func newComm(cfg Config, log *slog.Logger, tr transport.Transport) *Comm {
	c := &Comm{cfg: cfg, log: log, tr: tr, mux: transport.NewMux(tr, tr.Size()), rank: cfg.Rank, ids: &idGen{next: 1}, recMu: new(sync.Mutex), closed: make(chan struct{})}
	c.exact.Store(cfg.Exact)
	if cfg.StatusFile != "" {
		// The page stays mapped for the life of the process: a collective
		// in another goroutine may still write it after Close.
		p, err := inspect.OpenPage(cfg.StatusFile)
		if err != nil {
			log.Warn("no status page: gorun cannot see this rank's collectives", "err", err)
		} else {
			inspect.CatchQuit()
		}
		c.page = p
		if p != nil && cfg.Timing {
			c.timed = true
			go func() { // the tick's length, measured over 20 ms
				_, dur := tick.NewBase().UnixNano()
				p.SetTickRate(float64(dur(1<<30)) / (1 << 30))
			}()
		}
	}
	if cfg.TimelineFile != "" {
		c.rec = inspect.NewRecorder()
	}
	if c.rec != nil || c.timed {
		c.waited = transport.NewWaitMeter(tick.Now)
		if m, ok := tr.(interface{ SetWaitMeter(*transport.WaitMeter) }); ok {
			m.SetWaitMeter(c.waited)
		}
	}
	return c
}

// Join joins the job gorun started this process in, as described by its
// environment.
func Join(ctx context.Context) (*Comm, error) {
	cfg, err := ConfigFromEnv(os.LookupEnv)
	if err != nil {
		return nil, err
	}
	return New(ctx, cfg)
}

// New joins a job with explicit settings: it finds every rank by gossip,
// with its address and host. It returns when every rank is known, or
// with an error that names the ranks that never appeared (none appeared
// for cfg.JoinTimeout, or ctx ended). Connections to the ranks this one
// exchanges data with are made on first use.
func New(ctx context.Context, cfg Config) (*Comm, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Size == 1 {
		c := newComm(cfg, logger, mem.NewNetwork(1).Transport(0))
		if cfg.Strategy == StrategyHub {
			if err := c.startHub(ctx); err != nil {
				c.Close()
				return nil, fmt.Errorf("collective: rank 0: starting ParamHub: %w", err)
			}
		}
		return c, nil
	}
	tc := transportConfig(cfg, logger)
	var el atomic.Pointer[elastic] // set once joined; a loss before is fatal
	if cfg.Elastic {
		tc.OnPeerLost = func(peer int, reason string) {
			if e := el.Load(); e != nil {
				e.suspect(peer, reason)
			}
		}
	}
	tr, err := tcp.Listen(tc)
	if err != nil {
		return nil, err
	}
	port := tr.Addr().(*net.TCPAddr).Port
	mc := membershipConfig(cfg, net.JoinHostPort(cfg.AdvertiseAddr, strconv.Itoa(port)), tr.HostKey(), logger)
	member, err := membership.Start(mc, membership.Events{
		Dead: func(rank int, reason string) {
			// Gossip's verdict only: the transport checks it (a rank on
			// an overloaded host may be declared dead and answer) and
			// says what it decided.
			logger.Debug("gossip declared a rank dead", "rank", rank, "reason", reason)
			tr.PeerLost(rank, reason)
		},
		Left:  tr.PeerLeft,
		Alive: tr.PeerAlive,
	})
	if err != nil {
		tr.Close()
		return nil, err
	}
	c := newComm(cfg, logger, tr)
	c.member = member
	restarted := cfg.Elastic && cfg.RestartCount > 0
	var found []membership.Peer
	if !restarted {
		found, err = member.WaitAll(ctx) // bounded by mc.StallTimeout
	}
	// What follows gossip (and the whole of a restarted rank's join) is
	// bounded by JoinTimeout.
	ctx, cancel := context.WithTimeout(ctx, cfg.JoinTimeout)
	defer cancel()
	if restarted {
		// A restarted rank joins a running job: it waits for the ranks of
		// the sequencer's current view only.
		// Its hosts start empty: a view announced before it has joined
		// names the ranks that join in it with their hosts, which gossip
		// may not have yet.
		el.Store(c.newElastic(make([]string, cfg.Size)))
		found, err = c.el.rejoinPeers(ctx, member)
	}
	if err == nil {
		// Placement before connecting: every rank knows every rank's host,
		// and connections are made on first use (transport/tcp/connect.go).
		peers := make([]tcp.Peer, len(found))
		hosts := make([]string, len(found))
		for r, p := range found {
			peers[r], hosts[r] = tcp.Peer{Addr: p.Data, Host: p.Host}, p.Host
		}
		err = tr.SetPeers(peers)
		c.hostOf = hosts
		switch {
		case err != nil:
		case restarted:
			err = c.el.rejoin(ctx, hosts, mc.DataAddr, tr.HostKey())
		case cfg.Elastic:
			err = c.startElastic(hosts)
			el.Store(c.el)
		default:
			err = c.setTopology(hosts)
		}
	}
	if err == nil && cfg.Strategy == StrategyHub {
		err = c.startHub(ctx)
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("collective: rank %d: joining job %s: %w", cfg.Rank, cfg.JobID, err)
	}
	return c, nil
}

// NewLocal returns n Comms connected in memory, for tests of training code
// without sockets. They behave like a real job: run each rank's code in its
// own goroutine. With Strategy "hub" the collectives run through
// cfg.ColocatedHubs ParamHub hubs, also in memory (the same server,
// handshake and framing as over TCP), and Comm.Hub gives keyed push and
// pull; the hubs stop when the last of the Comms closes.
func NewLocal(n int, cfg Config) ([]*Comm, error) {
	return NewLocalOn(mem.NewNetwork(n), cfg)
}

// NewLocalOn is NewLocal over a network the caller made, so that a test
// can kill a rank (mem.Network.Kill) or count what each rank sent and to
// how many peers (mem.Network.Frames, mem.Network.Links). With cfg.Elastic
// the job is elastic, its sequencer in memory: a Kill is a death, after
// which the others get the new view.
func NewLocalOn(nw *mem.Network, cfg Config) ([]*Comm, error) {
	n := nw.Size()
	cfg.Size, cfg.Rank = n, 0
	cfg.Seeds = []string{"in-memory"}
	cfg.JobID, cfg.Secret = "local", []byte("in-memory-job-secret")
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	comms := make([]*Comm, n)
	for r := range n {
		c := cfg
		c.Rank = r
		logger := c.Logger
		if logger == nil {
			logger = slog.New(slog.DiscardHandler)
		}
		comms[r] = newComm(c, logger, nw.Transport(r))
	}
	if cfg.Elastic {
		if cfg.Strategy == StrategyHub || cfg.Control != nil {
			return nil, errors.New("collective: an in-memory elastic job takes the ring strategy and no Control: its sequencer is in memory")
		}
		seq := &memSequencer{nw: nw, comms: comms, view: comms[0].View()}
		nw.Elastic, nw.OnKill = true, seq.killed
		for _, c := range comms {
			if err := c.startElastic(nil); err != nil {
				return nil, err
			}
			c.el.local = seq
		}
	}
	if cfg.Strategy == StrategyHub {
		if err := startLocalHubs(comms, cfg); err != nil {
			return nil, err
		}
	}
	return comms, nil
}

// Rank is this rank's number in the Comm, 0 to Size() - 1: its rank in
// the job (with Elastic it stays the same when the view changes), or in a
// child from Split its place there.
func (c *Comm) Rank() int { return c.rank }

// Size is the number of ranks that take part in a collective: the job's
// size, with Elastic the ranks of the current view, in a child its ranks.
func (c *Comm) Size() int {
	if c.el != nil {
		return len(c.el.installed.Load().Ranks)
	}
	if c.members != nil {
		return len(c.members)
	}
	return c.cfg.Size
}

// index is this rank's place among the ranks that take part in a
// collective: its rank, or with Elastic its index in the view.
func (c *Comm) index() int {
	if c.el != nil {
		return c.el.me
	}
	return c.rank
}

// rootIndex maps a root given as a rank (a job rank with Elastic) to its
// place among the ranks that take part.
func (c *Comm) rootIndex(root int) (int, error) {
	if c.el == nil {
		if root < 0 || root >= c.Size() {
			return 0, localError("root %d out of range for size %d", root, c.Size())
		}
		return root, nil
	}
	v := c.el.installed.Load()
	i := v.Index(root)
	if i < 0 {
		return 0, localError("root %d is not in the view (epoch %d, ranks %v)", root, v.Epoch, v.Ranks)
	}
	return i, nil
}

// Close leaves the job cleanly and releases everything the Comm holds. A
// collective blocked in another goroutine returns ErrClosed. Close is
// idempotent and safe for concurrent use.
func (c *Comm) Close() error {
	if c.parent != nil {
		return c.closeChild()
	}
	c.closeOnce.Do(func() {
		c.mu.Lock()
		close(c.closed)
		c.mu.Unlock()
		if c.el != nil {
			c.el.close()
		}
		c.closeHub()
		c.closeErr = c.tr.Close()
		c.wg.Wait() // the Start forms' goroutines: the closed transport ends them
		if c.member != nil {
			if err := c.member.Close(); c.closeErr == nil {
				c.closeErr = err
			}
		}
		c.writeTimeline()
	})
	return c.closeErr
}

// writeTimeline writes the timeline file once the collective running in
// another goroutine, if any, has returned (it does soon: the transport is
// closed); if it has not within a second, the file holds what the recorder
// had published, all but its last 64 collectives at most.
func (c *Comm) writeTimeline() {
	if c.rec == nil {
		return
	}
	finished := make(chan struct{})
	go func() {
		c.wg.Wait()
		c.mu.Lock()
		for c.nfinish.Load() < c.nstart.Load() && !c.unordered {
			if c.progress == nil {
				c.progress = make(chan struct{})
			}
			p := c.progress
			c.mu.Unlock()
			<-p
			c.mu.Lock()
		}
		c.mu.Unlock()
		close(finished)
	}()
	select {
	case <-finished: // no collective runs after Close
		c.recMu.Lock()
		c.rec.Sync()
		c.recMu.Unlock()
	case <-time.After(time.Second):
		c.log.Warn("a collective is still running: the timeline may miss its last collectives")
	}
	if err := c.rec.WriteFile(c.cfg.TimelineFile, func(k uint8) string { return kindName[k] }, dtypeName); err != nil {
		c.log.Warn("writing the timeline", "err", err)
	}
}

// dtypeName names an element type for the status page and the timeline,
// "" for none (a barrier).
func dtypeName(d uint8) string {
	if d == 0 {
		return ""
	}
	return reduce.DTypeName(d)
}

// Span marks a stretch of the program's own work (a forward pass, a data
// load) on this rank's track of gorun's --timeline, next to its
// collectives; call the returned function when it ends:
//
//	end := c.Span("forward")
//	...
//	end()
//
// Without --timeline it records nothing and costs a nil check.
func (c *Comm) Span(name string) (end func()) {
	if c.rec == nil {
		return func() {}
	}
	t0 := tick.Now()
	return func() { c.rec.Span(name, t0, tick.Now()) }
}

// Err reports the error that broke the Comm, or nil while it is healthy.
func (c *Comm) Err() error { return c.tr.Err() }

// Kinds of collective; they cross the wire. ONLY APPEND.
const (
	kindBarrier uint8 = iota + 1
	kindBroadcast
	kindAllReduce
	kindReduce
	kindAllGather
	kindReduceScatter
	kindHubSetup
	kindTopology // no longer sent: placement comes with gossip
	kindAllToAll
	kindAllToAllV
	kindGather
	kindScatter
	kindAllGatherV
	kindSplit
	kindGroup // a fused all-reduce of several buffers
)

var kindName = map[uint8]string{
	kindBarrier: "barrier", kindBroadcast: "broadcast", kindAllReduce: "allreduce",
	kindReduce: "reduce", kindAllGather: "allgather", kindReduceScatter: "reducescatter",
	kindHubSetup: "hub setup", kindTopology: "topology",
	kindAllToAll: "alltoall", kindAllToAllV: "alltoallv", kindGather: "gather", kindScatter: "scatter",
	kindAllGatherV: "allgatherv", kindSplit: "split", kindGroup: "grouped allreduce",
}

// Barrier returns once every rank has entered it.
func (c *Comm) Barrier(ctx context.Context) error {
	return c.do(ctx, kindBarrier, barrier, transport.Header{})
}

// StartBarrier starts a Barrier; its handle is done once every rank has
// entered it.
func (c *Comm) StartBarrier(ctx context.Context) *Handle {
	return c.async(ctx, kindBarrier, barrier, transport.Header{}, nil)
}

func barrier(ctx context.Context, x *call) error {
	if x.c.useHub.Load() {
		return x.c.hubRound(ctx, x.o.Header.Seq, ps.Collective{Kind: ps.RoundReduce, Op: Sum, DType: dtype[int64]()})
	}
	return ring.Barrier(ctx, x.net, x.o)
}
