package ps

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorun/gorun/internal/jobsecret"
	"github.com/gorun/gorun/reduce"
	"github.com/gorun/gorun/transport"
	"github.com/gorun/gorun/transport/shm"
	"github.com/gorun/gorun/transport/wire"
)

// HubConfig configures a hub server.
type HubConfig struct {
	Index   int // this hub's number among the job's hubs
	Workers int // workers 0..Workers-1 may connect
	JobID   string
	Secret  []byte
	// ListenAddr is where the hub listens ("host:port"; port 0 picks one).
	ListenAddr string
	// Listener, if set, is used instead of listening on ListenAddr (a
	// mem.Listener runs a hub in memory); the hub closes it.
	Listener net.Listener
	// MaxFrame caps a request's size; a bigger one is refused before
	// anything is allocated.
	MaxFrame int
	// Elastic: a lost worker is removed and BSP rounds finish with the
	// survivors. Otherwise a lost worker fails every request from then on
	// with an error naming it. Collective rounds always fail.
	Elastic          bool
	HandshakeTimeout time.Duration
	// SpeedAlpha weighs the newest iteration in the LB-BSP speed estimate.
	SpeedAlpha float64
	// Share is how hub 0 splits an LB-BSP batch (Client.Share): in
	// proportion to speed by default, or by ShareOptimal's solver.
	Share ShareConfig
	// Shm lets workers on this host move their bytes through shared
	// memory (Shm.Enabled; JobID, Name and Timeout are filled in).
	Shm    shm.Options
	Logger *slog.Logger
}

// DefaultHubConfig returns the defaults for everything but the job's
// identity and size.
func DefaultHubConfig() HubConfig {
	return HubConfig{
		ListenAddr:       ":0",
		MaxFrame:         wire.DefaultMaxPayload + FrameSlack,
		HandshakeTimeout: 5 * time.Second,
		SpeedAlpha:       0.3,
	}
}

func (c *HubConfig) validate() error {
	switch {
	case c.Workers < 1:
		return fmt.Errorf("ps: hub: %d workers", c.Workers)
	case c.Index < 0 || c.Index >= HubTag:
		return fmt.Errorf("ps: hub index %d out of range", c.Index)
	case c.JobID == "" || jobsecret.Check(c.Secret) != nil:
		return errors.New("ps: hub: job id missing or job secret shorter than 16 bytes")
	case c.MaxFrame < msgHeaderSize+maxKeyLen:
		return fmt.Errorf("ps: hub: MaxFrame %d too small", c.MaxFrame)
	case c.HandshakeTimeout <= 0:
		return errors.New("ps: hub: HandshakeTimeout must be positive")
	}
	return c.Share.validate(c.Workers)
}

// HubStats counts what a hub has done.
type HubStats struct {
	BytesIn, BytesOut int64 // payload bytes received from and sent to workers
	Requests          int64
	Removed           int // workers removed after they were lost (elastic)
	ShmLinks          int // worker connections that ran over shared memory
	Left              int // workers that closed cleanly
	// DeadlineRelaxed counts the share rounds hub 0 split without
	// ShareConfig.Deadline because no split met it (MissRelax).
	DeadlineRelaxed int
}

// Hub is a ParamHub server: a Table of keyed tensors for push and pull,
// and the rounds of the collective API's hub strategy. A reader and a
// writer per worker connection serve it; the readers take turns at the
// state (see post).
type Hub struct {
	cfg HubConfig
	log *slog.Logger
	ln  net.Listener

	qmu   sync.Mutex
	queue []hubEvent // posted, not yet handled
	spare []hubEvent // the queue's other buffer
	turn  sync.Mutex // held by the reader handling the queue: it owns core and workers
	core  *core
	// workers[w] is worker w's connection, nil before it joins and after
	// it is gone.
	workers []*link

	closing  chan struct{}
	stopping atomic.Bool   // closing is closed (or about to be): read between events
	done     chan struct{} // every worker has come and gone
	wg       sync.WaitGroup

	bytesIn, bytesOut, requests atomic.Int64
	shmLinks                    atomic.Int64

	mu        sync.Mutex
	links     map[*link]bool
	stats     HubStats
	closeOnce sync.Once
}

