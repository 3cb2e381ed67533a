package ps

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorun/gorun/reduce"
	"github.com/gorun/gorun/transport"
)

// ClientConfig configures a worker's connection to the job's hubs.
type ClientConfig struct {
	Worker, Workers int
	Hubs            []string // hub i listens at Hubs[i]
	JobID           string
	Secret          []byte
	// PartitionBytes is the largest piece of a tensor sent to one hub in
	// one message (counted in float32 elements for keys). Pushing one
	// partition overlaps pulling the previous one.
	PartitionBytes int
	MaxFrame       int
	// ConnectTimeout bounds Dial: hubs that are not up yet are retried.
	ConnectTimeout   time.Duration
	HandshakeTimeout time.Duration
	// HubTimeout: a hub that sends nothing for this long while a request
	// is outstanding is lost (it is pinged after half of it).
	HubTimeout time.Duration
	// Metrics, if set, receives one JSON line per iteration (see Tick).
	Metrics io.Writer
	Logger  *slog.Logger
}

// DefaultClientConfig returns the defaults for everything but the job's
// identity and its hubs.
func DefaultClientConfig() ClientConfig {
	return ClientConfig{
		PartitionBytes:   4 << 20,
		MaxFrame:         transport.DefaultMaxPayload + FrameSlack,
		ConnectTimeout:   30 * time.Second,
		HandshakeTimeout: 5 * time.Second,
		HubTimeout:       3 * time.Second,
	}
}

func (c *ClientConfig) validate() error {
	switch {
	case c.Workers < 1 || c.Worker < 0 || c.Worker >= c.Workers:
		return fmt.Errorf("ps: worker %d out of range for %d workers", c.Worker, c.Workers)
	case len(c.Hubs) == 0:
		return errors.New("ps: no hubs given")
	case c.JobID == "" || len(c.Secret) < 16:
		return errors.New("ps: job id missing or job secret shorter than 16 bytes")
	case c.PartitionBytes < 8 || c.PartitionBytes+msgHeaderSize+maxKeyLen+8 > c.MaxFrame:
		return fmt.Errorf("ps: PartitionBytes %d must be at least 8 and fit in MaxFrame %d", c.PartitionBytes, c.MaxFrame)
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

	mu    sync.Mutex
	keys  map[string]*keyState
	place *Placement // of the keys

	failOnce sync.Once
	failed   chan struct{}
	err      error

	closeOnce sync.Once
	closing   chan struct{}
	wg        sync.WaitGroup

	iter       iterCounters
	shareClock atomic.Uint32
	mmu        sync.Mutex
	metrics    []Metrics
}

type keyState struct {
	cfg   KeyConfig
	parts []Partition
	clock int
}

type hubLink struct {
	idx       int
	addr      string
	l         *link
	mu        sync.Mutex
	pending   map[uint32]*call
	nextID    uint32
	lastHeard atomic.Int64
	sent      atomic.Int64
	recvd     atomic.Int64
}

type call struct {
	h    *Handle
	on   func(m *message) // consumes a reply's data; runs under h.mu
	want int              // bytes of data the reply must carry; -1: any
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
		cfg: cfg, log: log, keys: map[string]*keyState{},
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
	conn, err := transport.DialAuth(ctx, addr, c.cfg.JobID, c.cfg.Secret, transport.Ends{From: c.cfg.Worker, To: HubTag + i, Size: c.cfg.Workers}, c.cfg.HandshakeTimeout, c.cfg.HandshakeTimeout)
	if err != nil {
		return fmt.Errorf("ps: worker %d: hub %d: %w", c.cfg.Worker, i, err)
	}
	hl := &hubLink{idx: i, addr: addr, pending: map[uint32]*call{}}
	hl.l = newLink(conn, c.cfg.MaxFrame, nil)
	hl.lastHeard.Store(time.Now().UnixNano())
	c.mu.Lock()
	c.hubs[i] = hl
	c.mu.Unlock()
	c.wg.Add(1)
	go c.reader(hl)
	return nil
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
func (c *Client) Fail(err error) {
	c.failOnce.Do(func() {
		c.err = err
		close(c.failed)
		// Last words: the hubs tell the other workers why, instead of
		// blaming this one for a broken connection.
		for _, h := range c.links() {
			h.l.queue(outFrame{typ: transport.TypeAbort, hdr: transport.EncodeAbort(err)})
			h.l.close(200 * time.Millisecond)
		}
	})
}

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

// Close says goodbye to every hub and releases the connections; it takes
// at most about 2 s, however many hubs there are. A request waiting in
// another goroutine returns ErrClosed. Close is idempotent and waits for
// the client's goroutines.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		close(c.closing)
		// Every hub at once: each gets at most 2 s to take the goodbye.
		var wg sync.WaitGroup
		for _, h := range c.links() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				h.l.control(transport.TypeBye)
				h.l.close(2 * time.Second)
			}()
		}
		wg.Wait()
		c.Fail(ErrClosed)
		c.wg.Wait()
	})
	return nil
}

