package collective

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorun/gorun/internal/control"
	"github.com/gorun/gorun/ring"
	"github.com/gorun/gorun/transport"
)

// An elastic Comm (Config.Elastic, gorun --elastic) goes on when a rank
// is lost. One sequencer that every rank trusts, gorun's launcher, decides
// the membership: it learns of a death from the process's exit (or fences
// a rank that a peer suspects, by killing it) and sends every survivor the
// new view, epoch + 1 and the live ranks, over the rank's control channel
// (GORUN_CONTROL_FD, a line protocol: "view E r,r,..." down, "suspect R
// reason" up). Gossip's opinions never decide it.
//
// A collective that a view change interrupts returns ErrViewChanged on
// every survivor: the one in flight when the view came, or, on a rank
// that had already finished it, the next one it calls (without moving any
// data). Either way every survivor sees exactly one ErrViewChanged per
// view change, at the same point of its own program's collectives, and
// then redoes its step on the new view; see doc.go for the pattern. Every
// frame carries its epoch (the high bits of its sequence number), and a
// frame of an earlier epoch is dropped on arrival, so the interrupted
// collective's leftovers can never mix with the next one's.

// ErrViewChanged is returned, with the cause, by the collective during
// which (or since which) an elastic job's membership changed. Nothing of
// that collective's result can be trusted; View tells who takes part now.
var ErrViewChanged = errors.New("the job's membership changed")

// View is an elastic job's membership: its epoch (0 at the start, one
// more at each change) and the ranks that take part in collectives, in
// increasing order.
type View struct {
	Epoch int
	Ranks []int
}

// Index is rank's place in the view, or -1 if it is not in it.
func (v View) Index(rank int) int {
	if i, ok := slices.BinarySearch(v.Ranks, rank); ok {
		return i
	}
	return -1
}

// View returns the current view. Without Elastic it is epoch 0 and every
// rank.
func (c *Comm) View() View {
	if c.el == nil {
		all := make([]int, c.cfg.Size)
		for i := range all {
			all[i] = i
		}
		return View{Ranks: all}
	}
	v := c.el.installed.Load()
	return View{Epoch: v.Epoch, Ranks: slices.Clone(v.Ranks)}
}

const (
	seqEpochShift = 20 // a frame's Seq is epoch<<20 | collective number
	seqMask       = 1<<seqEpochShift - 1
	maxEpoch      = 1<<(32-seqEpochShift) - 1
)

// elastic is an elastic Comm's view of the membership.
type elastic struct {
	c     *Comm
	ctl   io.ReadWriteCloser
	hosts []string // every job rank's host key; nil: unknown

	mu        sync.Mutex
	announced View            // the latest view from the sequencer
	pending   atomic.Bool     // announced may be newer than installed
	cur       context.Context // ends when a view after announced comes
	cancel    context.CancelCauseFunc

	// The rest belongs to whoever holds the Comm's turn.
	installed atomic.Pointer[View] // the view collectives run on (read from any goroutine)
	live      context.Context      // cur when installed was announced
	me        int                  // this rank's index in installed
	seqBase   uint32
	stash     map[int][]transport.Frame // frames of a later epoch, by job rank
	nstash    int                       // frames in stash
	out       error                     // set once a view left this rank out
	merged    mergedCtx

	local    *memSequencer // in memory (NewLocal): the sequencer itself
	wmu      sync.Mutex
	reported map[int]bool // ranks suspected to the sequencer
	closeOne sync.Once
}

// memSequencer is the sequencer of an in-memory elastic job (NewLocalOn
// with Config.Elastic): MemNetwork.Kill is a death, and a suspect is
// fenced by a Kill.
type memSequencer struct {
	nw    *transport.MemNetwork
	comms []*Comm
	mu    sync.Mutex
	view  View
}

func (s *memSequencer) killed(r int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.view.Index(r) < 0 {
		return
	}
	s.view = View{Epoch: s.view.Epoch + 1, Ranks: slices.DeleteFunc(slices.Clone(s.view.Ranks), func(x int) bool { return x == r })}
	for _, x := range s.view.Ranks {
		s.comms[x].el.announce(s.view)
	}
}

func (s *memSequencer) suspect(r int) { go s.nw.Kill(r) }

// startElastic makes c elastic with every rank in view 0 and starts
// reading the control channel.
func (c *Comm) startElastic(hosts []string) error {
	all := make([]int, c.cfg.Size)
	for i := range all {
		all[i] = i
	}
	e := &elastic{c: c, ctl: c.cfg.Control, hosts: hosts, stash: map[int][]transport.Frame{}, reported: map[int]bool{}}
	e.announced = View{Ranks: all}
	e.cur, e.cancel = context.WithCancelCause(context.Background())
	e.merged.stop = func() {}
	c.el = e
	if err := c.install(e.announced); err != nil {
		return err
	}
	if e.ctl != nil {
		go e.readViews()
	}
	return nil
}