type hubEvent struct {
	worker int
	l      *link
	msg    *message
	joined bool
	gone   bool
	clean  bool
	cause  error // why a worker that did not say goodbye is gone
}

// NewHub starts a hub listening on cfg.ListenAddr.
func NewHub(cfg HubConfig) (*Hub, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ln := cfg.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", cfg.ListenAddr); err != nil {
			return nil, fmt.Errorf("ps: hub %d: listen: %w", cfg.Index, err)
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Hub{
		cfg: cfg, log: log.With("hub", cfg.Index), ln: ln,
		closing: make(chan struct{}), done: make(chan struct{}),
		links: map[*link]bool{}, core: newCore(cfg.Workers, cfg.Elastic, cfg.SpeedAlpha), workers: make([]*link, cfg.Workers),
	}
	h.core.split = cfg.Share.clone()
	h.wg.Add(1)
	go h.acceptLoop()
	return h, nil
}

// Addr is where the hub listens.
func (h *Hub) Addr() net.Addr { return h.ln.Addr() }

// Done is closed once every worker has connected and then gone (cleanly
// or not); a dedicated hub process exits then.
func (h *Hub) Done() <-chan struct{} { return h.done }

// Stats returns the hub's counters.
func (h *Hub) Stats() HubStats {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.stats
	s.BytesIn, s.BytesOut, s.Requests = h.bytesIn.Load(), h.bytesOut.Load(), h.requests.Load()
	s.ShmLinks = int(h.shmLinks.Load())
	return s
}

// Close stops the hub and drops every connection. It is idempotent and
// returns when every goroutine of the hub has finished (a connection over
// shared memory keeps a watcher of its socket for a moment longer, until
// it sees the socket closed).
func (h *Hub) Close() error {
	h.closeOnce.Do(func() {
		h.stopping.Store(true)
		close(h.closing)
		_ = h.ln.Close()
		// Answers already queued (errors naming a lost worker, above all)
		// get a moment to reach the workers before the connections close.
		h.mu.Lock()
		links := make([]*link, 0, len(h.links))
		for l := range h.links {
			links = append(links, l)
			l.kill()
		}
		h.mu.Unlock()
		deadline := time.After(time.Second)
		for _, l := range links {
			select {
			case <-l.done:
			case <-deadline:
			}
			_ = l.c.Close()
		}
		h.wg.Wait()
	})
	return nil
}

// acceptLoop serves every worker that connects; a transient accept
// failure pauses it (acceptPause) instead of ending it.
func (h *Hub) acceptLoop() {
	wire.AcceptLoop(h.ln, h.closing, acceptPause, &h.wg, func(err error) { h.log.Warn("accept failed; retrying", "err", err) }, h.serveConn)
}

// acceptPause is the hub's wait after a failed accept.
const acceptPause = 50 * time.Millisecond

