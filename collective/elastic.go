package collective

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorun/gorun/internal/control"
	"github.com/gorun/gorun/membership"
	"github.com/gorun/gorun/ring"
	"github.com/gorun/gorun/transport"
	"github.com/gorun/gorun/transport/mem"
	"github.com/gorun/gorun/transport/tcp"
)

// An elastic Comm (Config.Elastic, gorun --elastic) goes on when a rank
// is lost. One sequencer that every rank trusts, gorun's launcher, decides
// the membership: it learns of a death from the process's exit (or fences
// a rank that a peer suspects, by killing it) and sends every survivor the
// new view, epoch + 1 and the live ranks, over the rank's control channel
// (GORUN_CONTROL_FD, a line protocol: "view E r,r,..." down, "suspect R E
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
// increasing order. Joined are the ranks of Ranks that were restarted
// (gorun --max-restarts) and came back in this view: they hold no
// training state until a Resync.
type View struct {
	Epoch  int
	Ranks  []int
	Joined []int
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
		all := make([]int, c.Size())
		for i := range all {
			all[i] = i
		}
		return View{Epoch: c.epoch, Ranks: all}
	}
	v := c.el.installed.Load()
	return View{Epoch: v.Epoch, Ranks: slices.Clone(v.Ranks), Joined: slices.Clone(v.Joined)}
}

// Elastic reports whether a lost rank changes c's view (Config.Elastic)
// instead of ending the job; a child reports its job's setting.
func (c *Comm) Elastic() bool { return c.el != nil || c.parentElastic() != nil }

// Restarts is how many times gorun restarted this rank (gorun
// --max-restarts, GORUN_RESTART_COUNT): 0 on its first start. A
// restarted rank joined a running job: its first collective returns
// ErrViewChanged, after which Resync gives it the survivors' state.
func (c *Comm) Restarts() int { return c.cfg.RestartCount }

// JobSize is the number of ranks the job was started with (gorun -np),
// whatever the view: with Elastic, Size is the current view's, and a rank
// restarted into a smaller view sizes job-wide buffers by this. In a
// child from Split it is still the job's.
func (c *Comm) JobSize() int { return c.cfg.Size }

const (
	seqEpochShift = 20 // a frame's Seq is epoch<<20 | collective number
	seqMask       = 1<<seqEpochShift - 1
	maxEpoch      = 1<<(32-seqEpochShift) - 1
)

// elastic is an elastic Comm's view of the membership.
type elastic struct {
	c   *Comm
	ctl io.ReadWriteCloser
	// revive lets a restarted rank take its old place in the transport
	// (nil: the transport cannot).
	revive func(peer int, p tcp.Peer) error
	// synced: this rank holds the training state (every rank from the
	// start; a restarted one once a Resync finished).
	synced atomic.Bool
	// fresh: a restarted rank's first collective is yet to come; it
	// returns ErrViewChanged (the turn's owner's).
	fresh bool

	mu        sync.Mutex
	hosts     []string        // every job rank's host key; nil: unknown (copied on write)
	announced View            // the latest view from the sequencer
	pending   atomic.Bool     // announced may be newer than installed
	cur       context.Context // ends when a view after announced comes
	cancel    context.CancelCauseFunc

	// The rest belongs to whoever holds the Comm's turn.
	installed atomic.Pointer[View]    // the view collectives run on (read from any goroutine)
	hostRanks atomic.Pointer[[][]int] // its ranks by host (Comm.Hosts)
	live      context.Context         // cur when installed was announced
	me        int                     // this rank's index in installed
	seqBase   uint32
	stash     map[int][]transport.Frame // frames of a later epoch, by job rank
	nstash    int                       // frames in stash
	out       error                     // set once a view left this rank out
	merged    mergedCtx

	local    *memSequencer // in memory (NewLocal): the sequencer itself
	wmu      sync.Mutex
	reported map[int]int // ranks suspected to the sequencer, with the epoch the report named
	closeOne sync.Once
}

// memSequencer is the sequencer of an in-memory elastic job (NewLocalOn
// with Config.Elastic): mem.Network.Kill is a death, and a suspect is
// fenced by a Kill.
type memSequencer struct {
	nw    *mem.Network
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
		s.comms[x].el.announce(control.View{Epoch: s.view.Epoch, Live: s.view.Ranks})
	}
}