func (c *Client) reader(h *hubLink) {
	defer c.wg.Done()
	for {
		fh, p, err := h.l.r.Next(nil)
		if err != nil {
			select {
			case <-c.closing:
			default:
				reason := "connection lost: " + err.Error()
				if errors.Is(err, transport.ErrFrame) {
					reason = "sent a malformed frame: " + err.Error()
				}
				c.Fail(&HubLostError{Hub: h.idx, Addr: h.addr, Reason: reason})
			}
			return
		}
		h.lastHeard.Store(time.Now().UnixNano())
		if fh.Type != transport.TypeData {
			continue // pong, bye
		}
		m, err := decodeMessage(p)
		if err != nil {
			c.Fail(&HubLostError{Hub: h.idx, Addr: h.addr, Reason: "sent a malformed reply: " + err.Error()})
			return
		}
		h.recvd.Add(int64(len(m.Data)))
		h.mu.Lock()
		cl := h.pending[m.ID]
		delete(h.pending, m.ID)
		h.mu.Unlock()
		if m.Type == msgError {
			herr := &HubError{Hub: h.idx, Code: m.Code, Msg: string(m.Data)}
			if cl == nil {
				c.Fail(herr)
				return
			}
			cl.h.finish(herr, nil)
			continue
		}
		if cl == nil {
			continue // the answer to a request given up on
		}
		if cl.want >= 0 && len(m.Data) != cl.want {
			lost := &HubLostError{Hub: h.idx, Addr: h.addr, Reason: fmt.Sprintf("sent %d bytes where %d were due", len(m.Data), cl.want)}
			cl.h.finish(lost, nil)
			c.Fail(lost)
			return
		}
		cl.h.finish(nil, func() {
			if cl.on != nil {
				cl.on(&m)
			}
			if m.Stale > 0 {
				c.iter.maxStale(int(m.Stale))
			}
		})
	}
}

// watchdog pings hubs that owe an answer and declares lost the ones that
// stay silent for HubTimeout.
func (c *Client) watchdog() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.HubTimeout / 6)
	defer t.Stop()
	for {
		select {
		case <-c.failed:
			return
		case <-t.C:
		}
		now := time.Now().UnixNano()
		for _, h := range c.links() {
			h.mu.Lock()
			waiting := len(h.pending) > 0
			h.mu.Unlock()
			silent := time.Duration(now - h.lastHeard.Load())
			switch {
			case !waiting:
			case silent > c.cfg.HubTimeout:
				c.Fail(&HubLostError{Hub: h.idx, Addr: h.addr, Reason: fmt.Sprintf("no answer for %v", silent.Round(time.Millisecond))})
				return
			case silent > c.cfg.HubTimeout/3:
				h.l.control(transport.TypePing)
			}
		}
	}
}

