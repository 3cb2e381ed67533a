package collective

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gorun/gorun/internal/tick"
	"github.com/gorun/gorun/reduce"
	"github.com/gorun/gorun/ring"
	"github.com/gorun/gorun/transport"
)

// A collective runs in three parts: start (under the Comm's lock: its
// number and its place in the Comm's order), run (the algorithm over the
// call's own network, inline for a blocking call, in a goroutine for a
// Start form) and finish (after every collective started before it, so
// that handles complete in the order they were started).
//
// The ring strategy runs collectives of one Comm at once: each one's
// frames carry its communicator and number (Header.Comm and Seq), and the
// Comm's transport.Mux hands every frame to the collective it belongs to.
// The hub strategy and elastic Comms run them one at a time, in order.

// Handle is a collective started by one of the Start forms. Its buffers
// belong to the collective until it is done: the caller must not read or
// write them before Wait returns (or Test reports done).
type Handle struct {
	c      *Comm
	kind   uint8
	hdr    transport.Header
	serial bool
	failed bool   // at start
	idx    uint64 // its place in the Comm's order
	done   chan struct{}
	err    error
	after  func()    // runs once the collective succeeded, before done
	end    time.Time // when it finished (Start forms)
}

// Done is closed when the collective has finished, well or not.
func (h *Handle) Done() <-chan struct{} { return h.done }

// Test reports without blocking whether the collective has finished, and
// its error if it has.
func (h *Handle) Test() (done bool, err error) {
	select {
	case <-h.done:
		return true, h.err
	default:
		return false, nil
	}
}

// Wait waits until the collective has finished and returns its error. If
// ctx ends first, Wait returns ctx's error and the collective goes on
// (its own context is the one it was started with); its buffers still
// belong to it. A lost peer or Close ends the collective itself, and Wait
// with it.
func (h *Handle) Wait(ctx context.Context) error {
	select {
	case <-h.done:
		return h.err
	default:
	}
	select {
	case <-h.done:
		return h.err
	case <-ctx.Done():
		return fmt.Errorf("collective: rank %d: waiting for %s: %w", h.c.cfg.Rank, kindName[h.kind], context.Cause(ctx))
	}
}