func (s *memSequencer) suspect(r int) { go s.nw.Kill(r) }

// newElastic makes c elastic, in no view yet, and starts reading the
// control channel.
func (c *Comm) newElastic(hosts []string) *elastic {
	e := &elastic{c: c, ctl: c.cfg.Control, hosts: hosts, stash: map[int][]transport.Frame{}, reported: map[int]int{}}
	e.synced.Store(c.cfg.RestartCount == 0)
	if r, ok := c.tr.(interface {
		Revive(int, tcp.Peer) error
	}); ok {
		e.revive = r.Revive
	}
	e.cur, e.cancel = context.WithCancelCause(context.Background())
	e.merged.stop = func() {}
	c.el = e
	if e.ctl != nil {
		go e.readViews()
	}
	return e
}

// startElastic makes c elastic with every rank in view 0 and starts
// reading the control channel.
func (c *Comm) startElastic(hosts []string) error {
	all := make([]int, c.cfg.Size)
	for i := range all {
		all[i] = i
	}
	e := c.newElastic(hosts)
	e.mu.Lock()
	e.announced = View{Ranks: all}
	e.mu.Unlock()
	return c.install(View{Ranks: all})
}

// rejoinPeers is a restarted rank's way into a running job: it waits for
// the sequencer's current view (the agent writes it first) and then for
// gossip to bring that view's ranks, again if the view changes meanwhile.
func (e *elastic) rejoinPeers(ctx context.Context, m *membership.Member) ([]membership.Peer, error) {
	for {
		v, cur := e.current()
		if v.Epoch == 0 {
			select {
			case <-cur.Done():
				continue
			case <-ctx.Done():
				return nil, fmt.Errorf("restarted rank: no view from gorun on the control channel: %w", context.Cause(ctx))
			}
		}
		want := slices.Clone(v.Ranks)
		if v.Index(e.c.cfg.Rank) < 0 {
			want = append(want, e.c.cfg.Rank)
			slices.Sort(want)
		}
		wctx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(cur, cancel)
		found, err := m.WaitFor(wctx, want)
		stop()
		cancel()
		if err == nil || ctx.Err() != nil || cur.Err() == nil {
			return found, err
		}
	}
}

// rejoin sends the sequencer this restarted rank's join (its data address
// and host key) and installs the view that holds it; the first collective
// then returns ErrViewChanged.
func (e *elastic) rejoin(ctx context.Context, hosts []string, addr, host string) error {
	e.mu.Lock()
	e.hosts = joinHosts(hosts, e.hosts)
	e.mu.Unlock()
	e.wmu.Lock()
	_, err := io.WriteString(e.ctl, control.Join{Addr: addr, Host: host}.String()+"\n")
	e.wmu.Unlock()
	if err != nil {
		return fmt.Errorf("restarted rank: telling gorun it joins: %w", err)
	}
	for {
		v, cur := e.current()
		if v.Index(e.c.cfg.Rank) >= 0 {
			if err := e.c.install(v); err != nil {
				return err
			}
			e.fresh = true
			return nil
		}
		select {
		case <-cur.Done():
		case <-ctx.Done():
			return fmt.Errorf("restarted rank: said join, but no view with it came from gorun (last: epoch %d, ranks %v): %w", v.Epoch, v.Ranks, context.Cause(ctx))
		}
	}
}

// joinHosts is a restarted rank's host of every rank: what gossip gave
// (found), except the ranks that joined in views announced meanwhile
// (announced, "" where none did), whose hosts are newer and which gossip
// may not have brought at all. Without them the rank would place such a
// rank on no host, plan its collectives on another layout than the ranks
// that know, and fail them on a step layout mismatch (a soak found it:
// two ranks of one host restarted together).
func joinHosts(found, announced []string) []string {
	out := slices.Clone(found)
	for r, h := range announced {
		if h != "" && r < len(out) {
			out[r] = h
		}
	}
	return out
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
		cv, err := parseView(string(line), e.c.cfg.Size)
		if err != nil {
			e.c.log.Warn("elastic: control channel: ignoring a line", "err", err)
			continue
		}
		e.announce(cv)
	}
}

