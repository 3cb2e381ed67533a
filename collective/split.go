package collective

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"time"

	"github.com/gorun/gorun/transport"
)

// Undefined as Split's color leaves a rank out of every child.
const Undefined = -1

// idGen hands out communicator ids; a job's Comm and all its children
// share one.
type idGen struct {
	mu   sync.Mutex
	next uint32
}

func (g *idGen) peek() uint32 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.next
}

func (g *idGen) reserve(upTo uint32) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.next = max(g.next, upTo)
}

// Split divides c's ranks into children, one per color, as
// MPI_Comm_split does. It is collective over c: every rank of c calls it
// at the same point of its sequence of collectives, with its color (a
// number from 0, or Undefined to take part in no child) and its key. A
// child's ranks are numbered by key, ties broken by their rank in c; Rank
// and Size are the child's, roots are child ranks. A rank with color
// Undefined gets nil.
//
// A child moves its data over c's connections and shared memory (no new
// rendezvous and no gossip): every frame carries the child's
// communicator id, so the collectives of a child, of its siblings and of
// c itself may run at the same time, from different goroutines, without
// mixing. Node-aware algorithms and Hosts work inside a child. Children
// run the ring strategy even when c runs the hub one. Splits whose parents
// share ranks must be called in the same order on those ranks.
//
// A failure inside a child breaks the job's transport, as in c. When c is
// elastic, a view change (a lost or restarted rank) invalidates every
// child split in an earlier view: its collectives return ErrViewChanged,
// and the program splits again after its Resync. Close releases a child;
// it does not close c.
func (c *Comm) Split(ctx context.Context, color, key int) (*Comm, error) {
	if color < Undefined {
		return nil, fmt.Errorf("collective: rank %d: split: color %d is negative (Undefined is %d)", c.cfg.Rank, color, Undefined)
	}
	size := c.Size()
	var child *Comm
	err := c.do(ctx, kindSplit, func(ctx context.Context, x *call) error {
		mine := []int64{int64(color), int64(key), int64(c.ids.peek())}
		all := make([]int64, 3*size)
		// The all-gather the plan picks (log2 N steps for this small one
		// on many ranks).
		if err := allGatherFunc(c, mine, all)(ctx, x); err != nil {
			return err
		}
		var base uint32
		colors := map[int64]int{}
		for i := range size {
			base = max(base, uint32(all[3*i+2]))
			if col := all[3*i]; col >= 0 {
				colors[col] = 0
			}
		}
		order := make([]int64, 0, len(colors))
		for col := range colors {
			order = append(order, col)
		}
		slices.Sort(order)
		for i, col := range order {
			colors[col] = i
		}
		if base+uint32(len(order)) >= groupBase {
			return fmt.Errorf("split: communicator ids exhausted")
		}
		c.ids.reserve(base + uint32(len(order)))
		if color == Undefined {
			return nil
		}
		type member struct{ key, parent int }
		var ms []member
		for i := range size {
			if all[3*i] == int64(color) {
				ms = append(ms, member{int(all[3*i+1]), i})
			}
		}
		slices.SortFunc(ms, func(a, b member) int {
			return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.parent, b.parent))
		})
		child = newChild(c, base+uint32(colors[int64(color)]), ms, func(m member) int { return m.parent })
		return nil
	}, header[int64](0, 3))
	if err != nil {
		return nil, err
	}
	if child != nil {
		if err := child.setTopology(child.hostKeys()); err != nil {
			return nil, err
		}
	}
	return child, nil
}

// groupBase is the first communicator id of CreateGroup's children; Split
// hands out the ids below it.
const groupBase = 1 << 30

// MaxGroupTag bounds CreateGroup's tag.
const MaxGroupTag = 1<<30 - 1 // groupBase + MaxGroupTag < transport.ChanP2P

// CreateGroup makes the child of c that holds the given ranks of c, in
// that order, as MPI_Comm_create_group does: only those ranks call it,
// each with the same ranks and tag, and c's other ranks take no part.
// The tag names the group among the job's groups: two groups made by
// CreateGroup, from any parents, need different tags while both are open
// (a library that names its groups with a counter every rank advances
// alike, as torch.distributed's new_group does, can use that). It returns once every member has called it. As
// with Split, the child runs over c's connections and shared memory, and
// a view change invalidates it.
func (c *Comm) CreateGroup(ctx context.Context, ranks []int, tag int) (*Comm, error) {
	if tag < 0 || tag > MaxGroupTag {
		return nil, fmt.Errorf("collective: rank %d: create group: tag %d is outside 0..%d", c.cfg.Rank, tag, MaxGroupTag)
	}
	me := c.index()
	pos, seen := -1, make(map[int]bool, len(ranks))
	for i, r := range ranks {
		if r < 0 || r >= c.Size() || seen[r] {
			return nil, fmt.Errorf("collective: rank %d: create group %d: ranks %v: %d is not a distinct rank of 0..%d", c.cfg.Rank, tag, ranks, r, c.Size()-1)
		}
		seen[r] = true
		if r == me {
			pos = i
		}
	}
	if pos < 0 {
		return nil, fmt.Errorf("collective: rank %d: create group %d: ranks %v do not hold this rank (%d)", c.cfg.Rank, tag, ranks, me)
	}
	child := newChild(c, groupBase+uint32(tag), ranks, func(r int) int { return r })
	// Every member checks that the others made the same group.
	h := fnv.New64a()
	fmt.Fprint(h, tag, ranks)
	mine := []int64{int64(h.Sum64() >> 1)}
	all := make([]int64, len(ranks))
	if err := AllGather(ctx, child, mine, all); err != nil {
		child.Close()
		return nil, err
	}
	for i, x := range all {
		if x != mine[0] {
			child.Close()
			return nil, fmt.Errorf("collective: rank %d: create group %d: rank %d of c made a different group than %v: %w", c.cfg.Rank, tag, ranks[i], ranks, ErrSizeMismatch)
		}
	}
	if err := child.setTopology(child.hostKeys()); err != nil {
		child.Close()
		return nil, err
	}
	return child, nil
}

