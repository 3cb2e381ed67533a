package ps

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorun/gorun/internal/cpu"
	"github.com/gorun/gorun/internal/jobsecret"
	"github.com/gorun/gorun/reduce"
	"github.com/gorun/gorun/transport"
	"github.com/gorun/gorun/transport/liveness"
	"github.com/gorun/gorun/transport/shm"
	"github.com/gorun/gorun/transport/wire"
)

// ClientConfig configures a worker's connection to the job's hubs.
type ClientConfig struct {
	Worker, Workers int
	Hubs            []string // hub i listens at Hubs[i]
	JobID           string
	Secret          []byte
	// PartitionBytes is the largest piece of a tensor sent to one hub in
	// one message (counted in float32 elements for keys). Keys are cut
	// into partitions of exactly this size; collective rounds into
	// RoundPartitionsPerHub partitions per hub, none larger than this (see
	// RoundPartitionBytes). Pushing one partition overlaps pulling the
	// previous one.
	PartitionBytes int
	// RoundPartitionsPerHub is about how many partitions per hub a
	// collective round is cut into, none larger than PartitionBytes nor
	// smaller than RoundPartitionBytes' floor: the partition size follows
	// the round's size. 0 cuts every round into partitions of
	// PartitionBytes (the size is then fixed, as keys' are).
	RoundPartitionsPerHub int
	// RoundSpreadBytes keeps a round's share of each hub in one partition
	// up to RoundSpreadBytes/hubs bytes (RoundPartitionBytes' floor, never
	// below MinRoundPartitionBytes): the default, RoundSpreadBytes, suits
	// hubs reached through shared memory; 0 suits the network. Every
	// worker must use the same.
	RoundSpreadBytes int
	// RoundWindow is how many partitions of a collective round a worker
	// has outstanding on one hub at a time; the next goes when an answer
	// comes back. 0 sends them all at once, as does a hub reached through
	// shared memory.
	RoundWindow int
	MaxFrame    int
	// ConnectTimeout bounds Dial: hubs that are not up yet are retried.
	ConnectTimeout   time.Duration
	HandshakeTimeout time.Duration
	// HubTimeout: a hub that sends nothing for this long while a request
	// is outstanding is lost (it is pinged after a third of it). On a busy
	// host the window stretches as the transport's confirmation windows
	// do (liveness.DefaultPolicy: by the host's load and by how long this
	// worker itself was kept from running), up to liveness.MaxStretch
	// times: a starved hub is slow, not lost.
	HubTimeout time.Duration
	// Dial, if set, replaces TCP: collective.NewLocal connects to hubs
	// listening on mem.Listener with it.
	Dial wire.DialFunc
	// Shm moves a connection's bytes through shared memory when its hub
	// is on this host (Shm.Enabled; JobID, Name and Timeout are filled
	// in). Every connection negotiates, whatever the settings, so hubs
	// and workers must both be of this version.
	Shm shm.Options
	// Metrics, if set, receives one JSON line per iteration (see Tick).
	Metrics io.Writer
	// Trace, if set, is told of every request when it completes ("push",
	// "pull"; PushPull counts as a push) and of every Wait ("wait"), with
	// when it started and how long it took (gorun --timeline).
	Trace func(what string, start time.Time, took time.Duration)
	// Traffic, if set, is told the payload bytes of every push, pull and
	// collective part this worker sends to or receives from a hub, as
	// they are counted (gorun --metrics). It is called from the caller's
	// and the client's goroutines at once: it must be safe for concurrent
	// use, and quick.
	Traffic func(sent, received int64)
	Logger  *slog.Logger

	// load, if set, replaces the host's load read for the hub window
	// (tests).
	load func() liveness.Load
}

// DefaultClientConfig returns the defaults for everything but the job's
// identity and its hubs.
func DefaultClientConfig() ClientConfig {
	return ClientConfig{
		PartitionBytes:        4 << 20,
		RoundPartitionsPerHub: 32,
		RoundSpreadBytes:      RoundSpreadBytes,
		RoundWindow:           4,
		MaxFrame:              wire.DefaultMaxPayload + FrameSlack,
		ConnectTimeout:        30 * time.Second,
		HandshakeTimeout:      5 * time.Second,
		HubTimeout:            3 * time.Second,
	}
}

