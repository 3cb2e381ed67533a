package collective

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/gorun/gorun/ps"
	"github.com/gorun/gorun/reduce"
	"github.com/gorun/gorun/ring"
	"github.com/gorun/gorun/transport"
	"github.com/gorun/gorun/transport/mem"
	"github.com/gorun/gorun/transport/wire"
)

// The hub strategy runs every collective as rounds on ParamHub: each rank
// sends its buffer, cut into partitions spread over the hubs, and gets the
// result back. Reductions fold the ranks' parts in rank order at the hub,
// so every rank ends with the same bits.

const addrSlot = 16 // int64s per address in the setup exchange (128 bytes)

// startHub starts this rank's colocated hub if it has one, learns every
// hub's address, and connects to them.
func (c *Comm) startHub(ctx context.Context) error {
	addrs := c.cfg.Hubs
	if len(addrs) == 0 {
		k := c.cfg.ColocatedHubs
		mine := ""
		if c.cfg.Rank < k {
			hc := hubConfig(c.cfg, c.cfg.Rank, c.cfg.Size, c.log)
			hc.ListenAddr = net.JoinHostPort(c.cfg.listenHost(), "0")
			hc.Shm = c.cfg.shmOptions()
			h, err := ps.NewHub(hc)
			if err != nil {
				return err
			}
			c.ownHub = h
			mine = net.JoinHostPort(c.cfg.AdvertiseAddr, strconv.Itoa(h.Addr().(*net.TCPAddr).Port))
		}
		all, err := c.exchange(ctx, mine)
		if err != nil {
			return fmt.Errorf("exchanging hub addresses: %w", err)
		}
		addrs = all[:k]
	}
	return c.connectHubs(ctx, addrs, nil)
}

// connectHubs connects this rank's hub client to the hubs at addrs (over
// dial, if not nil) and ties it to the transport's failure.
func (c *Comm) connectHubs(ctx context.Context, addrs []string, dial wire.DialFunc) error {
	cc := clientConfig(c.cfg, addrs, c.log)
	cc.Dial = dial
	if len(c.Hosts()) > 1 {
		// Hub links cross the network: cut small rounds finer (see
		// ps.RoundSpreadBytes). On one host, over shared memory or
		// loopback, a frame costs more than the finer pipeline gains.
		// Every rank decides the same: the hosts are the job's.
		cc.RoundSpreadBytes = 0
	}
	if c.rec != nil {
		cc.Trace = func(what string, start time.Time, took time.Duration) {
			c.rec.SpanAt("hub "+what, start, start.Add(took))
		}
	}
	if c.page != nil {
		cc.Traffic = c.page.AddHub // gorun --metrics: hub bytes per rank
	}
	if dial == nil {
		cc.Shm = c.cfg.shmOptions() // in memory (NewLocal), nothing to share
	}
	cl, err := ps.Dial(ctx, cc)
	if err != nil {
		return err
	}
	c.hub = cl
	c.useHub.Store(true)
	c.stopWatch = make(chan struct{})
	c.watchDone = make(chan struct{})
	go func() {
		defer close(c.watchDone)
		select {
		case <-c.tr.Failed():
			err := c.tr.Err()
			if !c.cfg.HubElastic {
				cl.Fail(err)
				return
			}
			// Elastic: the hubs go on without a lost rank, but one that is
			// frozen still looks connected to them; tell them whom this
			// rank found lost (its transport may have failed first on
			// another rank's abort, and confirm its own verdict later).
			c.reportLost(cl)
		case <-c.stopWatch:
		}
	}()
	return nil
}

// reportLost tells the hubs about every rank the transport found lost,
// and each one it finds afterwards (the confirmation of gossip's verdict
// takes up to its ConfirmTimeout, which an overloaded host stretches),
// until this Comm stops watching (closeHub) or the transport closes.
func (c *Comm) reportLost(cl *ps.Client) {
	lost, news, cancel := c.tr.Losses()
	defer cancel()
	report := func(rank int, reason string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := cl.ReportLost(ctx, rank, reason); err != nil {
			c.log.Warn("could not report a lost rank to the hubs", "rank", rank, "err", err)
		}
	}
	for _, rank := range slices.Sorted(maps.Keys(lost)) {
		report(rank, lost[rank])
	}
	for {
		select {
		case l, ok := <-news:
			if !ok {
				return
			}
			report(l.Rank, l.Reason)
		case <-c.stopWatch:
			return
		}
	}
}