// send registers a call on hub i and queues m.
func (c *Client) send(i int, m *message, h *Handle, on func(*message), want int) {
	hl := c.hubs[i]
	hl.mu.Lock()
	if len(hl.pending) == 0 {
		hl.lastHeard.Store(time.Now().UnixNano())
	}
	hl.nextID++
	m.ID = hl.nextID
	hl.pending[m.ID] = &call{h: h, on: on, want: want}
	hl.mu.Unlock()
	// Counted when queued: a call's bytes are all counted when its answer
	// arrives, whatever the writer is doing.
	hl.sent.Add(int64(len(m.Data)))
	if !hl.l.send(m) {
		h.finish(c.errOr(&HubLostError{Hub: i, Addr: hl.addr, Reason: "connection closed"}), nil)
	}
}

func (c *Client) errOr(err error) error {
	if e := c.Err(); e != nil {
		return e
	}
	return err
}

// Handle is an asynchronous request: a push, a pull or both, possibly
// spread over several hubs.
type Handle struct {
	c     *Client
	kind  int
	start time.Time

	mu    sync.Mutex
	left  int
	err   error
	given bool // Wait gave up: late replies are dropped
	done  chan struct{}
}

const (
	kindPush = iota
	kindPull
	kindOther
)

func (c *Client) newHandle(kind, parts int) *Handle {
	h := &Handle{c: c, kind: kind, start: time.Now(), left: parts, done: make(chan struct{})}
	if parts == 0 {
		close(h.done)
	}
	return h
}

// finish records one part's answer; copy runs under the handle's lock
// unless Wait has given up. An error completes the handle at once.
func (h *Handle) finish(err error, copy func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.left == 0 {
		return
	}
	if err != nil {
		h.err, h.left = err, 0
	} else {
		if copy != nil && !h.given {
			copy()
		}
		h.left--
	}
	if h.left == 0 {
		h.c.iter.addTime(h.kind, time.Since(h.start))
		close(h.done)
	}
}

// Done is closed when every part of the request has been answered.
func (h *Handle) Done() <-chan struct{} { return h.done }

// Wait blocks until the request is complete, the client fails, or ctx
// ends. After an error the destination buffer's contents are unspecified,
// but the client no longer writes to it.
func (h *Handle) Wait(ctx context.Context) error {
	t0 := time.Now()
	defer func() { h.c.iter.addWait(time.Since(t0)) }()
	select {
	case <-h.done:
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.err
	default:
	}
	var err error
	select {
	case <-h.done:
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.err
	case <-h.c.failed:
		err = h.c.err
	case <-ctx.Done():
		err = context.Cause(ctx)
	}
	h.mu.Lock()
	h.given = true
	if h.left == 0 { // finished meanwhile
		err = h.err
	}
	h.mu.Unlock()
	return err
}

// Float is an element type of keys.
type Float interface{ float32 | float64 }

// Declare creates key on its hubs, cut into partitions and placed by the
// least-loaded rule. Every worker declares the same keys in the same
// order, so that every worker computes the same placement; declaring a
// key again with the same config does nothing.
func (c *Client) Declare(ctx context.Context, key string, cfg KeyConfig) error {
	if len(key) > maxKeyLen-24 {
		return fmt.Errorf("ps: key %q longer than %d bytes", key, maxKeyLen-24)
	}
	if cfg.Init != nil && len(cfg.Init) != cfg.Len {
		return fmt.Errorf("ps: key %q: %d initial values for %d elements", key, len(cfg.Init), cfg.Len)
	}
	c.mu.Lock()
	ks, ok := c.keys[key]
	if !ok {
		ks = &keyState{cfg: cfg, parts: c.place.Add(key, cfg.Len)}
		c.keys[key] = ks
	}
	c.mu.Unlock()
	h := c.newHandle(kindOther, len(ks.parts))
	for _, p := range ks.parts {
		m := &message{Type: msgDeclare, Key: partKey(key, p.Off), Count: uint64(p.Len), Code: uint8(cfg.Update), Stale: int32(cfg.Staleness), LR: cfg.LR, Mom: cfg.Momentum}
		if cfg.Init != nil {
			m.Data = reduce.AsBytes(cfg.Init[p.Off : p.Off+p.Len])
		}
		c.send(p.Hub, m, h, nil, 0)
	}
	return h.Wait(ctx)
}