func (c *ClientConfig) validate() error {
	switch {
	case c.Workers < 1 || c.Worker < 0 || c.Worker >= c.Workers:
		return fmt.Errorf("ps: worker %d out of range for %d workers", c.Worker, c.Workers)
	case len(c.Hubs) == 0:
		return errors.New("ps: no hubs given")
	case c.JobID == "" || jobsecret.Check(c.Secret) != nil:
		return errors.New("ps: job id missing or job secret shorter than 16 bytes")
	case c.PartitionBytes < 8 || c.PartitionBytes+msgHeaderSize+maxKeyLen+8 > c.MaxFrame:
		return fmt.Errorf("ps: PartitionBytes %d must be at least 8 and fit in MaxFrame %d", c.PartitionBytes, c.MaxFrame)
	case c.RoundPartitionsPerHub < 0 || c.RoundWindow < 0 || c.RoundSpreadBytes < 0:
		return fmt.Errorf("ps: RoundPartitionsPerHub %d, RoundWindow %d and RoundSpreadBytes %d must not be negative", c.RoundPartitionsPerHub, c.RoundWindow, c.RoundSpreadBytes)
	case c.ConnectTimeout <= 0 || c.HandshakeTimeout <= 0 || c.HubTimeout <= 0:
		return errors.New("ps: timeouts must be positive")
	}
	return nil
}

// Client is one worker's handle on the hubs. Its methods are safe for
// concurrent use.
type Client struct {
	cfg  ClientConfig
	log  *slog.Logger
	hubs []*hubLink

	mu     sync.Mutex
	keys   map[string]*keyState   // declared: accepted by every hub
	placed map[string][]Partition // every key a Declare placed, accepted or not
	place  *Placement             // of the keys

	failOnce sync.Once
	failed   chan struct{}
	err      error
	// settleOnce settles, once, the sparse pushes in flight when the
	// client failed (settleAcked), after every connection has stopped.
	settleOnce sync.Once

	closeOnce sync.Once
	closing   chan struct{}
	wg        sync.WaitGroup

	iter       iterCounters
	shareClock atomic.Uint32
	relaxed    atomic.Int64 // Share answers whose deadline was relaxed
	mmu        sync.Mutex
	metrics    []Metrics
	zstd       zstdCodec // sparse pushes' CodecZstd
}

type keyState struct {
	cfg    KeyConfig
	parts  []Partition
	clock  int
	sparse *sparseState // a sparse key's pushes and residual
}

type hubLink struct {
	idx     int
	addr    string
	l       *link
	gone    chan struct{} // closed when the reader stops reading (stopReading)
	goneOne sync.Once
	mu      sync.Mutex
	pending map[uint32]*call
	nextID  uint32
	// unacked counts the pending calls whose ack has not run; drained, if
	// not nil, is closed when it drops to zero (Close waits on it).
	unacked   int
	drained   chan struct{}
	shm       bool // the connection runs over shared memory
	lastHeard atomic.Int64
	sent      atomic.Int64
	recvd     atomic.Int64
}

type call struct {
	h     *Handle
	on    func(m *message) // consumes a reply's data; runs under h.mu
	want  int              // bytes of data the reply must carry; -1: any
	wire  uint8            // the wire format the reply must carry (the request's)
	after func()           // if set, runs once the reply is taken, whatever it was
	// ack, if set, runs exactly once when the call's push is settled
	// (takeAck): applied true when the hub said it applied the push
	// (msgPushed, an answer, an error after the push), false for an error
	// before it; if the client fails first, settleAcked decides.
	ack func(applied bool)
	// written is set once the request is written to the connection (the
	// link runs its message's release): a hub may have it.
	written atomic.Bool
}

// takeAck takes cl's ack, with h.mu held: nil if it has run or been
// taken. Whoever takes it runs it, once.
func (h *hubLink) takeAck(cl *call) func(bool) {
	if cl == nil || cl.ack == nil {
		return nil
	}
	a := cl.ack
	cl.ack = nil
	h.unacked--
	if h.unacked == 0 && h.drained != nil {
		close(h.drained)
		h.drained = nil
	}
	return a
}

// stopReading closes gone, once: h's reader reads no more.
func (h *hubLink) stopReading() { h.goneOne.Do(func() { close(h.gone) }) }

// awaitAcks waits until hub h has settled every push sent to it (each
// call's ack has run), h's reader has stopped, the client has failed,
// or d has passed.
func (c *Client) awaitAcks(h *hubLink, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	h.mu.Lock()
	if h.unacked == 0 {
		h.mu.Unlock()
		return
	}
	if h.drained == nil {
		h.drained = make(chan struct{})
	}
	drained := h.drained
	h.mu.Unlock()
	select {
	case <-drained:
	case <-h.gone:
	case <-c.failed:
	case <-t.C:
	}
}