// parseView parses a line of the control channel, "view EPOCH R,R,...
// [+R ADDRESS HOST]...", for a job of size ranks: an epoch from 1 to
// 4095, live ranks of the job in increasing order, and the restarted ones
// among them that join in this view, with their addresses (viewOf gives
// the View a Comm reports).
func parseView(line string, size int) (control.View, error) {
	cv, err := control.ParseView(line)
	if err != nil {
		return control.View{}, err
	}
	if cv.Epoch > maxEpoch {
		return control.View{}, fmt.Errorf("view %d: epochs go up to %d", cv.Epoch, maxEpoch)
	}
	if last := cv.Live[len(cv.Live)-1]; last >= size {
		return control.View{}, fmt.Errorf("view %d: rank %d in a job of %d", cv.Epoch, last, size)
	}
	return cv, nil
}

// viewOf is the View of a control line's view.
func viewOf(cv control.View) View {
	v := View{Epoch: cv.Epoch, Ranks: cv.Live}
	for _, j := range cv.Joined {
		v.Joined = append(v.Joined, j.Rank)
	}
	slices.Sort(v.Joined)
	return v
}

// announce records a view from the sequencer and interrupts whatever runs
// in an earlier one. The transport forgets the old process of every rank
// that joins in it, so that the joiner's connections are taken at once.
func (e *elastic) announce(cv control.View) {
	v := viewOf(cv)
	e.mu.Lock()
	defer e.mu.Unlock()
	if v.Epoch <= e.announced.Epoch {
		return
	}
	e.announced = v
	e.pending.Store(true)
	e.cancel(fmt.Errorf("%w: now epoch %d, ranks %v", ErrViewChanged, v.Epoch, v.Ranks))
	e.cur, e.cancel = context.WithCancelCause(context.Background())
	for _, j := range cv.Joined {
		if j.Rank == e.c.cfg.Rank {
			continue
		}
		e.wmu.Lock()
		delete(e.reported, j.Rank) // a new process: its loss is news again
		e.wmu.Unlock()
		if e.hosts != nil {
			e.hosts = slices.Clone(e.hosts)
			e.hosts[j.Rank] = j.Host
		}
		if e.revive == nil {
			continue
		}
		if err := e.revive(j.Rank, tcp.Peer{Addr: j.Addr, Host: j.Host}); err != nil {
			e.c.log.Warn("elastic: cannot take back a restarted rank", "rank", j.Rank, "err", err)
		}
	}
}

// current returns the announced view and its context, which ends when a
// newer view comes.
func (e *elastic) current() (View, context.Context) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.announced, e.cur
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
	all := e.hosts
	e.mu.Unlock()
	e.live, e.me = live, me
	e.seqBase = uint32(v.Epoch) << seqEpochShift
	c.seq = e.seqBase
	// Frames of an earlier epoch's collectives (this Comm's; a child's
	// are dropped when it closes) will never be read.
	base := e.seqBase
	c.mux.Drop(func(k transport.Key) bool { return k.Comm != c.id || k.Seq >= base })
	var hosts []string
	if all != nil {
		hosts = make([]string, len(v.Ranks))
		for i, r := range v.Ranks {
			hosts[i] = all[r]
		}
	}
	if err := c.setTopology(hosts); err != nil {
		return err
	}
	byHost := c.hostRanks()
	e.hostRanks.Store(&byHost)
	return nil
}

