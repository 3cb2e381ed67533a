package ps

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/gorun/gorun/reduce"
	"github.com/gorun/gorun/transport"
)

// core is a hub's state machine: the keyed Table with its parked pulls,
// LB-BSP share rounds, the collective rounds of the hub strategy, and which
// workers are connected, gone or lost. It takes events (a worker joined,
// sent a request, or is gone) and returns the replies to send, addressed by
// worker. It does no I/O, reads no clock and takes no locks, so BSP, SSP,
// elastic and worker-loss behaviour are tested deterministically on it; the
// Hub server around it owns the connections.
type core struct {
	workers int
	elastic bool

	table  *Table
	speeds []Speed
	fits   []costFit // the optimal share rule's cost models
	joined []bool    // connected now
	gone   []bool    // left or lost: never again
	failed error     // non-elastic: the loss that fails every request
	pulls  []pendingPull
	rounds map[roundID]*roundState
	shares map[uint32]*shareRound
	split  ShareConfig // how serveShares splits a batch
	zstd   zstdCodec   // decodes sparse pushes compressed with zstd

	wireScratch []float32 // foldWire's decoded part for ops other than sum

	left, removed int
	relaxed       int // share rounds split without their deadline (MissRelax)
	out           []reply
}

// reply is one answer for the server to send: to worker, for request id.
type reply struct {
	worker int
	msg    message
}

func newCore(workers int, elastic bool, speedAlpha float64) *core {
	c := &core{
		workers: workers, elastic: elastic,
		table: NewTable(workers), speeds: make([]Speed, workers), fits: make([]costFit, workers),
		joined: make([]bool, workers), gone: make([]bool, workers),
		rounds: map[roundID]*roundState{}, shares: map[uint32]*shareRound{},
	}
	for i := range c.speeds {
		c.speeds[i].Alpha = speedAlpha
	}
	return c
}

// join admits worker w's connection; a second connection, or one after w
// has gone, is refused with an error for the server to send on it.
func (c *core) join(w int) error {
	if c.joined[w] || c.gone[w] {
		return fmt.Errorf("%w: worker %d is already connected or has left", ErrWorker, w)
	}
	c.joined[w] = true
	return nil
}

// allGone: every worker has come and gone.
func (c *core) allGone() bool {
	for _, g := range c.gone {
		if !g {
			return false
		}
	}
	return true
}

func (c *core) flush() []reply {
	out := c.out
	c.out = nil
	return out
}

func (c *core) reply(w int, id uint32, m message) {
	m.Type, m.ID = msgReply, id
	c.out = append(c.out, reply{w, m})
}

func (c *core) replyErr(w int, id uint32, err error) {
	m := message{Type: msgError, ID: id, Code: codeOf(err), Data: []byte(err.Error())}
	if errors.Is(err, ErrCorrupt) {
		m.Kind = errCorruptFlag
	}
	c.out = append(c.out, reply{w, m})
}

// request takes one request from worker w. kill lists workers whose
// connections the server must drop (a worker reported lost).
func (c *core) request(w int, m *message) (out []reply, kill []int) {
	if c.failed != nil {
		c.replyErr(w, m.ID, c.failed)
		return c.flush(), nil
	}
	switch m.Type {
	case msgDeclare:
		init, err := toFloat64(reduce.Float64, m.Data)
		if err == nil {
			sp := SparseConfig{Method: SparseMethod(m.Kind), Ratio: math.Float64frombits(m.WantOff), Seed: m.WantLen}
			err = c.table.Declare(m.Key, KeyConfig{Len: int(m.Count), Update: UpdateMode(m.Code), LR: m.LR, Momentum: m.Mom, Staleness: int(m.Stale), Init: init, Sparse: sp})
		}
		if err != nil {
			c.replyErr(w, m.ID, err)
			break
		}
		c.reply(w, m.ID, message{})
	case msgPush, msgPushPull, msgSparsePush, msgSparsePushPull:
		var grad []float64
		var err error
		if m.Type == msgSparsePush || m.Type == msgSparsePushPull {
			grad, err = c.sparseGrad(w, m)
		} else {
			grad, err = toFloat64(m.DType, m.Data)
		}
		if err == nil {
			err = c.table.Push(m.Key, w, int(m.Clock), grad, int(m.Samples))
		}
		if err != nil {
			c.replyErr(w, m.ID, err)
			if errors.Is(err, ErrCorrupt) {
				c.servePulls() // the key failed: so do the pulls waiting on it
			}
			break
		}
		if m.Type == msgPushPull || m.Type == msgSparsePushPull {
			c.pulls = append(c.pulls, pendingPull{worker: w, id: m.ID, key: m.Key, clock: int(m.Clock) + 1, dtype: m.DType, pushed: true})
		} else {
			c.reply(w, m.ID, message{})
		}
		c.servePulls()
		if m.Type == msgSparsePushPull && m.Part&askPushed != 0 && c.parked(w, m.ID) {
			// The push is in and its pull waits: say so now.
			c.out = append(c.out, reply{w, message{Type: msgPushed, ID: m.ID}})
		}
	case msgPull:
		c.pulls = append(c.pulls, pendingPull{worker: w, id: m.ID, key: m.Key, clock: int(m.Clock), dtype: m.DType})
		c.servePulls()
	case msgShare:
		c.share(w, m)
	case msgRound:
		c.round(w, m)
	case msgLost:
		// Another worker's membership found worker Root dead (frozen or cut
		// off: its connection here may look fine).
		x := int(m.Root)
		if x < 0 || x >= c.workers || x == w {
			c.replyErr(w, m.ID, fmt.Errorf("%w: worker %d reports worker %d lost", ErrBadRequest, w, x))
			break
		}
		if !c.gone[x] {
			kill = append(kill, x)
			c.workerGone(x, false, workerLost(x, fmt.Sprintf("reported by worker %d: %s", w, m.Data)))
		}
		c.reply(w, m.ID, message{})
	default:
		c.replyErr(w, m.ID, fmt.Errorf("%w: a hub does not take %v messages", ErrBadRequest, m.Type))
	}
	return c.flush(), kill
}