// Dial connects worker cfg.Worker to every hub.
func Dial(ctx context.Context, cfg ClientConfig) (*Client, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	place, err := NewPlacement(len(cfg.Hubs), max(1, cfg.PartitionBytes/4))
	if err != nil {
		return nil, err
	}
	c := &Client{place: place,
		cfg: cfg, log: log, keys: map[string]*keyState{}, placed: map[string][]Partition{},
		failed: make(chan struct{}), closing: make(chan struct{}),
		hubs: make([]*hubLink, len(cfg.Hubs)),
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	errs := make([]error, len(cfg.Hubs))
	var wg sync.WaitGroup
	for i, addr := range cfg.Hubs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.dial(ctx, i, addr)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.Close()
		return nil, err
	}
	c.wg.Add(1)
	go c.watchdog()
	return c, nil
}

func (c *Client) dial(ctx context.Context, i int, addr string) error {
	conn, err := wire.DialAuth(ctx, c.cfg.Dial, addr, c.cfg.JobID, c.cfg.Secret, wire.Ends{From: c.cfg.Worker, To: HubTag + i, Size: c.cfg.Workers}, c.cfg.HandshakeTimeout, c.cfg.HandshakeTimeout)
	if err != nil {
		return fmt.Errorf("ps: worker %d: hub %d: %w", c.cfg.Worker, i, err)
	}
	o := c.cfg.Shm
	o.JobID, o.Name, o.Timeout = c.cfg.JobID, fmt.Sprintf("w%d-hub%d", c.cfg.Worker, i), c.cfg.HandshakeTimeout
	if o.Logger == nil {
		o.Logger = c.log
	}
	if conn, err = shm.Offer(ctx, conn, o); err != nil {
		return fmt.Errorf("ps: worker %d: hub %d: %w", c.cfg.Worker, i, err)
	}
	hl := &hubLink{idx: i, addr: addr, pending: map[uint32]*call{}, shm: shm.IsConn(conn), gone: make(chan struct{})}
	hl.l = newLink(conn, c.cfg.MaxFrame, nil)
	hl.lastHeard.Store(time.Now().UnixNano())
	c.mu.Lock()
	c.hubs[i] = hl
	c.mu.Unlock()
	c.wg.Add(1)
	go c.reader(hl)
	return nil
}

// SharedMemoryHubs lists the hubs whose connection runs over shared
// memory (hubs on this host, when both ends allow it).
func (c *Client) SharedMemoryHubs() []int {
	var out []int
	for _, h := range c.links() {
		if h.shm {
			out = append(out, h.idx)
		}
	}
	return out
}

// Err is the error that broke the client, or nil.
func (c *Client) Err() error {
	select {
	case <-c.failed:
		return c.err
	default:
		return nil
	}
}

// Fail breaks the client with err: every pending and later call returns
// it. The collective package calls it when gossip declares a rank dead.
// It returns once every connection is closed (within about 200 ms) and
// every sparse push in flight is settled into its residual (see
// settleAcked).
func (c *Client) Fail(err error) {
	c.failOnce.Do(func() {
		c.err = err
		close(c.failed)
		// Last words: the hubs tell the other workers why, instead of
		// blaming this one for a broken connection.
		var wg sync.WaitGroup
		for _, h := range c.links() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.hangUp(h, outFrame{typ: transport.TypeAbort, hdr: transport.EncodeAbort(err)}, 200*time.Millisecond)
			}()
		}
		wg.Wait()
		c.settle()
	})
}

// hangUp queues last (a goodbye or last words) after whatever is queued
// on h, and closes the connection once the hub has read it all: when the
// hub closes its end (h's reader stops), or after d. Closing sooner
// could lose what was written: a socket closed with answers unread is
// reset, and the kernel drops what it had not yet sent. A hub closes its
// end once it has read a goodbye or last words, after what came before
// them, so unless d passes first a live hub has read every request
// written before hangUp returns.
func (c *Client) hangUp(h *hubLink, last outFrame, d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	h.l.queue(last)
	h.l.kill()
	select {
	case <-h.l.done: // all written
	case <-ctx.Done():
	}
	select {
	case <-h.gone:
	case <-ctx.Done():
	}
	_ = h.l.c.Close()
	<-h.l.done
}

// settle settles, once, the sparse pushes left in flight once the client
// has failed and its connections have stopped.
func (c *Client) settle() { c.settleOnce.Do(func() { c.settleAcked(c.err) }) }

func (c *Client) links() []*hubLink {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*hubLink
	for _, h := range c.hubs {
		if h != nil {
			out = append(out, h)
		}
	}
	return out
}

