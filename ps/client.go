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

	"github.com/gorun/gorun/transport"
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
	// is outstanding is lost (it is pinged after half of it).
	HubTimeout time.Duration
	// Dial, if set, replaces TCP: collective.NewLocal connects to hubs
	// listening on transport.MemListener with it.
	Dial transport.DialFunc
	// Shm moves a connection's bytes through shared memory when its hub
	// is on this host (Shm.Enabled; JobID, Name and Timeout are filled
	// in). Every connection negotiates, whatever the settings, so hubs
	// and workers must both be of this version.
	Shm transport.ShmOptions
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
}

// DefaultClientConfig returns the defaults for everything but the job's
// identity and its hubs.
func DefaultClientConfig() ClientConfig {
	return ClientConfig{
		PartitionBytes:        4 << 20,
		RoundPartitionsPerHub: 32,
		RoundSpreadBytes:      RoundSpreadBytes,
		RoundWindow:           4,
		MaxFrame:              transport.DefaultMaxPayload + FrameSlack,
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
	case c.JobID == "" || len(c.Secret) < 16:
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
	zstd       zstdCodec // sparse pushes' CodecZstd
}

type keyState struct {
	cfg    KeyConfig
	parts  []Partition
	clock  int
	sparse *sparseState // a sparse key's pushes and residual
}

type hubLink struct {
	idx       int
	addr      string
	l         *link
	mu        sync.Mutex
	pending   map[uint32]*call
	nextID    uint32
	shm       bool // the connection runs over shared memory
	lastHeard atomic.Int64
	sent      atomic.Int64
	recvd     atomic.Int64
}

type call struct {
	h     *Handle
	on    func(m *message) // consumes a reply's data; runs under h.mu
	want  int              // bytes of data the reply must carry; -1: any
	after func()           // if set, runs once the reply is taken, whatever it was
	// ack, if set, runs exactly once when the call is settled: whether
	// the hub applied its push (an answer, or an error after the push),
	// false for an error before it or for no answer at all (the client
	// failed). Its handle then fails with the client's error.
	ack func(applied bool)
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
	conn, err := transport.DialAuth(ctx, c.cfg.Dial, addr, c.cfg.JobID, c.cfg.Secret, transport.Ends{From: c.cfg.Worker, To: HubTag + i, Size: c.cfg.Workers}, c.cfg.HandshakeTimeout, c.cfg.HandshakeTimeout)
	if err != nil {
		return fmt.Errorf("ps: worker %d: hub %d: %w", c.cfg.Worker, i, err)
	}
	o := c.cfg.Shm
	o.JobID, o.Name, o.Timeout = c.cfg.JobID, fmt.Sprintf("w%d-hub%d", c.cfg.Worker, i), c.cfg.HandshakeTimeout
	if o.Logger == nil {
		o.Logger = c.log
	}
	if conn, err = transport.OfferShm(ctx, conn, o); err != nil {
		return fmt.Errorf("ps: worker %d: hub %d: %w", c.cfg.Worker, i, err)
	}
	hl := &hubLink{idx: i, addr: addr, pending: map[uint32]*call{}, shm: transport.IsShm(conn)}
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
func (c *Client) Fail(err error) {
	c.failOnce.Do(func() {
		c.err = err
		close(c.failed)
		c.settleAcked(err)
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
		// Every answer's data is copied out (into the caller's buffer, or
		// an error's text) before the next frame: its buffer goes back.
		fh, p, err := h.l.r.Next(transport.GetBuf)
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
			transport.PutBuf(p)
			continue // pong, bye
		}
		if !c.answer(h, p) {
			return
		}
		transport.PutBuf(p)
	}
}

// answer acts on one answer from hub h, p a frame's payload; false once
// the client has failed. Nothing refers to p when it returns.
func (c *Client) answer(h *hubLink, p []byte) bool {
	m, err := decodeMessage(p)
	if err != nil {
		c.Fail(&HubLostError{Hub: h.idx, Addr: h.addr, Reason: "sent a malformed reply: " + err.Error()})
		return false
	}
	h.recvd.Add(int64(len(m.Data)))
	h.mu.Lock()
	cl := h.pending[m.ID]
	delete(h.pending, m.ID)
	h.mu.Unlock()
	if m.Type == msgError {
		var herr error = &HubError{Hub: h.idx, Code: m.Code, Msg: string(m.Data)}
		if m.Kind&errCorruptFlag != 0 {
			herr = &hubCorruptError{herr.(*HubError)}
		}
		if cl == nil {
			c.Fail(herr)
			return false
		}
		if cl.ack != nil {
			cl.ack(m.Kind&errPushed != 0)
		}
		cl.h.finish(herr, nil)
		if cl.after != nil {
			cl.after()
		}
		return true
	}
	if cl == nil {
		return true // the answer to a request given up on
	}
	if cl.ack != nil {
		cl.ack(true)
	}
	if cl.want >= 0 && len(m.Data) != cl.want {
		lost := &HubLostError{Hub: h.idx, Addr: h.addr, Reason: fmt.Sprintf("sent %d bytes where %d were due", len(m.Data), cl.want)}
		cl.h.finish(lost, nil)
		c.Fail(lost)
		return false
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
	return true
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
	c.sendAfter(i, m, h, on, want, nil)
}

// sendAfter is send with a function to run when the reply has been taken.
func (c *Client) sendAfter(i int, m *message, h *Handle, on func(*message), want int, after func()) {
	c.sendCall(i, m, &call{h: h, on: on, want: want, after: after})
}

// sendCall registers cl on hub i and queues m. A call with an ack made
// once the client has failed is settled at once instead.
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
	hl.mu.Unlock()
	// Counted when queued: a call's bytes are all counted when its answer
	// arrives, whatever the writer is doing.
	hl.sent.Add(int64(len(m.Data)))
	if !hl.l.send(m) {
		h.finish(c.errOr(&HubLostError{Hub: i, Addr: hl.addr, Reason: "connection closed"}), nil)
	}
}

// settleAcked settles every pending call with an ack once the client has
// failed with err: no answer will come, and the push counts as not
// applied (Fail calls it; a call made later is settled by sendCall).
func (c *Client) settleAcked(err error) {
	for _, hl := range c.links() {
		var calls []*call
		hl.mu.Lock()
		for id, cl := range hl.pending {
			if cl.ack != nil {
				calls = append(calls, cl)
				delete(hl.pending, id)
			}
		}
		hl.mu.Unlock()
		for _, cl := range calls {
			cl.ack(false)
			cl.h.finish(err, nil)
		}
	}
}

func (c *Client) errOr(err error) error {
	if e := c.Err(); e != nil {
		return e
	}
	return err
}