// leave takes worker w out: cleanly (it said goodbye), or lost with cause
// (its connection broke, or it gave up and said why).
func (c *core) leave(w int, clean bool, cause error) []reply {
	c.workerGone(w, clean, cause)
	return c.flush()
}

type pendingPull struct {
	worker int
	id     uint32
	key    string
	clock  int
	dtype  uint8
	pushed bool // the pull of a push-pull, whose push was applied
}

// failPull answers a parked pull with err, saying whether its push (a
// push-pull's) was applied.
func (c *core) failPull(p pendingPull, err error) {
	c.replyErr(p.worker, p.id, err)
	if p.pushed {
		c.out[len(c.out)-1].msg.Kind |= errPushed
	}
}

type roundID struct{ seq, part uint32 }

type roundReq struct {
	id       uint32
	arrived  bool
	answered bool
	want     [2]uint64
	data     []byte
	buf      []byte // the pooled frame data lies in, given back once folded
}

type roundState struct {
	spec    message // the first arrival's header
	reqs    []roundReq
	arrived int
	acc     []byte
	accBuf  []byte // the pooled frame acc lies in, if any
	next    int    // reduce: the next worker to fold in
	err     error
}

// parked reports whether worker w's request id is a pull still waiting.
func (c *core) parked(w int, id uint32) bool {
	for i := len(c.pulls) - 1; i >= 0; i-- {
		if p := c.pulls[i]; p.worker == w && p.id == id {
			return true
		}
	}
	return false
}

// servePulls answers every parked pull that its key's bound now allows.
func (c *core) servePulls() {
	kept := c.pulls[:0]
	for _, p := range c.pulls {
		v, ready, stale, err := c.table.Pull(p.key, p.worker, p.clock)
		switch {
		case err != nil:
			c.failPull(p, err)
		case ready:
			data, err := fromFloat64(p.dtype, v)
			if err != nil {
				c.failPull(p, err)
				continue
			}
			c.reply(p.worker, p.id, message{DType: p.dtype, Stale: int32(stale), Data: data})
		default:
			kept = append(kept, p)
		}
	}
	clear(c.pulls[len(kept):])
	c.pulls = kept
}

// share takes an LB-BSP request. The shares of one iteration are computed
// once every live worker has asked, from every worker's last iteration,
// so that they add up to the global batch exactly.
func (c *core) share(w int, m *message) {
	r := c.shares[m.Clock]
	if r == nil {
		r = &shareRound{total: int(m.Count), reqs: make([]roundReq, c.workers)}
		c.shares[m.Clock] = r
	}
	if r.reqs[w].arrived || int(m.Count) != r.total {
		c.replyErr(w, m.ID, fmt.Errorf("%w: worker %d asked for its share of iteration %d twice, or of another batch (%d, not %d)", ErrBadRequest, w, m.Clock, m.Count, r.total))
		return
	}
	r.reqs[w] = roundReq{id: m.ID, arrived: true}
	c.speeds[w].Observe(int(m.Samples), time.Duration(m.Nanos))
	c.fits[w].observe(int(m.Samples), time.Duration(m.Nanos))
	c.serveShares()
}