func (h *Hub) serveConn(c net.Conn) {
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-h.closing:
			_ = c.Close()
		case <-stop:
		}
	}()
	ends, err := wire.AcceptHandshake(c, h.cfg.JobID, h.cfg.Secret, func(e wire.Ends) bool {
		return e.To == HubTag+h.cfg.Index && e.Size == h.cfg.Workers && e.From >= 0 && e.From < h.cfg.Workers
	}, h.cfg.HandshakeTimeout)
	if err != nil {
		h.log.Warn("dropped a connection that failed the handshake", "remote", c.RemoteAddr().String(), "err", err)
		_ = c.Close()
		return
	}
	w := ends.From
	o := h.cfg.Shm
	o.JobID, o.Name, o.Timeout = h.cfg.JobID, fmt.Sprintf("w%d-hub%d", w, h.cfg.Index), h.cfg.HandshakeTimeout
	if o.Logger == nil {
		o.Logger = h.log
	}
	// (The goroutine above closes the socket; that ends an upgraded
	// connection too.)
	conn, err := shm.Answer(context.Background(), c, o)
	if err != nil {
		h.log.Warn("dropped a worker whose shared memory negotiation failed", "worker", w, "err", err)
		return
	}
	if shm.IsConn(conn) {
		h.shmLinks.Add(1)
	}
	l := newLink(conn, h.cfg.MaxFrame, func(n int) { h.bytesOut.Add(int64(n)) })
	h.mu.Lock()
	h.links[l] = true
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.links, l)
		h.mu.Unlock()
		l.close(time.Second)
	}()
	if !h.post(hubEvent{worker: w, l: l, joined: true}) {
		return
	}
	clean, reason := false, ""
	var cause error // what the worker said when it gave up
	for {
		// From the pool: a round gives back the parts it has folded
		// (core.fold), and its result once every answer is written (the
		// first worker's part, which the others are folded into); every
		// other payload is left to the GC.
		fh, p, err := l.r.Next(transport.GetBuf)
		if err != nil {
			reason = "connection lost: " + err.Error()
			if errors.Is(err, wire.ErrFrame) {
				reason = "sent a malformed frame: " + err.Error()
			}
			break
		}
		h.bytesIn.Add(int64(len(p)))
		switch fh.Type {
		case transport.TypeData:
			m, err := decodeMessage(p)
			m.buf = p
			if err != nil {
				h.log.Warn("bad request", "worker", w, "err", err)
				l.send(&message{Type: msgError, Code: codeBadRequest, Data: []byte(err.Error())})
				continue
			}
			h.requests.Add(1)
			if !h.post(hubEvent{worker: w, l: l, msg: &m}) {
				return
			}
		case transport.TypePing:
			l.control(transport.TypePong)
		case transport.TypeBye:
			clean = true
		case transport.TypeAbort:
			cause = transport.DecodeAbort(w, p)
			reason = cause.Error()
		}
		if clean || reason != "" {
			break
		}
	}
	if cause == nil && !clean {
		cause = workerLost(w, reason)
	}
	h.post(hubEvent{worker: w, l: l, gone: true, clean: clean, cause: cause})
}

// maxQueue is how many posted events may wait for the state before a
// reader that posts one waits for its turn instead of going back to its
// connection: the bound on what a hub holds for workers that outrun it.
// It also bounds one reader's turn: after that many events the rest go to
// a goroutine of their own, so that the reader goes back to its
// connection (its worker's requests and pings) while others keep posting.
const maxQueue = 256

// post hands ev to the state; false once the hub is closing. The reader
// that posts an event usually handles it itself, with no hand-off to
// another goroutine: if no other reader has the turn, it takes it and
// handles the queue; if one has, that one handles ev too before it lets
// the turn go, and this reader goes back to its connection.
func (h *Hub) post(ev hubEvent) bool {
	if h.stopping.Load() {
		return false
	}
	h.qmu.Lock()
	h.queue = append(h.queue, ev)
	full := len(h.queue) >= maxQueue
	h.qmu.Unlock()
	if full {
		h.turn.Lock()
	} else if !h.turn.TryLock() {
		return true
	}
	h.takeTurn()
	return true
}

// takeTurn handles the queue, the turn held, as the reader that took it:
// at most about maxQueue events, then the rest in a goroutine of its own.
func (h *Hub) takeTurn() {
	for {
		n, more := h.handleQueue(maxQueue)
		switch {
		case !more:
			return
		case n >= maxQueue:
			h.wg.Add(1)  // (this reader's own goroutine is counted: never zero here)
			go h.drain() // a long turn: back to the connection
			return
		case !h.turn.TryLock():
			return // the holder looks at the queue when it lets go
		}
	}
}

// drain handles the queue until it is empty, in turns.
func (h *Hub) drain() {
	defer h.wg.Done()
	for {
		h.turn.Lock()
		if _, more := h.handleQueue(maxQueue); !more {
			return
		}
	}
}

