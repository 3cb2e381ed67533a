package ps

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorun/gorun/reduce"
	"github.com/gorun/gorun/transport"
)

// HubConfig configures a hub server.
type HubConfig struct {
	Index   int // this hub's number among the job's hubs
	Workers int // workers 0..Workers-1 may connect
	JobID   string
	Secret  []byte
	// ListenAddr is where the hub listens ("host:port"; port 0 picks one).
	ListenAddr string
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
	Logger     *slog.Logger
}

// DefaultHubConfig returns the defaults for everything but the job's
// identity and size.
func DefaultHubConfig() HubConfig {
	return HubConfig{
		ListenAddr:       ":0",
		MaxFrame:         transport.DefaultMaxPayload + FrameSlack,
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
	case c.JobID == "" || len(c.Secret) < 16:
		return errors.New("ps: hub: job id missing or job secret shorter than 16 bytes")
	case c.MaxFrame < msgHeaderSize+maxKeyLen:
		return fmt.Errorf("ps: hub: MaxFrame %d too small", c.MaxFrame)
	case c.HandshakeTimeout <= 0:
		return errors.New("ps: hub: HandshakeTimeout must be positive")
	}
	return nil
}

// HubStats counts what a hub has done.
type HubStats struct {
	BytesIn, BytesOut int64 // payload bytes received from and sent to workers
	Requests          int64
	Removed           int // workers removed after they were lost (elastic)
	Left              int // workers that closed cleanly
}