// begin starts a collective: if the view changed since the last one, it
// installs the new view and returns ErrViewChanged; otherwise it returns
// ctx, ended also by the next view change, and the func that releases it.
func (e *elastic) begin(ctx context.Context, kind uint8) (context.Context, func(), error) {
	if e.out != nil {
		return ctx, nil, fmt.Errorf("collective: %s: %w", kindName[kind], e.out)
	}
	if e.fresh {
		e.fresh = false
		v := e.installed.Load()
		return ctx, nil, fmt.Errorf("collective: rank %d: %s: %w (restarted into epoch %d, ranks %v: Resync takes the state)", e.c.cfg.Rank, kindName[kind], ErrViewChanged, v.Epoch, v.Ranks)
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
	// The view this rank's collectives run on: a call fails on the
	// processes of the view it ran in. If the suspect joined in a later
	// view, the report is about its old process, and gorun drops it.
	// (The newest view announced was sent before: a send that failed on
	// the old process's connection, whose failure the call saw only
	// after the joiner's view had been announced, got the restarted
	// process fenced.) A report is made again for a newer view: one
	// dropped as stale must not silence the rank about the new process.
	var epoch int
	if v := e.installed.Load(); v != nil {
		epoch = v.Epoch
	}
	e.wmu.Lock()
	defer e.wmu.Unlock()
	if last, ok := e.reported[rank]; ok && last >= epoch {
		return
	}
	e.reported[rank] = epoch
	if len(reason) > 200 {
		reason = reason[:200]
	}
	if _, err := io.WriteString(e.ctl, control.Suspect{Rank: rank, Epoch: epoch, Reason: reason}.String()+"\n"); err != nil {
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
	base  ring.Transport
	epoch uint32
}

func (n *epochNet) Rank() int { return n.base.Rank() }
func (n *epochNet) Size() int { return n.base.Size() }

func (n *epochNet) Send(ctx context.Context, to int, h transport.Header, payload []byte) error {
	return n.base.Send(ctx, to, h, payload)
}

// TrySend implements transport.TrySender when the view's transport does.
func (n *epochNet) TrySend(to int, h transport.Header, payload []byte) bool {
	ts, ok := n.base.(transport.TrySender)
	return ok && ts.TrySend(to, h, payload)
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

// Resync gives every rank of the view the training state of the view's
// first rank that holds it (a Broadcast; a rank restarted by gorun
// --max-restarts holds none until its first Resync finished), again on
// the newer view if the view changes under it. Call it after
// ErrViewChanged with the training state (the step, the weights, the
// optimizer's moments), the same length on every rank: the survivors may
// disagree on whether the interrupted step was applied. It fails if no
// rank of the view holds the state.
func Resync[T Number](ctx context.Context, c *Comm, state []T) error {
	for {
		root, err := c.stateRoot(ctx)
		if err == nil {
			err = Broadcast(ctx, c, state, root)
		}
		if err == nil {
			if c.el != nil {
				c.el.synced.Store(true)
			}
			return nil
		}
		if !errors.Is(err, ErrViewChanged) {
			return err
		}
	}
}

// MaxResyncBytes caps the state ResyncBytes accepts from its root.
const MaxResyncBytes = 1 << 36

// ResyncBytes is Resync for state whose length only its holder knows, such
// as a serialized checkpoint: every rank of the view gets the bytes of the
// view's first rank that holds the state (its length first, then the
// bytes, from the same root), again on the newer view if the view changes
// under it. A rank that holds no state passes nil.
func ResyncBytes(ctx context.Context, c *Comm, state []byte) ([]byte, error) {
	for {
		got, err := resyncBytes(ctx, c, state)
		if err == nil {
			if c.el != nil {
				c.el.synced.Store(true)
			}
			return got, nil
		}
		if !errors.Is(err, ErrViewChanged) {
			return nil, err
		}
	}
}

func resyncBytes(ctx context.Context, c *Comm, state []byte) ([]byte, error) {
	root, err := c.stateRoot(ctx)
	if err != nil {
		return nil, err
	}
	n := []int64{int64(len(state))}
	if err := Broadcast(ctx, c, n, root); err != nil {
		return nil, err
	}
	if n[0] < 0 || n[0] > MaxResyncBytes {
		return nil, fmt.Errorf("collective: rank %d: resync: rank %d announced %d bytes of state (at most %d)", c.cfg.Rank, root, n[0], int64(MaxResyncBytes))
	}
	buf := state
	if c.Rank() != root {
		buf = make([]byte, n[0])
	}
	if err := Broadcast(ctx, c, buf, root); err != nil {
		return nil, err
	}
	return buf, nil
}

// stateRoot agrees with the view on its first rank that holds the
// training state (one small all-reduce).
func (c *Comm) stateRoot(ctx context.Context) (int, error) {
	const none = math.MaxInt32
	first := []int32{none}
	if c.el == nil || c.el.synced.Load() {
		first[0] = int32(c.index())
	}
	if err := AllReduce(ctx, c, first, Min); err != nil {
		return -1, err
	}
	v := c.View()
	if first[0] == none {
		return -1, fmt.Errorf("collective: rank %d: resync: no rank of view %d (ranks %v, restarted %v) holds the training state", c.cfg.Rank, v.Epoch, v.Ranks, v.Joined)
	}
	return v.Ranks[first[0]], nil
}