type shareRound struct {
	total int
	reqs  []roundReq
}

// serveShares answers every share round that all live workers have joined.
func (c *core) serveShares() {
	for clock, r := range c.shares {
		var who []int
		complete := true
		for i := range r.reqs {
			switch {
			case r.reqs[i].arrived:
				who = append(who, i)
			case !c.gone[i]:
				complete = false
			}
		}
		if !complete {
			continue
		}
		delete(c.shares, clock)
		shares, relaxed, err := c.split.splitHub(r.total, c.speeds, c.fits, who)
		var flag uint8
		if relaxed {
			flag = shareRelaxed
			c.relaxed++
		}
		for j, i := range who {
			if err != nil {
				c.replyErr(i, r.reqs[i].id, err)
				continue
			}
			c.reply(i, r.reqs[i].id, message{Count: uint64(shares[j]), Kind: flag})
		}
	}
}

func (c *core) workerGone(w int, clean bool, cause error) {
	c.joined[w] = false
	c.gone[w] = true
	if clean {
		cause = workerLost(w, "it closed its connection (left the job)")
		c.left++
	} else if c.elastic {
		c.removed++
	}
	lost := cause
	if clean || c.elastic {
		_ = c.table.Remove(w)
		c.servePulls()
		c.serveShares()
	} else if c.failed == nil {
		c.failed = lost
		for _, p := range c.pulls {
			c.failPull(p, lost)
		}
		c.pulls = nil
		for clock, r := range c.shares {
			for i, q := range r.reqs {
				if q.arrived {
					c.replyErr(i, q.id, lost)
				}
			}
			delete(c.shares, clock)
		}
	}
	for id, r := range c.rounds {
		if !r.reqs[w].arrived || c.failed != nil {
			c.failRound(r, lost)
			delete(c.rounds, id)
		}
	}
}

// round handles one worker's part of a collective round. A round is
// complete when every worker has sent its part; a reduction folds the
// parts in rank order, so the result does not depend on arrival order.
func (c *core) round(w int, m *message) {
	id := roundID{m.Clock, m.Part}
	r := c.rounds[id]
	if r == nil {
		r = &roundState{spec: *m, reqs: make([]roundReq, c.workers)}
		r.spec.Data, r.spec.buf = nil, nil // the header only: the part is in reqs
		c.rounds[id] = r
	}
	if r.reqs[w].arrived {
		c.replyErr(w, m.ID, fmt.Errorf("%w: worker %d sent part %d of collective #%d twice", ErrBadRequest, w, m.Part, m.Clock))
		return
	}
	r.reqs[w] = roundReq{id: m.ID, arrived: true, want: [2]uint64{m.WantOff, m.WantLen}}
	r.arrived++
	if r.err == nil {
		r.err = checkRound(r, w, m)
	}
	for i, g := range c.gone {
		if g && r.err == nil {
			r.err = workerLost(i, "it is gone from the job")
		}
	}
	if r.err != nil {
		c.failRound(r, r.err)
	} else {
		c.fold(r, w, m.Data, m.buf)
	}
	if r.arrived < len(r.reqs) {
		return
	}
	delete(c.rounds, id)
	if r.err != nil {
		return
	}
	size := uint64(reduce.Size(r.spec.DType))
	var result []byte
	var release func()
	switch {
	case r.spec.Kind == kindReduce && r.spec.Wire != 0:
		// Encoded once, so every worker gets the same bits: the float32
		// result rounded to the wire format.
		w := reduce.Wire(r.spec.Wire)
		size = uint64(w.Size())
		result = transport.GetBuf(len(r.acc) / 4 * w.Size())
		if err := reduce.Encode(w, result, reduce.FromBytes[float32](r.acc)); err != nil {
			c.failRound(r, err)
			return
		}
		if r.accBuf != nil {
			transport.PutBuf(r.accBuf)
		}
		r.acc, r.accBuf = nil, nil
		release = giveBack(result, len(r.reqs))
	case r.spec.Kind == kindReduce:
		result = r.acc
		release = giveBack(r.accBuf, len(r.reqs))
	case r.spec.Kind == kindGather:
		for i := range r.reqs {
			result = append(result, r.reqs[i].data...)
		}
	case r.spec.Kind == kindBroadcast:
		result = r.reqs[r.spec.Root].data
	}
	for i := range r.reqs {
		q := &r.reqs[i]
		out := result
		if r.spec.Kind != kindGather {
			out = result[q.want[0]*size : (q.want[0]+q.want[1])*size]
		}
		c.reply(i, q.id, message{DType: r.spec.DType, Wire: r.spec.Wire, Data: out, release: release})
	}
}