func partKey(key string, off int) string { return fmt.Sprintf("%s@%d", key, off) }

func (c *Client) key(name string, n int) (*keyState, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ks, ok := c.keys[name]
	if !ok {
		return nil, fmt.Errorf("%w %q: declare it first", ErrUnknownKey, name)
	}
	if n != ks.cfg.Len {
		return nil, fmt.Errorf("%w: key %q has %d elements, got %d", ErrShape, name, ks.cfg.Len, n)
	}
	return ks, nil
}

func (c *Client) failedHandle(kind int, err error) *Handle {
	h := c.newHandle(kind, 1)
	h.finish(err, nil)
	return h
}

// Push sends this worker's gradient (or update) for key, computed from
// samples samples. It returns at once; Wait on the handle. grad must not
// change until the handle is done: it is sent from where it is.
func Push[T Float](c *Client, key string, grad []T, samples int) *Handle {
	return push(c, key, grad, samples, nil, msgPush)
}

// PushPull pushes grad and then pulls the value that includes this push
// (under BSP, the combined round) into dst. Partitions are pipelined: the
// push of one overlaps the pull of the one before.
func PushPull[T Float](c *Client, key string, grad []T, samples int, dst []T) *Handle {
	if len(dst) != len(grad) {
		return c.failedHandle(kindPush, fmt.Errorf("%w: push of %d elements into %d", ErrShape, len(grad), len(dst)))
	}
	return push(c, key, grad, samples, dst, msgPushPull)
}

func push[T Float](c *Client, key string, grad []T, samples int, dst []T, typ msgType) *Handle {
	ks, err := c.key(key, len(grad))
	if err != nil {
		return c.failedHandle(kindPush, err)
	}
	c.mu.Lock()
	clock := ks.clock
	ks.clock++
	c.mu.Unlock()
	h := c.newHandle(kindPush, len(ks.parts))
	size := int(reduce.Size(reduce.DTypeOf[T]()))
	c.iter.addBytes(int64(len(grad)*size), 0)
	for _, p := range ks.parts {
		m := &message{Type: typ, Key: partKey(key, p.Off), Clock: uint32(clock), Samples: uint32(samples), DType: reduce.DTypeOf[T](), Data: reduce.AsBytes(grad[p.Off : p.Off+p.Len])}
		var on func(*message)
		want := 0
		if dst != nil {
			on, want = pullInto(c, dst[p.Off:p.Off+p.Len]), p.Len*size
		}
		c.send(p.Hub, m, h, on, want)
	}
	return h
}

// Pull fetches key's value into dst, as this worker's clock for the key
// (the number of pushes it made) and the key's staleness bound allow.
func Pull[T Float](c *Client, key string, dst []T) *Handle {
	ks, err := c.key(key, len(dst))
	if err != nil {
		return c.failedHandle(kindPull, err)
	}
	c.mu.Lock()
	clock := ks.clock
	c.mu.Unlock()
	h := c.newHandle(kindPull, len(ks.parts))
	for _, p := range ks.parts {
		m := &message{Type: msgPull, Key: partKey(key, p.Off), Clock: uint32(clock), DType: reduce.DTypeOf[T]()}
		c.send(p.Hub, m, h, pullInto(c, dst[p.Off:p.Off+p.Len]), p.Len*int(reduce.Size(reduce.DTypeOf[T]())))
	}
	return h
}

func pullInto[T Float](c *Client, dst []T) func(*message) {
	return func(m *message) {
		copy(reduce.AsBytes(dst), m.Data)
		c.iter.addBytes(0, int64(len(m.Data)))
	}
}