// exchange all-gathers one short string per rank over the ring transport.
func (c *Comm) exchange(ctx context.Context, mine string) ([]string, error) {
	if len(mine) > addrSlot*8 {
		return nil, fmt.Errorf("address %q too long", mine)
	}
	buf := make([]int64, addrSlot*c.cfg.Size)
	b := reduce.AsBytes(buf[c.cfg.Rank*addrSlot : (c.cfg.Rank+1)*addrSlot])
	copy(b, mine)
	o := ring.Options{Header: transport.Header{Kind: kindHubSetup, DType: dtype[int64](), Count: addrSlot}, SegmentBytes: c.cfg.SegmentBytes}
	if err := ring.AllGather(ctx, &keyed{tr: c.tr, mux: c.mux}, buf, o); err != nil {
		return nil, err
	}
	out := make([]string, c.cfg.Size)
	for r := range out {
		s := reduce.AsBytes(buf[r*addrSlot : (r+1)*addrSlot])
		n := 0
		for n < len(s) && s[n] != 0 {
			n++
		}
		out[r] = string(s[:n])
	}
	return out, nil
}

// closeHub says goodbye to the hubs and, on a rank that hosts one, waits
// until every rank has said goodbye (or a rank is lost, or CloseTimeout
// passes) before stopping it.
func (c *Comm) closeHub() {
	if c.hub == nil {
		return
	}
	close(c.stopWatch)
	<-c.watchDone
	_ = c.hub.Close()
	if c.localHubs != nil {
		c.localHubs.release()
	}
	if c.ownHub != nil {
		failed := c.tr.Failed()
		if c.cfg.HubElastic {
			failed = nil // the others may still be training
		}
		select {
		case <-c.ownHub.Done():
		case <-failed:
		case <-time.After(c.cfg.CloseTimeout):
			c.log.Warn("closing this rank's hub while some ranks are still connected", "waited", c.cfg.CloseTimeout)
		}
		_ = c.ownHub.Close()
	}
}

// SetStrategy switches the strategy of the collectives that follow, on
// a Comm whose hubs were set up at join (Config.Strategy "hub"). Like a
// collective, every rank must switch at the same point.
func (c *Comm) SetStrategy(s string) error {
	switch {
	case s == StrategyRing:
		c.useHub.Store(false)
	case s == StrategyHub && c.hub != nil:
		c.useHub.Store(true)
	case s == StrategyHub:
		return fmt.Errorf("collective: this Comm joined with strategy %q, so it has no hubs", c.cfg.Strategy)
	default:
		return fmt.Errorf("collective: unknown strategy %q (want ring or hub)", s)
	}
	return nil
}

// Strategy is the strategy the next collective uses.
func (c *Comm) Strategy() string {
	if c.useHub.Load() {
		return StrategyHub
	}
	return StrategyRing
}

// HubBytes reports the payload bytes this rank has sent to and received
// from each hub (nil without hubs): the cost model's per-hub traffic.
func (c *Comm) HubBytes() (sent, recvd []int64) {
	if c.hub == nil {
		return nil, nil
	}
	return c.hub.HubBytes()
}

// hubRound runs collective number seq as a round on the hubs.
func (c *Comm) hubRound(ctx context.Context, seq uint32, r ps.Collective) error {
	r.Seq = seq
	return c.hub.Collective(ctx, r)
}

// Hub is the ParamHub client of a Comm that joined with the hub strategy
// (nil otherwise), for keyed push and pull beside the collectives: the
// same hubs, connections and failure handling. Declare keys on every rank
// in the same order.
func (c *Comm) Hub() *ps.Client { return c.hub }

// localHubs are the in-memory hubs of a NewLocal group: they stop when the
// last of the group's Comms closes, in whatever order the Comms close.
type localHubs struct {
	mu   sync.Mutex
	refs int
	hubs []*ps.Hub
	lns  map[string]*mem.Listener
}

func (l *localHubs) dial(ctx context.Context, addr string) (net.Conn, error) {
	ln, ok := l.lns[addr]
	if !ok {
		return nil, fmt.Errorf("no in-memory hub at %q", addr)
	}
	return ln.Dial(ctx)
}

func (l *localHubs) release() {
	l.mu.Lock()
	l.refs--
	last := l.refs == 0
	l.mu.Unlock()
	if last {
		for _, h := range l.hubs {
			_ = h.Close()
		}
	}
}

// startLocalHubs runs cfg.ColocatedHubs hubs in memory for the n Comms of
// a NewLocal group and connects every Comm to them.
func startLocalHubs(comms []*Comm, cfg Config) error {
	l := &localHubs{refs: len(comms), lns: map[string]*mem.Listener{}}
	var addrs []string
	for i := range cfg.ColocatedHubs {
		addr := fmt.Sprintf("in-memory-hub-%d", i)
		ln := mem.NewListener(addr)
		hc := hubConfig(cfg, i, len(comms), cfg.Logger)
		hc.Listener = ln
		h, err := ps.NewHub(hc)
		if err != nil {
			for _, h := range l.hubs {
				h.Close()
			}
			return err
		}
		l.hubs, l.lns[addr] = append(l.hubs, h), ln
		addrs = append(addrs, addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.JoinTimeout)
	defer cancel()
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		c.localHubs = l
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = c.connectHubs(ctx, addrs, l.dial)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, c := range comms {
			c.Close()
		}
		for _, h := range l.hubs {
			h.Close()
		}
		return fmt.Errorf("collective: in-memory hubs: %w", err)
	}
	return nil
}
