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
	// net is what the algorithms run over: tr, or with Elastic the ranks
	// of the current view (see elastic.go).
	net    ring.Transport
	el     *elastic // nil unless Config.Elastic
	member *membership.Member

	turn   chan struct{} // holds one token: whoever has it runs a collective
	topo   *topology     // which ranks share hosts; nil: one host
	closed chan struct{} // closed by Close
	seq    uint32
	page   *inspect.Page        // nil: no status page
	rec    *inspect.Recorder    // nil: no timeline
	waited *transport.WaitMeter // with rec: the transport's blocked time

	// The hub strategy (see hub.go).
	hub       *ps.Client
	ownHub    *ps.Hub
	localHubs *localHubs // NewLocal's hubs, shared by its Comms
	useHub    atomic.Bool
	stopWatch chan struct{}
	watchDone chan struct{}
	// confirmTimeout is the transport's ConfirmTimeout (hub.go waits
	// for its verdicts).
	confirmTimeout time.Duration

	closeOnce sync.Once
	closeErr  error
}

func newComm(cfg Config, log *slog.Logger, tr transport.Transport) *Comm {
	c := &Comm{cfg: cfg, log: log, tr: tr, net: tr, turn: make(chan struct{}, 1), closed: make(chan struct{})}
	c.turn <- struct{}{}
	if cfg.StatusFile != "" {
		// The page stays mapped for the life of the process: a collective
		// in another goroutine may still write it after Close.
		p, err := inspect.OpenPage(cfg.StatusFile)
		if err != nil {
			log.Warn("no status page: gorun cannot see this rank's collectives", "err", err)
		}
		c.page = p
	}
	if cfg.TimelineFile != "" {
		c.rec = inspect.NewRecorder()
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
// with an error that names the ranks that never appeared. Connections to
// the ranks this one exchanges data with are made on first use.
func New(ctx context.Context, cfg Config) (*Comm, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Size == 1 {
		c := newComm(cfg, logger, transport.NewMemNetwork(1).Transport(0))
		if cfg.Strategy == StrategyHub {
			if err := c.startHub(ctx); err != nil {
				c.Close()
				return nil, fmt.Errorf("collective: rank 0: starting ParamHub: %w", err)
			}
		}
		return c, nil
	}
	tc := transport.DefaultConfig()
	tc.Rank, tc.Size, tc.JobID, tc.Secret = cfg.Rank, cfg.Size, cfg.JobID, cfg.Secret
	tc.ListenAddr, tc.MaxPayload, tc.Logger = cfg.DataListen, cfg.MaxFrame, logger
	tc.SpinTime = cfg.SpinTime
	tc.SpinYield = cfg.SpinYield
	tc.Shm, tc.HostKey = cfg.Shm, cfg.hostKey()
	// The hub strategy's traffic bypasses the rank mesh: every rank's
	// loss must fail it, as the mesh cannot tell.
	tc.WatchAll = cfg.Strategy == StrategyHub
	var el atomic.Pointer[elastic] // set once joined; a loss before is fatal
	if cfg.Elastic {
		tc.Elastic = true
		tc.OnPeerLost = func(peer int, reason string) {
			if e := el.Load(); e != nil {
				e.suspect(peer, reason)
			}
		}
	}
	tr, err := transport.Listen(tc)
	if err != nil {
		return nil, err
	}
	port := tr.Addr().(*net.TCPAddr).Port
	mc := membership.DefaultConfig()
	mc.JobID, mc.Rank, mc.Size, mc.Secret = cfg.JobID, cfg.Rank, cfg.Size, cfg.Secret
	mc.BindPort, mc.AdvertiseAddr = cfg.GossipPort, cfg.AdvertiseAddr
	// One seed per rank (membership joins a few of them, never its own),
	// or a list to try in full.
	mc.Seeds = cfg.Seeds
	mc.DataAddr = net.JoinHostPort(cfg.AdvertiseAddr, strconv.Itoa(port))
	mc.Host = tr.HostKey()
	mc.ProbeInterval, mc.ProbeTimeout, mc.SuspicionMult = cfg.ProbeInterval, cfg.ProbeTimeout, cfg.SuspicionMult
	mc.Logger = logger
	member, err := membership.Start(mc, membership.Events{
		Dead: func(rank int, reason string) {
			logger.Warn("rank lost", "rank", rank, "reason", reason)
			tr.PeerLost(rank, reason)
		},
		Left: tr.PeerLeft,
	})
	if err != nil {
		tr.Close()
		return nil, err
	}
	c := newComm(cfg, logger, tr)
	c.confirmTimeout = tc.ConfirmTimeout
	c.member = member
	ctx, cancel := context.WithTimeout(ctx, cfg.JoinTimeout)
	defer cancel()
	restarted := cfg.Elastic && cfg.RestartCount > 0
	var found []membership.Peer
	if restarted {
		// A restarted rank joins a running job: it waits for the ranks of
		// the sequencer's current view only.
		el.Store(c.newElastic(nil))
		found, err = c.el.rejoinPeers(ctx, member)
	} else {
		found, err = member.WaitAll(ctx)
	}
	if err == nil {
		// Placement before connecting: every rank knows every rank's host,
		// and connections are made on first use (transport/connect.go).
		peers := make([]transport.Peer, len(found))
		hosts := make([]string, len(found))
		for r, p := range found {
			peers[r], hosts[r] = transport.Peer{Addr: p.Data, Host: p.Host}, p.Host
		}
		err = tr.SetPeers(peers)
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
	return NewLocalOn(transport.NewMemNetwork(n), cfg)
}

// NewLocalOn is NewLocal over a network the caller made, so that a test
// can kill a rank (MemNetwork.Kill) or count what each rank sent and to
// how many peers (MemNetwork.Frames, MemNetwork.Links). With cfg.Elastic
// the job is elastic, its sequencer in memory: a Kill is a death, after
// which the others get the new view.
func NewLocalOn(nw *transport.MemNetwork, cfg Config) ([]*Comm, error) {
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

// Rank is this rank's number in the job, 0 to the job's size - 1 (with
// Elastic it stays the same when the view changes).
func (c *Comm) Rank() int { return c.cfg.Rank }

// Size is the number of ranks that take part in a collective: the job's
// size, or with Elastic the ranks of the current view.
func (c *Comm) Size() int {
	if c.el != nil {
		return len(c.el.installed.Load().Ranks)
	}
	return c.cfg.Size
}

// index is this rank's place among the ranks that take part in a
// collective: its rank, or with Elastic its index in the view.
func (c *Comm) index() int {
	if c.el != nil {
		return c.el.me
	}
	return c.cfg.Rank
}

// rootIndex maps a root given as a job rank to its place among the ranks
// that take part.
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
	c.closeOnce.Do(func() {
		close(c.closed)
		if c.el != nil {
			c.el.close()
		}
		c.closeHub()
		c.closeErr = c.tr.Close()
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
	select {
	case <-c.turn: // kept: no collective runs after Close
		c.rec.Sync()
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
)

var kindName = map[uint8]string{
	kindBarrier: "barrier", kindBroadcast: "broadcast", kindAllReduce: "allreduce",
	kindReduce: "reduce", kindAllGather: "allgather", kindReduceScatter: "reducescatter",
	kindHubSetup: "hub setup", kindTopology: "topology",
}

// do runs one collective, one at a time: a call waits for the one before
// it, its ctx and Close. Any failure is sent to every peer (so that none of
// them waits for this rank) and breaks the Comm; Close during a collective
// returns ErrClosed and tells the peers nothing more than the closing does.
func (c *Comm) do(ctx context.Context, kind uint8, f func(ctx context.Context, o ring.Options) error, h transport.Header) error {
	select {
	case <-c.closed:
		return fmt.Errorf("collective: rank %d: %s: %w", c.cfg.Rank, kindName[kind], ErrClosed)
	default:
	}
	select {
	case <-c.turn:
	default:
		if err := c.waitTurn(ctx, kind); err != nil {
			return err
		}
	}
	defer func() { c.turn <- struct{}{} }()
	userCtx := ctx
	if c.el != nil {
		var done func()
		var err error
		if ctx, done, err = c.el.begin(ctx, kind); err != nil {
			return err
		}
		defer done()
		c.seq = c.el.seqBase | (c.seq+1)&seqMask
	} else {
		c.seq++
	}
	h.Kind, h.Seq = kind, c.seq
	if err := c.tr.Err(); err != nil {
		return fmt.Errorf("collective: rank %d: %s #%d: %w", c.cfg.Rank, kindName[kind], c.seq, err)
	}
	var began, waited int64
	if c.rec != nil {
		began, waited = tick.Now(), c.waited.Total()
	}
	if c.page != nil { // the arguments cost map lookups: none without a page
		c.page.Begin(uint64(c.seq), kindName[kind], dtypeName(h.DType), int(h.Count)*reduce.Size(h.DType))
	}
	err := f(ctx, ring.Options{Header: h, SegmentBytes: c.cfg.SegmentBytes})
	if c.rec != nil {
		c.rec.Collective(kind, h.DType, c.useHub.Load(), h.Seq, uint64(int(h.Count)*reduce.Size(h.DType)), began, tick.Now(), c.waited.Total()-waited)
	}
	c.page.End(uint64(h.Seq))
	if err == nil {
		return nil
	}
	select {
	case <-c.closed:
		// Closed under the call: whatever the transport or the hubs said
		// as they shut down, the cause is Close, and the closing tells the
		// peers all they need.
		if !errors.Is(err, ErrClosed) {
			err = fmt.Errorf("%w (%v)", ErrClosed, err)
		}
		return fmt.Errorf("collective: rank %d: %s #%d: %w", c.cfg.Rank, kindName[kind], c.seq, err)
	default:
	}
	if c.el != nil && userCtx.Err() == nil {
		if verr, ok := c.el.viewChange(userCtx, kind, c.seq, err); ok {
			return verr
		}
	}
	why := fmt.Errorf("rank %d: %s #%d: %w", c.cfg.Rank, kindName[kind], c.seq, err)
	if c.tr.Err() == nil {
		c.tr.Abort(why)
	}
	if c.hub != nil && !c.cfg.HubElastic {
		// Tell the hubs why before returning (the watcher would too, but
		// a rank that exits on this error could beat it, and the hubs
		// would then blame this rank's broken connection).
		c.hub.Fail(why)
	}
	return fmt.Errorf("collective: %w", why)
}

// waitTurn waits while another goroutine runs a collective on c. Giving up
// (ctx ended) breaks the Comm like any other failure: this rank will never
// issue the collective its peers expect next, so they are told.
func (c *Comm) waitTurn(ctx context.Context, kind uint8) error {
	select {
	case <-c.turn:
		return nil
	case <-c.closed:
		return fmt.Errorf("collective: rank %d: %s: %w", c.cfg.Rank, kindName[kind], ErrClosed)
	case <-ctx.Done():
		err := fmt.Errorf("rank %d: %s: gave up waiting for the collective before it: %w", c.cfg.Rank, kindName[kind], context.Cause(ctx))
		c.tr.Abort(err)
		return fmt.Errorf("collective: %w", err)
	}
}

// Barrier returns once every rank has entered it.
func (c *Comm) Barrier(ctx context.Context) error {
	return c.do(ctx, kindBarrier, func(ctx context.Context, o ring.Options) error {
		if c.useHub.Load() {
			return c.hubRound(ctx, o.Header.Seq, ps.Collective{Kind: ps.RoundReduce, Op: Sum, DType: dtype[int64]()})
		}
		return ring.Barrier(ctx, c.net, o)
	}, transport.Header{})
}