// Share reports this worker's last iteration (samples and compute time)
// to hub 0 and returns its LB-BSP share of a global batch of total
// samples, proportional to its measured speed. Every worker asks once per
// iteration, with the same total: the hub answers when all have asked,
// and the shares add up to total.
func (c *Client) Share(ctx context.Context, total, samples int, compute time.Duration) (int, error) {
	if total < 0 || samples < 0 {
		return 0, fmt.Errorf("ps: share of %d samples after %d: must not be negative", total, samples)
	}
	var share int
	h := c.newHandle(kindOther, 1)
	clock := c.shareClock.Add(1) - 1
	c.send(0, &message{Type: msgShare, Clock: clock, Count: uint64(total), Samples: uint32(samples), Nanos: int64(compute)}, h, func(m *message) { share = int(m.Count) }, 0)
	if err := h.Wait(ctx); err != nil {
		return 0, err
	}
	return share, nil
}

// ReportLost tells every hub that worker is lost (found dead by gossip:
// a frozen or cut-off worker whose connections to the hubs may still look
// fine), so that rounds stop waiting for it: elastic hubs remove it, the
// others fail every request naming it.
func (c *Client) ReportLost(ctx context.Context, worker int, reason string) error {
	h := c.newHandle(kindOther, len(c.hubs))
	for i := range c.hubs {
		c.send(i, &message{Type: msgLost, Root: uint32(worker), Data: []byte(reason)}, h, nil, 0)
	}
	return h.Wait(ctx)
}

// Round kinds of Collective.
const (
	RoundReduce    = kindReduce
	RoundGather    = kindGather
	RoundBroadcast = kindBroadcast
)

// Collective is one collective call of the hub strategy.
type Collective struct {
	Seq   uint32 // the call's number, the same on every worker
	Kind  uint8  // RoundReduce, RoundGather or RoundBroadcast
	Op    reduce.Op
	DType uint8
	Root  int // RoundBroadcast
	Count int // elements in this worker's buffer
	// Send is this worker's buffer (for RoundBroadcast, the root's; nil
	// elsewhere). Recv receives the result: for RoundReduce and
	// RoundBroadcast the elements [WantOff, WantOff+WantLen) at the same
	// offsets (Recv may be Send); for RoundGather Workers*Count elements
	// in rank order.
	Send, Recv       []byte
	WantOff, WantLen int
}

// RoundPartitions is how a collective round of count elements of size
// bytes is cut and placed on hubs hubs: partitions of at most
// partitionBytes (for a gather, of the gathered result), each on the
// least-loaded hub. Every worker computes the same.
func RoundPartitions(kind uint8, count, size, partitionBytes, workers, hubs int) []Partition {
	partElems := max(1, partitionBytes/max(size, 1))
	if kind == kindGather {
		partElems = max(1, partElems/max(workers, 1))
	}
	p, err := NewPlacement(max(hubs, 1), partElems)
	if err != nil {
		return nil
	}
	return p.Add("", count)
}

// Collective runs one collective round through the hubs: the buffer is
// cut into partitions placed on the hubs, every partition is sent, and
// the results are copied into Recv as they come back.
func (c *Client) Collective(ctx context.Context, r Collective) error {
	size := reduce.Size(r.DType)
	if size == 0 {
		return fmt.Errorf("%w: unknown element type %d", ErrBadRequest, r.DType)
	}
	parts := RoundPartitions(r.Kind, r.Count, size, c.cfg.PartitionBytes, c.cfg.Workers, len(c.hubs))
	h := c.newHandle(kindOther, len(parts))
	isRoot := r.Kind == kindBroadcast && r.Root == c.cfg.Worker
	for i, p := range parts {
		m := &message{Type: msgRound, Kind: r.Kind, Code: uint8(r.Op), DType: r.DType, Clock: r.Seq, Part: uint32(i),
			Root: uint32(r.Root), Count: uint64(r.Count), Off: uint64(p.Off), N: uint64(p.Len)}
		if r.Kind != kindBroadcast || isRoot {
			m.Data = r.Send[p.Off*size : (p.Off+p.Len)*size]
			c.iter.addBytes(int64(len(m.Data)), 0)
		}
		lo, hi := max(p.Off, r.WantOff), min(p.Off+p.Len, r.WantOff+r.WantLen)
		if r.Kind == kindBroadcast {
			lo, hi = p.Off, p.Off+p.Len
			if isRoot {
				hi = lo
			}
		}
		if hi > lo {
			m.WantOff, m.WantLen = uint64(lo-p.Off), uint64(hi-lo)
		}
		want := max(0, hi-lo) * size
		if r.Kind == kindGather {
			want = c.cfg.Workers * p.Len * size
		}
		on := func(rep *message) {
			c.iter.addBytes(0, int64(len(rep.Data)))
			if r.Kind != kindGather {
				copy(r.Recv[lo*size:], rep.Data)
				return
			}
			for w := range c.cfg.Workers {
				copy(r.Recv[(w*r.Count+p.Off)*size:(w*r.Count+p.Off+p.Len)*size], rep.Data[w*p.Len*size:])
			}
		}
		c.send(p.Hub, m, h, on, want)
	}
	return h.Wait(ctx)
}