// Close says goodbye to every hub and releases the connections. It first
// waits, at most ClientConfig.HubTimeout, for each hub to acknowledge the
// sparse pushes it was sent (that it applied them, or not), so that each
// residual knows what landed; then each hub gets at most 2 s to take the
// goodbye, every hub at once. A request waiting in another goroutine
// returns ErrClosed. Close is idempotent and waits for the client's
// goroutines; once it returns every sparse push is settled.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		close(c.closing)
		var wg sync.WaitGroup
		for _, h := range c.links() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.awaitAcks(h, c.cfg.HubTimeout)
				c.hangUp(h, outFrame{typ: transport.TypeBye}, 2*time.Second)
			}()
		}
		wg.Wait()
		c.Fail(ErrClosed)
		c.settle() // (if the client had failed without settling)
		c.wg.Wait()
	})
	return nil
}

func (c *Client) reader(h *hubLink) {
	defer c.wg.Done()
	defer h.stopReading()
	for {
		// Every answer's data is copied out (into the caller's buffer, or
		// an error's text) before the next frame: its buffer goes back.
		fh, p, err := h.l.r.Next(transport.GetBuf)
		if err != nil {
			h.stopReading() // before Fail, which waits for it
			select {
			case <-c.closing:
			case <-c.failed:
			default:
				reason := "connection lost: " + err.Error()
				if errors.Is(err, wire.ErrFrame) {
					reason = "sent a malformed frame: " + err.Error()
				}
				c.Fail(&HubLostError{Hub: h.idx, Addr: h.addr, Reason: reason})
			}
			return
		}
		h.lastHeard.Store(time.Now().UnixNano())
		if fh.Type != transport.TypeData {
			transport.PutBuf(p)
			continue // pong, bye
		}
		if err := c.answer(h, p); err != nil {
			h.stopReading()
			c.Fail(err)
			return
		}
		transport.PutBuf(p)
	}
}

// answer acts on one answer from hub h, p a frame's payload; an error
// if the hub broke the protocol, for the reader to fail the client with.
// Nothing refers to p when it returns.
func (c *Client) answer(h *hubLink, p []byte) error {
	m, err := decodeMessage(p)
	if err != nil {
		return &HubLostError{Hub: h.idx, Addr: h.addr, Reason: "sent a malformed reply: " + err.Error()}
	}
	h.recvd.Add(int64(len(m.Data)))
	h.mu.Lock()
	cl := h.pending[m.ID]
	if m.Type == msgPushed {
		// The push is applied; the pull's answer follows.
		ack := h.takeAck(cl)
		h.mu.Unlock()
		if ack != nil {
			ack(true)
		}
		return nil
	}
	delete(h.pending, m.ID)
	ack := h.takeAck(cl)
	h.mu.Unlock()
	if m.Type == msgError {
		var herr error = &HubError{Hub: h.idx, Code: m.Code, Msg: string(m.Data)}
		if m.Kind&errCorruptFlag != 0 {
			herr = &hubCorruptError{herr.(*HubError)}
		}
		if cl == nil {
			return herr
		}
		if ack != nil {
			ack(m.Kind&errPushed != 0)
		}
		cl.h.finish(herr, nil)
		if cl.after != nil {
			cl.after()
		}
		return nil
	}
	if cl == nil {
		return nil // the answer to a request given up on
	}
	if ack != nil {
		ack(true)
	}
	if cl.want >= 0 && len(m.Data) != cl.want {
		lost := &HubLostError{Hub: h.idx, Addr: h.addr, Reason: fmt.Sprintf("sent %d bytes where %d were due", len(m.Data), cl.want)}
		cl.h.finish(lost, nil)
		return lost
	}
	if m.Wire != cl.wire {
		lost := &HubLostError{Hub: h.idx, Addr: h.addr, Reason: fmt.Sprintf("answered in wire format %v where %v was due", reduce.Wire(m.Wire), reduce.Wire(cl.wire))}
		cl.h.finish(lost, nil)
		return lost
	}
	// on copies the data out (pullInto, a collective round's copy, a
	// share's count): it keeps no reference to p.
	cl.h.finish(nil, func() {
		if cl.on != nil {
			cl.on(&m)
		}
		if m.Stale > 0 {
			c.iter.maxStale(int(m.Stale))
		}
	})
	if cl.after != nil {
		cl.after()
	}
	return nil
}