// readViews takes the sequencer's views from the control channel until
// it closes. A line that is not a valid view is logged and ignored.
func (e *elastic) readViews() {
	r := control.NewReader(e.ctl)
	for {
		line, err := r.Next()
		if errors.Is(err, control.ErrLineTooLong) {
			e.c.log.Warn("elastic: control channel: ignoring a line", "err", err)
			continue
		}
		if err != nil {
			return // gorun's agent is gone: the job is ending
		}
		v, err := ParseView(string(line), e.c.cfg.Size)
		if err != nil {
			e.c.log.Warn("elastic: control channel: ignoring a line", "err", err)
			continue
		}
		e.announce(v)
	}
}

// ParseView parses a line of the control channel, "view EPOCH R,R,...",
// for a job of size ranks: an epoch from 1 to 4095 and live ranks of the
// job in increasing order.
func ParseView(line string, size int) (View, error) {
	cv, err := control.ParseView(line)
	if err != nil {
		return View{}, err
	}
	if cv.Epoch > maxEpoch {
		return View{}, fmt.Errorf("view %d: epochs go up to %d", cv.Epoch, maxEpoch)
	}
	if last := cv.Live[len(cv.Live)-1]; last >= size {
		return View{}, fmt.Errorf("view %d: rank %d in a job of %d", cv.Epoch, last, size)
	}
	return View{Epoch: cv.Epoch, Ranks: cv.Live}, nil
}

// announce records a view from the sequencer and interrupts whatever runs
// in an earlier one.
func (e *elastic) announce(v View) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if v.Epoch <= e.announced.Epoch {
		return
	}
	e.announced = v
	e.pending.Store(true)
	e.cancel(fmt.Errorf("%w: now epoch %d, ranks %v", ErrViewChanged, v.Epoch, v.Ranks))
	e.cur, e.cancel = context.WithCancelCause(context.Background())
}

// latest returns the announced view, whether it is newer than the
// installed one, and the channel that closes when it moves on.
func (e *elastic) latest() (View, bool, <-chan struct{}) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.announced, e.announced.Epoch > e.installed.Load().Epoch, e.cur.Done()
}

// install makes v the view the collectives run on.
func (c *Comm) install(v View) error {
	e := c.el
	me := v.Index(c.cfg.Rank)
	if me < 0 {
		// Fenced: gorun is ending this process; until then it must not
		// take part in anything.
		e.out = fmt.Errorf("rank %d is not in the view of epoch %d (ranks %v): gorun took it out of the job", c.cfg.Rank, v.Epoch, v.Ranks)
		return e.out
	}
	e.mu.Lock()
	live := e.cur
	if e.announced.Epoch != v.Epoch {
		// Only the announced view is ever installed; anything else is
		// already over.
		var cancel context.CancelFunc
		live, cancel = context.WithCancel(context.Background())
		cancel()
	}
	e.installed.Store(&v)
	e.pending.Store(e.announced.Epoch > v.Epoch)
	e.mu.Unlock()
	e.live, e.me = live, me
	e.seqBase = uint32(v.Epoch) << seqEpochShift
	c.seq = e.seqBase
	g, err := ring.NewGroup(&epochNet{e: e, base: c.tr, epoch: uint32(v.Epoch)}, v.Ranks)
	if err != nil {
		return err
	}
	c.net = g
	var hosts []string
	if e.hosts != nil {
		hosts = make([]string, len(v.Ranks))
		for i, r := range v.Ranks {
			hosts[i] = e.hosts[r]
		}
	}
	return c.setTopology(hosts)
}

// begin starts a collective: if the view changed since the last one, it
// installs the new view and returns ErrViewChanged; otherwise it returns
// ctx, ended also by the next view change, and the func that releases it.
func (e *elastic) begin(ctx context.Context, kind uint8) (context.Context, func(), error) {
	if e.out != nil {
		return ctx, nil, fmt.Errorf("collective: %s: %w", kindName[kind], e.out)
	}
	if e.pending.Load() { // otherwise no lock is taken
		if v, newer, _ := e.latest(); newer {
			if err := e.c.install(v); err != nil {
				return ctx, nil, fmt.Errorf("collective: %s: %w", kindName[kind], err)
			}
			return ctx, nil, fmt.Errorf("collective: rank %d: %s: %w (now epoch %d, ranks %v)", e.c.cfg.Rank, kindName[kind], ErrViewChanged, v.Epoch, v.Ranks)
		}
	}
	live := e.live
	if ctx.Done() == nil {
		// context.Background and the like: the view's own context is all
		// there is to watch, at no cost.
		return live, func() {}, nil
	}
	if ctx == e.merged.user && live == e.merged.live {
		// The same context as the last call in this view (a training
		// loop's): reuse what it was merged with.
		return e.merged.ctx, func() {}, nil
	}
	e.merged.stop()
	merged, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(live, func() { cancel(context.Cause(live)) })
	e.merged = mergedCtx{user: ctx, live: live, ctx: merged, stop: func() { stop(); cancel(nil) }}
	return merged, func() {}, nil
}

// mergedCtx is a caller's context merged with a view's, kept for the
// next call with the same context (merging costs allocations and a
// registration on the view's context).
type mergedCtx struct {
	user, live, ctx context.Context
	stop            func()
}