// HubBytes reports the data bytes (tensor contents, without message
// headers) this worker has sent to and received from each hub.
func (c *Client) HubBytes() (sent, recvd []int64) {
	for _, h := range c.hubs {
		sent = append(sent, h.sent.Load())
		recvd = append(recvd, h.recvd.Load())
	}
	return sent, recvd
}

// Metrics is one worker's record of one iteration.
type Metrics struct {
	Worker    int           `json:"worker"`
	Iteration int           `json:"iteration"`
	Batch     int           `json:"batch"`
	Compute   time.Duration `json:"compute_ns"`
	Wait      time.Duration `json:"wait_ns"` // blocked in Handle.Wait: idle time
	Push      time.Duration `json:"push_ns"` // from issue to the hubs' answers, summed
	Pull      time.Duration `json:"pull_ns"`
	BytesSent int64         `json:"bytes_sent"`
	BytesRecv int64         `json:"bytes_recv"`
	Staleness int           `json:"staleness"` // the largest a pull saw
}

type iterCounters struct {
	wait, push, pull atomic.Int64
	sent, recvd      atomic.Int64
	stale            atomic.Int64
	n                atomic.Int64
}

func (it *iterCounters) addWait(d time.Duration) { it.wait.Add(int64(d)) }

func (it *iterCounters) addTime(kind int, d time.Duration) {
	switch kind {
	case kindPush:
		it.push.Add(int64(d))
	case kindPull:
		it.pull.Add(int64(d))
	}
}

func (it *iterCounters) addBytes(sent, recvd int64) {
	it.sent.Add(sent)
	it.recvd.Add(recvd)
}

func (it *iterCounters) maxStale(s int) {
	for {
		cur := it.stale.Load()
		if int64(s) <= cur || it.stale.CompareAndSwap(cur, int64(s)) {
			return
		}
	}
}

// Tick ends an iteration: it records the iteration's batch size and
// compute time with the waits, push and pull times, bytes and staleness
// counted since the last Tick, writes them as a JSON line to
// ClientConfig.Metrics if set, and returns them.
func (c *Client) Tick(batch int, compute time.Duration) Metrics {
	it := &c.iter
	m := Metrics{
		Worker: c.cfg.Worker, Iteration: int(it.n.Add(1) - 1), Batch: batch, Compute: compute,
		Wait: time.Duration(it.wait.Swap(0)), Push: time.Duration(it.push.Swap(0)), Pull: time.Duration(it.pull.Swap(0)),
		BytesSent: it.sent.Swap(0), BytesRecv: it.recvd.Swap(0), Staleness: int(it.stale.Swap(0)),
	}
	c.mmu.Lock()
	defer c.mmu.Unlock()
	c.metrics = append(c.metrics, m)
	if c.cfg.Metrics != nil {
		_ = m.WriteJSON(c.cfg.Metrics)
	}
	return m
}

// WriteJSON writes m as one JSON line.
func (m Metrics) WriteJSON(w io.Writer) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// Metrics returns every iteration recorded by Tick so far.
func (c *Client) Metrics() []Metrics {
	c.mmu.Lock()
	defer c.mmu.Unlock()
	return append([]Metrics(nil), c.metrics...)
}