// WaitAll waits for every handle and returns their errors joined (each
// names its rank and collective). nil handles are skipped.
func WaitAll(ctx context.Context, hs ...*Handle) error {
	var errs []error
	for _, h := range hs {
		if h == nil {
			continue
		}
		if err := h.Wait(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// call is one collective's view of the network: the ranks of its Comm,
// numbered 0..Size-1, seeing only this collective's frames.
type call struct {
	c   *Comm
	o   ring.Options
	net ring.Transport
	k   keyed
}

// keyed is the job's transport as one collective (one Key) sees it.
type keyed struct {
	tr  transport.Transport
	mux *transport.Mux
	key transport.Key
}

func (k *keyed) Rank() int { return k.tr.Rank() }
func (k *keyed) Size() int { return k.tr.Size() }

func (k *keyed) Send(ctx context.Context, to int, h transport.Header, payload []byte) error {
	h.Comm = k.key.Comm
	return k.tr.Send(ctx, to, h, payload)
}

// TrySend implements transport.TrySender when the job's transport does.
func (k *keyed) TrySend(to int, h transport.Header, payload []byte) bool {
	ts, ok := k.tr.(transport.TrySender)
	if !ok {
		return false
	}
	h.Comm = k.key.Comm
	return ts.TrySend(to, h, payload)
}

func (k *keyed) Recv(ctx context.Context, from int) (transport.Frame, error) {
	return k.mux.Recv(ctx, from, k.key)
}

// newCall makes the network of collective seq: the job's transport seen
// through the Comm's key, over the ranks that take part.
func (c *Comm) newCall(seq uint32, o ring.Options) (*call, error) {
	x := c.spare.Swap(nil)
	if x == nil {
		x = &call{c: c, k: keyed{tr: c.tr, mux: c.mux}}
	}
	x.o, x.k.key = o, transport.Key{Comm: c.id, Seq: seq}
	var n ring.Transport = &x.k
	ranks := c.members
	if c.el != nil {
		v := c.el.installed.Load()
		n, ranks = &epochNet{e: c.el, base: n, epoch: uint32(v.Epoch)}, v.Ranks
	}
	if ranks != nil {
		g, err := ring.NewGroup(n, ranks)
		if err != nil {
			return nil, err
		}
		n = g
	}
	x.net = n
	return x, nil
}

// doom, once err is ErrViewChanged, makes every nonblocking collective
// that runs before the program's next blocking call fail with
// ErrViewChanged without moving data: the program redoes its step on the
// new view (after a Resync, a blocking call), and every rank drops the
// same collectives, whichever of them it first saw fail.
func (c *Comm) doom(err error) {
	if errors.Is(err, ErrViewChanged) {
		c.doomed.Store(true)
	}
}

// free keeps x for the Comm's next call: the executors are done with a
// call's network when they return (they wait for their own senders).
func (x *call) free() {
	x.c.spare.Store(x) // it holds nothing but the Comm's own
}

// tiers is the node-aware layout of the call (the Comm's topology must
// be node-aware).
func (x *call) tiers() (ring.Tiers, error) {
	t := x.c.topo
	local, err := ring.NewGroup(x.net, t.local)
	if err != nil {
		return ring.Tiers{}, err
	}
	cross, err := ring.NewGroup(x.net, t.cross)
	if err != nil {
		return ring.Tiers{}, err
	}
	return ring.Tiers{Local: local, Cross: cross, Hosts: t.hosts}, nil
}

// start places a collective in the Comm's order. The caller runs it
// (run) inline or in a goroutine. A blocking call's op needs no channel:
// nobody waits on it but its caller.
func (c *Comm) start(op *Handle, kind uint8, h transport.Header) {
	op.c, op.kind, op.hdr = c, kind, h
	op.hdr.Kind = kind
	if c.isClosed() {
		// (One that slips past Close here finds it in execute.)
		op.err = fmt.Errorf("collective: rank %d: %s: %w", c.cfg.Rank, kindName[kind], ErrClosed)
		op.failed = true
		return
	}
	op.idx = c.nstart.Add(1) - 1
	op.serial = c.el != nil || c.useHub.Load() || c.root != nil && c.root.el != nil
	if c.el == nil {
		// An elastic Comm numbers its collectives as they run (execute).
		op.hdr.Seq = c.seqBase + uint32(op.idx) + 1
	}
}

func (c *Comm) isClosed() bool {
	select {
	case <-c.closed:
		return true
	default:
		return false
	}
}

// waitFor waits until every collective started before number idx has
// finished. It gives up when the Comm closes, ctx ends (ok false) or the
// order is broken (a collective gave up waiting: the Comm has failed,
// and order no longer matters).
func (c *Comm) waitFor(ctx context.Context, idx uint64) (ok bool) {
	if c.nfinish.Load() >= idx {
		return true
	}
	c.mu.Lock()
	c.waiting.Add(1)
	defer c.waiting.Add(-1)
	for c.nfinish.Load() < idx && !c.unordered {
		if c.progress == nil {
			c.progress = make(chan struct{})
		}
		p := c.progress
		c.mu.Unlock()
		select {
		case <-p:
		case <-c.closed:
			return false
		case <-ctx.Done():
			return false
		}
		c.mu.Lock()
	}
	c.mu.Unlock()
	return true
}

// finished marks collective idx finished (they finish in order; one that
// gave up may come late).
func (c *Comm) finished(idx uint64) {
	for {
		n := c.nfinish.Load()
		if n >= idx+1 || c.nfinish.CompareAndSwap(n, idx+1) {
			break
		}
	}
	if c.waiting.Load() > 0 {
		c.wake()
	}
}

func (c *Comm) wake() {
	c.mu.Lock()
	if c.progress != nil {
		close(c.progress)
		c.progress = nil
	}
	c.mu.Unlock()
}

// isUnordered reports whether giveUp broke the order.
func (c *Comm) isUnordered() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.unordered
}

// giveUp breaks the order for good: collectives no longer wait for those
// before them.
func (c *Comm) giveUp() {
	c.mu.Lock()
	c.unordered = true
	c.mu.Unlock()
	c.wake()
}

// run runs a started collective and finishes it: after every collective
// started before it. Any failure is sent to every peer (so that none of
// them waits for this rank) and breaks the Comm; Close during a
// collective returns ErrClosed and tells the peers nothing more than the
// closing does.
func (c *Comm) run(ctx context.Context, op *Handle, f func(ctx context.Context, x *call) error) {
	if op.failed { // failed at start
		c.done(op)
		return
	}
	if op.serial && !c.waitFor(ctx, op.idx) {
		op.err = c.gaveUp(ctx, op)
		c.done(op)
		c.finished(op.idx)
		return
	}
	if op.serial && c.isUnordered() {
		// A collective before it gave up: the order is broken (and the
		// Comm with it). Serial collectives share the Comm's sequence and
		// view, so none may run beside another: it fails instead.
		op.err = fmt.Errorf("collective: rank %d: %s: a collective before it gave up waiting, which broke the Comm: %w", c.cfg.Rank, kindName[op.kind], cmp.Or(c.tr.Err(), ErrClosed))
		c.done(op)
		c.finished(op.idx)
		return
	}
	op.err = c.execute(ctx, op, f)
	if !op.serial {
		// Complete in the order started (the one before ends, well or
		// not, since a failure anywhere fails every collective).
		c.waitFor(ctx, op.idx)
	}
	if op.err == nil && op.after != nil {
		op.after()
	}
	c.done(op) // before the next one can finish
	c.finished(op.idx)
}

// done signals an async op's handle.
func (c *Comm) done(op *Handle) {
	if op.done != nil {
		op.end = time.Now()
		close(op.done)
	}
}

// gaveUp is the error of op that stopped waiting for the collective
// before it. Giving up (ctx ended) breaks the Comm like any other
// failure: this rank will never issue the collective its peers expect
// next, so they are told.
func (c *Comm) gaveUp(ctx context.Context, op *Handle) error {
	c.giveUp()
	if c.isClosed() {
		return fmt.Errorf("collective: rank %d: %s: %w", c.cfg.Rank, kindName[op.kind], ErrClosed)
	}
	err := fmt.Errorf("rank %d: %s: gave up waiting for the collective before it: %w", c.cfg.Rank, kindName[op.kind], context.Cause(ctx))
	c.tr.Abort(err)
	return fmt.Errorf("collective: %w", err)
}

// do runs one collective to its end: start and run in the caller's
// goroutine.
func (c *Comm) do(ctx context.Context, kind uint8, f func(ctx context.Context, x *call) error, h transport.Header) error {
	var op Handle
	c.start(&op, kind, h)
	c.run(ctx, &op, f) // f stays on the caller's stack
	return op.err
}

// async starts a collective in a goroutine of its own and returns its
// handle; after runs once it succeeded.
func (c *Comm) async(ctx context.Context, kind uint8, f func(ctx context.Context, x *call) error, h transport.Header, after func()) *Handle {
	op := &Handle{done: make(chan struct{}), after: after}
	c.start(op, kind, h)
	if op.failed {
		c.done(op)
		return op
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.run(ctx, op, f)
	}()
	return op
}

// execute runs op's algorithm and turns its failure into the Comm's.
func (c *Comm) execute(ctx context.Context, op *Handle, f func(ctx context.Context, x *call) error) error {
	kind, h := op.kind, op.hdr
	if c.isClosed() {
		return fmt.Errorf("collective: rank %d: %s: %w", c.cfg.Rank, kindName[kind], ErrClosed)
	}
	userCtx := ctx
	if c.el != nil {
		if op.done == nil {
			// A blocking call: the program has seen the change (its
			// Resync, say); what it starts from now runs on the new view.
			c.doomed.Store(false)
		} else if c.doomed.Load() {
			// Started after a collective returned ErrViewChanged and
			// before the program's next blocking call: it belongs to the
			// interrupted step, which every rank drops the same way.
			v := c.el.installed.Load()
			return fmt.Errorf("collective: rank %d: %s: %w (started in the interrupted step; now epoch %d, ranks %v)", c.cfg.Rank, kindName[kind], ErrViewChanged, v.Epoch, v.Ranks)
		}
		var done func()
		var err error
		if ctx, done, err = c.el.begin(ctx, kind); err != nil {
			c.doom(err)
			return err
		}
		defer done()
		c.seq = c.el.seqBase | (c.seq+1)&seqMask
		h.Seq = c.seq
	}
	if pe := c.parentElastic(); pe != nil {
		var stop func()
		var err error
		if ctx, stop, err = c.childBegin(ctx, pe, kind); err != nil {
			return err
		}
		defer stop()
	}
	if err := c.tr.Err(); err != nil {
		return fmt.Errorf("collective: rank %d: %s #%d: %w", c.cfg.Rank, kindName[kind], h.Seq&seqMask, err)
	}
	var began, waited int64
	if c.rec != nil || c.timed {
		began, waited = tick.Now(), c.waited.Total()
	}
	if c.page != nil { // the arguments cost map lookups: none without a page
		c.page.Begin(uint64(h.Seq), kindName[kind], dtypeName(h.DType), int(h.Count)*reduce.Size(h.DType))
	}
	x, err := c.newCall(h.Seq, ring.Options{Header: h, SegmentBytes: c.cfg.SegmentBytes})
	if err == nil {
		err = f(ctx, x)
		x.free()
	}
	if c.rec != nil {
		c.recMu.Lock()
		c.rec.CommCollective(c.id, kind, h.DType, c.useHub.Load(), h.Seq, uint64(int(h.Count)*reduce.Size(h.DType)), began, tick.Now(), c.waited.Total()-waited)
		c.recMu.Unlock()
	}
	if c.timed {
		c.page.Time(tick.Now()-began, c.waited.Total()-waited)
	}
	c.page.End(uint64(h.Seq))
	if err == nil {
		return nil
	}
	return c.opFailed(userCtx, kind, h, err)
}

// opFailed turns a collective's failure into its error, and into the
// Comm's: Close's if the Comm closed under it, a view change's on an
// elastic job, else the job's abort (told to the peers and the hubs
// before the program sees it).
func (c *Comm) opFailed(userCtx context.Context, kind uint8, h transport.Header, err error) error {
	seq := h.Seq & seqMask
	if c.isClosed() {
		// Closed under the call: whatever the transport or the hubs said
		// as they shut down, the cause is Close, and the closing tells the
		// peers all they need.
		if !errors.Is(err, ErrClosed) {
			err = fmt.Errorf("%w (%v)", ErrClosed, err)
		}
		return fmt.Errorf("collective: rank %d: %s #%d: %w", c.cfg.Rank, kindName[kind], seq, err)
	}
	if c.el != nil && userCtx.Err() == nil {
		if verr, ok := c.el.viewChange(userCtx, kind, h.Seq, err); ok {
			c.doom(verr)
			return verr
		}
	}
	if pe := c.parentElastic(); pe != nil && userCtx.Err() == nil {
		if verr, ok := c.childViewChange(pe, kind, seq, err); ok {
			return verr
		}
	}
	why := fmt.Errorf("rank %d: %s #%d: %w", c.cfg.Rank, kindName[kind], seq, err)
	if c.tr.Err() == nil {
		c.tr.Abort(why)
	} else if n, ok := c.tr.(interface{ WaitNotices() }); ok {
		// Another rank's abort reached this one and is being passed on:
		// let it out before the program, which may exit on this error,
		// gets it (otherwise peers see this rank's end first and blame it).
		n.WaitNotices()
	}
	if c.hub != nil && !c.cfg.HubElastic {
		// Tell the hubs why before returning (the watcher would too, but
		// a rank that exits on this error could beat it, and the hubs
		// would then blame this rank's broken connection).
		c.hub.Fail(why)
	}
	return fmt.Errorf("collective: %w", why)
}