// handleQueue handles the queued events, with the turn held, until the
// queue is empty or limit are handled, and lets the turn go. It
// returns how many it handled, and whether events are left: beyond limit,
// or posted after its last look by a reader that found the turn taken.
// Those are the caller's to see to.
func (h *Hub) handleQueue(limit int) (n int, more bool) {
	for n < limit {
		h.qmu.Lock()
		if len(h.queue) == 0 {
			h.qmu.Unlock()
			break
		}
		var q []hubEvent
		if k := limit - n; len(h.queue) > k {
			q = append(h.spare[:0], h.queue[:k]...)
			h.queue = h.queue[:copy(h.queue, h.queue[k:])]
		} else {
			q = h.queue
			h.queue = h.spare[:0]
		}
		h.spare = nil
		h.qmu.Unlock()
		for i := range q {
			if !h.stopping.Load() {
				h.handle(q[i])
			}
			q[i] = hubEvent{}
		}
		n += len(q)
		h.qmu.Lock()
		h.spare = q[:0]
		h.qmu.Unlock()
	}
	h.turn.Unlock()
	h.qmu.Lock()
	defer h.qmu.Unlock()
	return n, len(h.queue) > 0 && !h.stopping.Load()
}

// handle feeds ev to the core, the turn held, and sends its replies.
func (h *Hub) handle(ev hubEvent) {
	c, links, w := h.core, h.workers, ev.worker
	var out []reply
	var kill []int
	switch {
	case ev.joined:
		if err := c.join(w); err != nil {
			h.log.Warn("refused a second connection from a worker", "worker", w)
			ev.l.send(&message{Type: msgError, Code: codeOf(err), Data: []byte(err.Error())})
			ev.l.kill()
			return
		}
		links[w] = ev.l
		return
	case links[w] != ev.l:
		return // from a connection that was refused or dropped
	case ev.gone:
		switch {
		case ev.clean:
		case h.cfg.Elastic:
			h.log.Warn("worker lost; elastic: rounds go on without it", "worker", w, "cause", ev.cause)
		default:
			h.log.Warn("worker lost; failing every request", "worker", w, "cause", ev.cause)
		}
		links[w] = nil
		out = c.leave(w, ev.clean, ev.cause)
	default:
		out, kill = c.request(w, ev.msg)
	}
	for _, x := range kill {
		if xl := links[x]; xl != nil {
			h.log.Warn("dropping a worker another worker reported lost", "worker", x)
			xl.kill()
			_ = xl.c.Close()
			links[x] = nil
		}
	}
	for i := range out {
		if l := links[out[i].worker]; l != nil {
			l.send(&out[i].msg)
		}
	}
	h.mu.Lock()
	h.stats.Left, h.stats.Removed, h.stats.DeadlineRelaxed = c.left, c.removed, c.relaxed
	h.mu.Unlock()
	if c.allGone() {
		select {
		case <-h.done:
		default:
			close(h.done)
		}
	}
}

func toFloat64(dtype uint8, b []byte) ([]float64, error) {
	switch dtype {
	case reduce.Float64:
		return append([]float64(nil), reduce.FromBytes[float64](b)...), nil
	case reduce.Float32:
		f := reduce.FromBytes[float32](b)
		out := make([]float64, len(f))
		for i, v := range f {
			out[i] = float64(v)
		}
		return out, nil
	}
	if len(b) == 0 {
		return nil, nil
	}
	return nil, fmt.Errorf("%w: keys hold float32 or float64, not %s", ErrBadRequest, reduce.DTypeName(dtype))
}

func fromFloat64(dtype uint8, v []float64) ([]byte, error) {
	switch dtype {
	case reduce.Float64:
		return reduce.AsBytes(v), nil
	case reduce.Float32:
		f := make([]float32, len(v))
		for i, x := range v {
			f[i] = float32(x)
		}
		return reduce.AsBytes(f), nil
	}
	return nil, fmt.Errorf("%w: keys hold float32 or float64, not %s", ErrBadRequest, reduce.DTypeName(dtype))
}