// Hub is a ParamHub server: a Table of keyed tensors for push and pull,
// and the rounds of the collective API's hub strategy. One goroutine owns
// the state; a reader and a writer per worker connection feed it.
type Hub struct {
	cfg HubConfig
	log *slog.Logger
	ln  net.Listener

	events  chan hubEvent
	closing chan struct{}
	done    chan struct{} // every worker has come and gone
	wg      sync.WaitGroup

	bytesIn, bytesOut, requests atomic.Int64

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
	ln, err := net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		return nil, fmt.Errorf("ps: hub %d: listen: %w", cfg.Index, err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Hub{
		cfg: cfg, log: log.With("hub", cfg.Index), ln: ln,
		events: make(chan hubEvent, 256), closing: make(chan struct{}), done: make(chan struct{}),
		links: map[*link]bool{},
	}
	h.wg.Add(2)
	go h.acceptLoop()
	go h.loop()
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
	return s
}

// Close stops the hub and drops every connection. It is idempotent and
// returns when every goroutine of the hub has finished.
func (h *Hub) Close() error {
	h.closeOnce.Do(func() {
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

func (h *Hub) acceptLoop() {
	defer h.wg.Done()
	for {
		c, err := h.ln.Accept()
		if err != nil {
			return
		}
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			h.serveConn(c)
		}()
	}
}

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
	ends, err := transport.AcceptHandshake(c, h.cfg.JobID, h.cfg.Secret, func(e transport.Ends) bool {
		return e.To == HubTag+h.cfg.Index && e.Size == h.cfg.Workers && e.From >= 0 && e.From < h.cfg.Workers
	}, h.cfg.HandshakeTimeout)
	if err != nil {
		h.log.Warn("dropped a connection that failed the handshake", "remote", c.RemoteAddr().String(), "err", err)
		_ = c.Close()
		return
	}
	w := ends.From
	l := newLink(c, h.cfg.MaxFrame, func(n int) { h.bytesOut.Add(int64(n)) })
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
		fh, p, err := l.r.Next(nil)
		if err != nil {
			reason = "connection lost: " + err.Error()
			if errors.Is(err, transport.ErrFrame) {
				reason = "sent a malformed frame: " + err.Error()
			}
			break
		}
		h.bytesIn.Add(int64(len(p)))
		switch fh.Type {
		case transport.TypeData:
			m, err := decodeMessage(p)
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

func (h *Hub) post(ev hubEvent) bool {
	select {
	case h.events <- ev:
		return true
	case <-h.closing:
		return false
	}
}

// loop owns the hub's state.
func (h *Hub) loop() {
	defer h.wg.Done()
	s := &hubState{
		h: h, table: NewTable(h.cfg.Workers), speeds: make([]Speed, h.cfg.Workers),
		links: make([]*link, h.cfg.Workers), seen: make([]bool, h.cfg.Workers), gone: make([]bool, h.cfg.Workers),
		rounds: map[roundID]*roundState{}, shares: map[uint32]*shareRound{},
	}
	for i := range s.speeds {
		s.speeds[i].Alpha = h.cfg.SpeedAlpha
	}
	for {
		select {
		case ev := <-h.events:
			s.handle(ev)
		case <-h.closing:
			return
		}
	}
}

type pendingPull struct {
	worker int
	l      *link
	id     uint32
	key    string
	clock  int
	dtype  uint8
}

type roundID struct{ seq, part uint32 }

type roundReq struct {
	l       *link
	id      uint32
	arrived bool
	want    [2]uint64
	data    []byte
}

type roundState struct {
	spec    message // the first arrival's header
	reqs    []roundReq
	arrived int
	acc     []byte
	next    int // reduce: the next worker to fold in
	err     error
}

type hubState struct {
	h      *Hub
	table  *Table
	speeds []Speed
	links  []*link
	seen   []bool
	gone   []bool
	failed error
	pulls  []pendingPull
	rounds map[roundID]*roundState
	shares map[uint32]*shareRound
}

func (s *hubState) handle(ev hubEvent) {
	w := ev.worker
	switch {
	case ev.joined:
		if s.links[w] != nil || s.gone[w] {
			s.h.log.Warn("refused a second connection from a worker", "worker", w)
			ev.l.send(&message{Type: msgError, Code: codeWorker, Data: []byte(fmt.Sprintf("worker %d is already connected or has left", w))})
			ev.l.kill()
			return
		}
		s.links[w], s.seen[w] = ev.l, true
	case ev.gone:
		if s.links[w] != ev.l {
			return
		}
		s.workerGone(w, ev.clean, ev.cause)
	default:
		if s.links[w] != ev.l {
			return
		}
		s.request(w, ev.l, ev.msg)
	}
}

func (s *hubState) reply(l *link, id uint32, m message) {
	m.Type, m.ID = msgReply, id
	l.send(&m)
}

func (s *hubState) replyErr(l *link, id uint32, err error) {
	l.send(&message{Type: msgError, ID: id, Code: codeOf(err), Data: []byte(err.Error())})
}

func (s *hubState) request(w int, l *link, m *message) {
	if s.failed != nil {
		s.replyErr(l, m.ID, s.failed)
		return
	}
	switch m.Type {
	case msgDeclare:
		init, err := toFloat64(reduce.Float64, m.Data)
		if err == nil {
			err = s.table.Declare(m.Key, KeyConfig{Len: int(m.Count), Update: UpdateMode(m.Code), LR: m.LR, Momentum: m.Mom, Staleness: int(m.Stale), Init: init})
		}
		if err != nil {
			s.replyErr(l, m.ID, err)
			return
		}
		s.reply(l, m.ID, message{})
	case msgPush, msgPushPull:
		grad, err := toFloat64(m.DType, m.Data)
		if err == nil {
			err = s.table.Push(m.Key, w, int(m.Clock), grad, int(m.Samples))
		}
		if err != nil {
			s.replyErr(l, m.ID, err)
			return
		}
		if m.Type == msgPushPull {
			s.pulls = append(s.pulls, pendingPull{worker: w, l: l, id: m.ID, key: m.Key, clock: int(m.Clock) + 1, dtype: m.DType})
		} else {
			s.reply(l, m.ID, message{})
		}
		s.servePulls()
	case msgPull:
		s.pulls = append(s.pulls, pendingPull{worker: w, l: l, id: m.ID, key: m.Key, clock: int(m.Clock), dtype: m.DType})
		s.servePulls()
	case msgShare:
		s.share(w, l, m)
	case msgRound:
		s.round(w, l, m)
	case msgLost:
		// Another worker's membership found worker Root dead (frozen or cut
		// off: its connection here may look fine).
		x := int(m.Root)
		if x < 0 || x >= len(s.gone) || x == w {
			s.replyErr(l, m.ID, fmt.Errorf("%w: worker %d reports worker %d lost", ErrBadRequest, w, x))
			return
		}
		if !s.gone[x] {
			if xl := s.links[x]; xl != nil {
				xl.kill()
				_ = xl.c.Close()
			}
			s.workerGone(x, false, workerLost(x, fmt.Sprintf("reported by worker %d: %s", w, m.Data)))
		}
		s.reply(l, m.ID, message{})
	default:
		s.replyErr(l, m.ID, fmt.Errorf("%w: a hub does not take %v messages", ErrBadRequest, m.Type))
	}
}

// servePulls answers every parked pull that its key's bound now allows.
func (s *hubState) servePulls() {
	kept := s.pulls[:0]
	for _, p := range s.pulls {
		v, ready, stale, err := s.table.Pull(p.key, p.worker, p.clock)
		switch {
		case err != nil:
			s.replyErr(p.l, p.id, err)
		case ready:
			data, err := fromFloat64(p.dtype, v)
			if err != nil {
				s.replyErr(p.l, p.id, err)
				continue
			}
			s.reply(p.l, p.id, message{DType: p.dtype, Stale: int32(stale), Data: data})
		default:
			kept = append(kept, p)
		}
	}
	clear(s.pulls[len(kept):])
	s.pulls = kept
}

// share takes an LB-BSP request. The shares of one iteration are computed
// once every live worker has asked, from every worker's last iteration,
// so that they add up to the global batch exactly.
func (s *hubState) share(w int, l *link, m *message) {
	r := s.shares[m.Clock]
	if r == nil {
		r = &shareRound{total: int(m.Count), reqs: make([]roundReq, s.h.cfg.Workers)}
		s.shares[m.Clock] = r
	}
	if r.reqs[w].arrived || int(m.Count) != r.total {
		s.replyErr(l, m.ID, fmt.Errorf("%w: worker %d asked for its share of iteration %d twice, or of another batch (%d, not %d)", ErrBadRequest, w, m.Clock, m.Count, r.total))
		return
	}
	r.reqs[w] = roundReq{l: l, id: m.ID, arrived: true}
	s.speeds[w].Observe(int(m.Samples), time.Duration(m.Nanos))
	s.serveShares()
}

type shareRound struct {
	total int
	reqs  []roundReq
}

// serveShares answers every share round that all live workers have joined.
func (s *hubState) serveShares() {
	for clock, r := range s.shares {
		var rates []float64
		var who []int
		complete := true
		for i := range r.reqs {
			switch {
			case r.reqs[i].arrived:
				rates = append(rates, s.speeds[i].Rate())
				who = append(who, i)
			case !s.gone[i]:
				complete = false
			}
		}
		if !complete {
			continue
		}
		delete(s.shares, clock)
		shares, err := Shares(r.total, rates)
		for j, i := range who {
			if err != nil {
				s.replyErr(r.reqs[i].l, r.reqs[i].id, err)
				continue
			}
			s.reply(r.reqs[i].l, r.reqs[i].id, message{Count: uint64(shares[j])})
		}
	}
}

// workerGone takes w out: cleanly (it said goodbye), or lost with cause
// (its connection broke, or it gave up and said why).
func (s *hubState) workerGone(w int, clean bool, cause error) {
	s.links[w] = nil
	s.gone[w] = true
	if clean {
		cause = workerLost(w, "it closed its connection (left the job)")
	}
	s.h.mu.Lock()
	switch {
	case clean:
		s.h.stats.Left++
	case s.h.cfg.Elastic:
		s.h.stats.Removed++
	}
	s.h.mu.Unlock()
	lost := cause
	if clean || s.h.cfg.Elastic {
		if !clean {
			s.h.log.Warn("worker lost; elastic: rounds go on without it", "worker", w, "cause", cause)
		}
		_ = s.table.Remove(w)
		s.servePulls()
		s.serveShares()
	} else if s.failed == nil {
		s.h.log.Warn("worker lost; failing every request", "worker", w, "cause", cause)
		s.failed = lost
		for _, p := range s.pulls {
			s.replyErr(p.l, p.id, lost)
		}
		s.pulls = nil
		for clock, r := range s.shares {
			for _, q := range r.reqs {
				if q.arrived {
					s.replyErr(q.l, q.id, lost)
				}
			}
			delete(s.shares, clock)
		}
	}
	for id, r := range s.rounds {
		if !r.reqs[w].arrived || s.failed != nil {
			s.failRound(r, lost)
			delete(s.rounds, id)
		}
	}
	all := true
	for i := range s.gone {
		all = all && s.gone[i]
	}
	if all {
		select {
		case <-s.h.done:
		default:
			close(s.h.done)
		}
	}
}

// round handles one worker's part of a collective round. A round is
// complete when every worker has sent its part; a reduction folds the
// parts in rank order, so the result does not depend on arrival order.
func (s *hubState) round(w int, l *link, m *message) {
	id := roundID{m.Clock, m.Part}
	r := s.rounds[id]
	if r == nil {
		r = &roundState{spec: *m, reqs: make([]roundReq, s.h.cfg.Workers)}
		r.spec.Data = nil
		s.rounds[id] = r
	}
	if r.reqs[w].arrived {
		s.replyErr(l, m.ID, fmt.Errorf("%w: worker %d sent part %d of collective #%d twice", ErrBadRequest, w, m.Part, m.Clock))
		return
	}
	r.reqs[w] = roundReq{l: l, id: m.ID, arrived: true, want: [2]uint64{m.WantOff, m.WantLen}}
	r.arrived++
	if r.err == nil {
		r.err = s.checkRound(r, w, m)
	}
	for i, g := range s.gone {
		if g && r.err == nil {
			r.err = workerLost(i, "it is gone from the job")
		}
	}
	if r.err != nil {
		s.failRound(r, r.err)
	} else {
		s.fold(r, w, m.Data)
	}
	if r.arrived < len(r.reqs) {
		return
	}
	delete(s.rounds, id)
	if r.err != nil {
		return
	}
	size := uint64(reduce.Size(r.spec.DType))
	var result []byte
	switch r.spec.Kind {
	case kindReduce:
		result = r.acc
	case kindGather:
		for i := range r.reqs {
			result = append(result, r.reqs[i].data...)
		}
	case kindBroadcast:
		result = r.reqs[r.spec.Root].data
	}
	for i := range r.reqs {
		q := &r.reqs[i]
		out := result
		if r.spec.Kind != kindGather {
			out = result[q.want[0]*size : (q.want[0]+q.want[1])*size]
		}
		s.reply(q.l, q.id, message{DType: r.spec.DType, Data: out})
	}
}

// checkRound compares a worker's part with the round's first one.
func (s *hubState) checkRound(r *roundState, w int, m *message) error {
	f := &r.spec
	mismatch := func(what string, mine, theirs any) error {
		return &transport.MismatchError{Peer: w, What: fmt.Sprintf("%s of collective #%d", what, m.Clock), Mine: mine, Got: theirs}
	}
	switch {
	case m.Kind != f.Kind:
		return mismatch("the collective", f.Kind, m.Kind)
	case m.DType != f.DType:
		return mismatch("the element type", reduce.DTypeName(f.DType), reduce.DTypeName(m.DType))
	case m.Code != f.Code:
		return mismatch("the op", reduce.Op(f.Code), reduce.Op(m.Code))
	case m.Count != f.Count:
		return mismatch("the buffer length", f.Count, m.Count)
	case m.Off != f.Off || m.N != f.N:
		return mismatch("the partition", [2]uint64{f.Off, f.N}, [2]uint64{m.Off, m.N})
	case m.Root != f.Root:
		return mismatch("the root", f.Root, m.Root)
	}
	if m.Kind == kindReduce && !reduce.Op(m.Code).Valid() {
		return fmt.Errorf("%w: unknown op %d", ErrBadRequest, m.Code)
	}
	size := uint64(reduce.Size(m.DType))
	want := m.N * size
	if m.Kind == kindBroadcast && uint32(w) != m.Root {
		want = 0
	}
	if m.Kind == kindBroadcast && int(m.Root) >= len(r.reqs) {
		return fmt.Errorf("%w: root %d out of range", ErrBadRequest, m.Root)
	}
	if uint64(len(m.Data)) != want {
		return fmt.Errorf("%w: worker %d sent %d bytes for a partition of %d bytes", transport.ErrSizeMismatch, w, len(m.Data), want)
	}
	if m.Kind != kindGather && (m.WantOff > m.N || m.WantLen > m.N-m.WantOff) {
		return fmt.Errorf("%w: worker %d wants [%d, +%d) of a partition of %d", ErrBadRequest, w, m.WantOff, m.WantLen, m.N)
	}
	return nil
}

// fold takes worker w's data into the round. Reductions fold in rank
// order: a part that arrives early waits for its turn.
func (s *hubState) fold(r *roundState, w int, data []byte) {
	r.reqs[w].data = data
	if r.spec.Kind != kindReduce {
		return
	}
	for r.next < len(r.reqs) && r.reqs[r.next].arrived {
		d := r.reqs[r.next].data
		if r.next == 0 {
			r.acc = d
		} else if err := reduce.Bytes(r.spec.DType, reduce.Op(r.spec.Code), r.acc, d); err != nil {
			r.err = err
			s.failRound(r, err)
			return
		}
		r.reqs[r.next].data = nil
		r.next++
	}
}

// failRound answers every worker of the round that has arrived with err;
// those that arrive later get it on arrival.
func (s *hubState) failRound(r *roundState, err error) {
	if r.err == nil {
		r.err = err
	}
	for i := range r.reqs {
		q := &r.reqs[i]
		if q.arrived && q.l != nil {
			s.replyErr(q.l, q.id, r.err)
			q.l = nil
		}
	}
	r.acc = nil
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