// newChild makes the child with communicator id over the given members
// (indices in c).
func newChild[M any](c *Comm, id uint32, ms []M, index func(M) int) *Comm {
	view := c.View().Ranks // c's indices to job ranks
	if c.members != nil {
		view = c.members
	}
	members := make([]int, len(ms))
	me := 0
	for i, m := range ms {
		p := index(m)
		members[i] = view[p]
		if p == c.index() {
			me = i
		}
	}
	root := c
	if c.root != nil {
		root = c.root
	}
	child := &Comm{
		cfg: c.cfg, log: c.log, tr: c.tr, mux: c.mux, id: id, rank: me, members: members,
		parent: c, root: root, ids: c.ids, closed: make(chan struct{}),
		page: c.page, rec: c.rec, recMu: c.recMu, waited: c.waited, hostOf: c.hostOf,
	}
	child.exact.Store(c.exact.Load())
	if root.el != nil {
		child.epoch = root.el.installed.Load().Epoch
		child.seqBase = uint32(child.epoch) << seqEpochShift
	}
	return child
}

// hostKeys is the host of every rank of a child, in its order (nil:
// unknown, one host).
func (c *Comm) hostKeys() []string {
	if c.hostOf == nil {
		return nil
	}
	out := make([]string, len(c.members))
	for i, r := range c.members {
		out[i] = c.hostOf[r]
	}
	return out
}

// parentElastic is the elastic state of the job a child belongs to (nil
// for the job's own Comm and for children of a job that is not elastic).
func (c *Comm) parentElastic() *elastic {
	if c.root == nil {
		return nil
	}
	return c.root.el
}

// childBegin checks that a child of an elastic job is still of the
// current view, and returns ctx ended also by the next view change.
func (c *Comm) childBegin(ctx context.Context, e *elastic, kind uint8) (context.Context, func(), error) {
	v, cur := e.current()
	if v.Epoch != c.epoch || e.installed.Load().Epoch != c.epoch {
		return ctx, nil, c.stale(kind, v)
	}
	merged, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(cur, func() { cancel(ErrViewChanged) })
	return merged, func() { stop(); cancel(nil) }, nil
}

func (c *Comm) stale(kind uint8, v View) error {
	return fmt.Errorf("collective: rank %d: %s on a communicator split in epoch %d: %w (now epoch %d, ranks %v): split again", c.cfg.Rank, kindName[kind], c.epoch, ErrViewChanged, v.Epoch, v.Ranks)
}

// childViewChange explains a child's failure by a view change, as
// elastic.viewChange does for the job's Comm: it tells gorun of a lost
// peer and waits for the next view. The job's Comm installs that view at
// its own next collective.
func (c *Comm) childViewChange(e *elastic, kind uint8, seq uint32, cause error) (error, bool) {
	var lost *transport.PeerLostError
	peerLost := errors.As(cause, &lost)
	v, cur := e.current()
	if v.Epoch != c.epoch {
		return fmt.Errorf("%w: %v", c.stale(kind, v), cause), true
	}
	if !peerLost && cur.Err() == nil {
		return nil, false
	}
	if peerLost {
		e.suspect(lost.Rank, lost.Reason)
	}
	timer := time.NewTimer(c.cfg.ViewTimeout)
	defer timer.Stop()
	select {
	case <-cur.Done():
		v, _ = e.current()
		return fmt.Errorf("%w: %v", c.stale(kind, v), cause), true
	case <-c.closed:
		return nil, false
	case <-timer.C:
		return nil, false
	}
}

// closeChild releases a child: its later collectives return ErrClosed and
// frames still queued for it are dropped.
func (c *Comm) closeChild() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		close(c.closed)
		c.mu.Unlock()
		c.wg.Wait()
		id := c.id
		c.mux.Drop(func(k transport.Key) bool { return k.Comm&^transport.ChanP2P != id })
	})
	return nil
}