// giveBack returns a func that gives buf back to the pool on its n-th
// call: once every answer that carries a part of it has been written. nil
// if buf is not pooled.
func giveBack(buf []byte, n int) func() {
	if buf == nil {
		return nil
	}
	var left atomic.Int32
	left.Store(int32(n))
	return func() {
		if left.Add(-1) == 0 {
			transport.PutBuf(buf)
		}
	}
}

// checkRound compares a worker's part with the round's first one.
func checkRound(r *roundState, w int, m *message) error {
	f := &r.spec
	mismatch := func(what string, mine, theirs any) error {
		return &transport.MismatchError{Peer: w, What: fmt.Sprintf("%s of collective #%d", what, m.Clock), Mine: mine, Got: theirs}
	}
	switch {
	case m.Kind != f.Kind:
		return mismatch("the collective", f.Kind, m.Kind)
	case m.DType != f.DType:
		return mismatch("the element type", reduce.DTypeName(f.DType), reduce.DTypeName(m.DType))
	case m.Wire != f.Wire:
		// Before the partition: partitions are cut by the bytes that
		// travel, so workers whose formats differ cut differently.
		return mismatch("the wire format", reduce.Wire(f.Wire), reduce.Wire(m.Wire))
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
	if m.Wire != 0 {
		size = uint64(reduce.Wire(m.Wire).Size())
	}
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
func (c *core) fold(r *roundState, w int, data, buf []byte) {
	r.reqs[w].data, r.reqs[w].buf = data, buf
	if r.spec.Kind != kindReduce {
		return
	}
	for r.next < len(r.reqs) && r.reqs[r.next].arrived {
		d := r.reqs[r.next].data
		if r.spec.Wire != 0 {
			if err := c.foldWire(r, d); err != nil {
				c.failRound(r, err)
				return
			}
			if b := r.reqs[r.next].buf; b != nil {
				transport.PutBuf(b)
			}
		} else if r.next == 0 {
			r.acc, r.accBuf = d, r.reqs[0].buf
		} else if err := reduce.Bytes(r.spec.DType, reduce.Op(r.spec.Code), r.acc, d); err != nil {
			c.failRound(r, err)
			return
		} else if b := r.reqs[r.next].buf; b != nil {
			transport.PutBuf(b) // folded: nothing refers to it now
		}
		r.reqs[r.next].data, r.reqs[r.next].buf = nil, nil
		r.next++
	}
}

// foldWire folds a part of a round whose float32 data travels in a 2-byte
// wire format: the first part is decoded into a pooled float32
// accumulator, the others added into it in float32 (or decoded and then
// folded with the op), never summed in half precision.
func (c *core) foldWire(r *roundState, d []byte) error {
	w := reduce.Wire(r.spec.Wire)
	n := len(d) / w.Size()
	if r.next == 0 {
		r.accBuf = transport.GetBuf(n * 4)
		r.acc = r.accBuf[:n*4]
		acc, ok := reduce.View[float32](r.acc)
		if !ok {
			transport.PutBuf(r.accBuf)
			r.accBuf = nil
			r.acc = make([]byte, n*4)
			acc, _ = reduce.View[float32](r.acc)
		}
		return reduce.Decode(w, acc, d)
	}
	acc, _ := reduce.View[float32](r.acc)
	switch reduce.Op(r.spec.Code) {
	case reduce.Sum, reduce.Avg:
		return reduce.DecodeAdd(w, acc, d)
	}
	if cap(c.wireScratch) < n {
		c.wireScratch = make([]float32, n)
	}
	tmp := c.wireScratch[:n]
	if err := reduce.Decode(w, tmp, d); err != nil {
		return err
	}
	return reduce.Bytes(r.spec.DType, reduce.Op(r.spec.Code), r.acc, reduce.AsBytes(tmp))
}

// failRound answers every worker of the round that has arrived with err;
// those that arrive later get it on arrival.
func (c *core) failRound(r *roundState, err error) {
	if r.err == nil {
		r.err = err
	}
	for i := range r.reqs {
		q := &r.reqs[i]
		if q.arrived && !q.answered {
			c.replyErr(i, q.id, r.err)
			q.answered = true
		}
	}
	if r.spec.Wire != 0 && r.accBuf != nil {
		// A wire round's accumulator is the round's own (foldWire's
		// GetBuf); a plain round's is worker 0's frame, which may still
		// be referred to.
		transport.PutBuf(r.accBuf)
	}
	r.acc, r.accBuf = nil, nil
}