// viewChange handles a collective's failure in an elastic job: if a peer
// was lost (it tells the sequencer, unless the sequencer spoke first) or
// a new view came, it waits for the view, installs it and returns
// ErrViewChanged with the cause. ok is false for failures that a view
// change does not explain: those end the job as without Elastic.
func (e *elastic) viewChange(ctx context.Context, kind uint8, seq uint32, cause error) (error, bool) {
	var lost *transport.PeerLostError
	peerLost := errors.As(cause, &lost)
	if !peerLost && e.live.Err() == nil && !errors.Is(cause, errNewerView) {
		return nil, false
	}
	if peerLost && e.installed.Load().Index(lost.Rank) >= 0 {
		e.suspect(lost.Rank, lost.Reason)
	}
	timer := time.NewTimer(e.c.cfg.ViewTimeout)
	defer timer.Stop()
	for {
		v, newer, changed := e.latest()
		if newer {
			if err := e.c.install(v); err != nil {
				return fmt.Errorf("collective: %s #%d: %w", kindName[kind], seq&seqMask, err), true
			}
			return fmt.Errorf("collective: rank %d: %s #%d: %w (now epoch %d, ranks %v): %v", e.c.cfg.Rank, kindName[kind], seq&seqMask, ErrViewChanged, v.Epoch, v.Ranks, cause), true
		}
		select {
		case <-e.c.closed: // first: closing also ends changed
			return nil, false
		default:
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, false
		case <-e.c.closed:
			return nil, false
		case <-timer.C:
			e.c.log.Warn("elastic: no new view from gorun", "after", e.c.cfg.ViewTimeout, "cause", cause)
			return nil, false
		}
	}
}

// suspect tells the sequencer that rank seems lost (once per rank).
func (e *elastic) suspect(rank int, reason string) {
	if e.local != nil {
		e.local.suspect(rank)
		return
	}
	if e.ctl == nil {
		return
	}
	e.wmu.Lock()
	defer e.wmu.Unlock()
	if e.reported[rank] {
		return
	}
	e.reported[rank] = true
	if len(reason) > 200 {
		reason = reason[:200]
	}
	if _, err := io.WriteString(e.ctl, control.Suspect{Rank: rank, Reason: reason}.String()+"\n"); err != nil {
		e.c.log.Warn("elastic: cannot tell gorun", "suspect", rank, "err", err)
	}
}

func (e *elastic) close() {
	e.closeOne.Do(func() {
		e.mu.Lock()
		e.cancel(ErrClosed)
		e.mu.Unlock()
		if e.ctl != nil {
			_ = e.ctl.Close()
		}
	})
}

// stashed is what is kept from peer from; a map lookup only when
// anything is kept at all.
func (e *elastic) stashed(from int) []transport.Frame {
	if e.nstash == 0 {
		return nil
	}
	return e.stash[from]
}

// errNewerView: a peer sent a frame of a view this rank has not
// installed yet; the view is on its way.
var errNewerView = errors.New("a peer is already in a newer view")

// epochNet is the transport seen by one view's collectives: frames of an
// earlier epoch (an interrupted collective's) are dropped, and a frame of
// a later one is kept for when this rank gets there.
type epochNet struct {
	e     *elastic
	base  transport.Transport
	epoch uint32
}

func (n *epochNet) Rank() int { return n.base.Rank() }
func (n *epochNet) Size() int { return n.base.Size() }

func (n *epochNet) Send(ctx context.Context, to int, h transport.Header, payload []byte) error {
	return n.base.Send(ctx, to, h, payload)
}

func (n *epochNet) Recv(ctx context.Context, from int) (transport.Frame, error) {
	for q := n.e.stashed(from); len(q) > 0; q = n.e.stashed(from) {
		switch fe := q[0].Seq >> seqEpochShift; {
		case fe == n.epoch:
			n.e.stash[from] = q[1:]
			n.e.nstash--
			return q[0], nil
		case fe < n.epoch:
			n.e.stash[from] = q[1:]
			n.e.nstash--
		default:
			return transport.Frame{}, errNewerView
		}
	}
	for {
		f, err := n.base.Recv(ctx, from)
		if err != nil {
			return f, err
		}
		switch fe := f.Seq >> seqEpochShift; {
		case fe == n.epoch:
			return f, nil
		case fe < n.epoch:
			f.Release()
		default:
			kept := transport.Frame{Header: f.Header, Payload: bytes.Clone(f.Payload)}
			f.Release()
			n.e.stash[from] = append(n.e.stash[from], kept)
			n.e.nstash++
			return transport.Frame{}, errNewerView
		}
	}
}

// Resync gives every rank of the view the state of the view's first rank
// (a Broadcast), again on the newer view if the view changes under it.
// Call it after ErrViewChanged with the training state (the step, the
// weights, the optimizer's moments), the same length on every rank: the
// survivors may disagree on whether the interrupted step was applied.
func Resync[T Number](ctx context.Context, c *Comm, state []T) error {
	for {
		err := Broadcast(ctx, c, state, c.View().Ranks[0])
		if !errors.Is(err, ErrViewChanged) {
			return err
		}
	}
}