// watchdog pings hubs that owe an answer and declares lost the ones that
// stay silent for the hub window: HubTimeout, stretched by the host's
// load and this worker's own stalls (hubWindow).
func (c *Client) watchdog() {
	defer c.wg.Done()
	period := c.cfg.HubTimeout / 6
	t := time.NewTicker(period)
	defer t.Stop()
	last := time.Now()
	var stall time.Duration // how late this watchdog ran lately
	for {
		select {
		case <-c.failed:
			return
		case <-t.C:
		}
		now := time.Now()
		// A tick that came late says this worker was kept from running
		// that long; it counts for a while (forgotten at the rate time
		// passes), so that the window after a stall is as long.
		stall = max(now.Sub(last)-period, stall-now.Sub(last), 0)
		last = now
		n, cpus := cpu.Host() // now or over the last minute, whichever is more
		load := liveness.Load{Runnable: n, CPUs: cpus}
		if c.cfg.load != nil {
			load = c.cfg.load()
		}
		window := hubWindow(c.cfg.HubTimeout, load, stall)
		for _, h := range c.links() {
			h.mu.Lock()
			waiting := len(h.pending) > 0
			h.mu.Unlock()
			silent := time.Duration(now.UnixNano() - h.lastHeard.Load())
			switch {
			case !waiting:
			case silent > window:
				c.Fail(&HubLostError{Hub: h.idx, Addr: h.addr, Reason: fmt.Sprintf("no answer for %v", silent.Round(time.Millisecond))})
				return
			case silent > window/3:
				h.l.control(transport.TypePing)
			}
		}
	}
}

// hubWindow is how long a hub that owes an answer may stay silent before
// it is lost: the transport's rule for a peer's confirmation window
// (liveness.DefaultPolicy), with base as the window of an idle host.
func hubWindow(base time.Duration, load liveness.Load, stall time.Duration) time.Duration {
	return max(liveness.DefaultPolicy(liveness.Observation{Base: base, Load: load, Stall: stall, Connected: true}), base)
}

// send registers a call on hub i and queues m.
func (c *Client) send(i int, m *message, h *Handle, on func(*message), want int) {
	c.sendAfter(i, m, h, on, want, nil)
}

// sendAfter is send with a function to run when the reply has been taken.
func (c *Client) sendAfter(i int, m *message, h *Handle, on func(*message), want int, after func()) {
	c.sendCall(i, m, &call{h: h, on: on, want: want, wire: m.Wire, after: after})
}

// sendCall registers cl on hub i and queues m. A call with an ack made
// once the client has failed is settled at once instead: never sent, not
// applied.
func (c *Client) sendCall(i int, m *message, cl *call) {
	h := cl.h
	hl := c.hubs[i]
	hl.mu.Lock()
	if cl.ack != nil && c.Err() != nil {
		hl.mu.Unlock()
		cl.ack(false)
		h.finish(c.err, nil)
		return
	}
	if len(hl.pending) == 0 {
		hl.lastHeard.Store(time.Now().UnixNano())
	}
	hl.nextID++
	m.ID = hl.nextID
	hl.pending[m.ID] = cl
	if cl.ack != nil {
		hl.unacked++
	}
	hl.mu.Unlock()
	// Counted when queued: a call's bytes are all counted when its answer
	// arrives, whatever the writer is doing.
	hl.sent.Add(int64(len(m.Data)))
	if !hl.l.send(m) {
		h.finish(c.errOr(&HubLostError{Hub: i, Addr: hl.addr, Reason: "connection closed"}), nil)
	}
}

// settleAcked settles every pending call whose ack has not run, once the
// client has failed with err and every connection's writer has stopped
// (Fail calls it; a call made later is settled by sendCall): no answer
// will come. A push never written to its connection was not applied, and
// goes back into the residual. A push written and not acknowledged is
// the ambiguous case: it counts as applied, and is never restored. A hub
// that read it applies it before it hears that this worker has gone (a
// closed connection or an abort comes after it), so this is right
// whenever the hub lives; if the hub died, or refused it without this
// worker hearing, that partition of that one push is lost once, which
// error feedback tolerates. Restoring it instead would count it twice
// whenever the hub lives. Either way the call's handle fails with err.
func (c *Client) settleAcked(err error) {
	for _, hl := range c.links() {
		type settling struct {
			cl  *call
			ack func(bool)
		}
		var calls []settling
		hl.mu.Lock()
		for id, cl := range hl.pending {
			if ack := hl.takeAck(cl); ack != nil {
				calls = append(calls, settling{cl, ack})
				delete(hl.pending, id)
			}
		}
		hl.mu.Unlock()
		for _, s := range calls {
			s.ack(s.cl.written.Load())
			s.cl.h.finish(err, nil)
		}
	}
}

func (c *Client) errOr(err error) error {
	if e := c.Err(); e != nil {
		return e
	}
	return err
}
