package ring

import (
	"context"
	"fmt"

	"github.com/gorun/gorun/reduce"
	"github.com/gorun/gorun/transport"
)

// Group is a Transport over a subset of another's ranks: sub-rank i is
// ranks[i] of the parent. The node-aware all-reduce runs the ring
// executors over the ranks of one host, and over one rank of each host.
type Group struct {
	parent Transport
	ranks  []int
	me     int
}

// NewGroup returns the group of ranks (in that order), which must hold
// the parent's own rank.
func NewGroup(parent Transport, ranks []int) (*Group, error) {
	for i, r := range ranks {
		if r == parent.Rank() {
			return &Group{parent: parent, ranks: ranks, me: i}, nil
		}
	}
	return nil, fmt.Errorf("ring: rank %d is not in group %v", parent.Rank(), ranks)
}

// Rank implements Transport: this rank's index in the group.
func (g *Group) Rank() int { return g.me }

// Size implements Transport.
func (g *Group) Size() int { return len(g.ranks) }

// Global is sub-rank i's number at the bottom of the stack of groups:
// its rank in the job, which errors name.
func (g *Group) Global(i int) int { return global(g.parent, g.ranks[i]) }

// Index is the sub-rank of the parent's rank r, or -1.
func (g *Group) Index(r int) int {
	for i, x := range g.ranks {
		if x == r {
			return i
		}
	}
	return -1
}

// Send implements Transport.
func (g *Group) Send(ctx context.Context, to int, h transport.Header, payload []byte) error {
	return g.parent.Send(ctx, g.ranks[to], h, payload)
}

// TrySend implements transport.TrySender when the parent does.
func (g *Group) TrySend(to int, h transport.Header, payload []byte) bool {
	ts, ok := g.parent.(transport.TrySender)
	return ok && ts.TrySend(g.ranks[to], h, payload)
}

// Recv implements Transport.
func (g *Group) Recv(ctx context.Context, from int) (transport.Frame, error) {
	return g.parent.Recv(ctx, g.ranks[from])
}

// global names sub-rank i of tr as errors should: by its rank in the job.
func global(tr Transport, i int) int {
	if g, ok := tr.(*Group); ok {
		return g.Global(i)
	}
	return i
}

// Tiers is a node-aware layout seen from one rank: Local is the ranks of
// its host, Cross the ranks with its place on every host, and Hosts every
// host's ranks (Hosts[h][i] is the rank at place i on host h). Every host
// has the same number of ranks, at least two, and Local's sub-rank i is
// Hosts[this host][i].
type Tiers struct {
	Local, Cross Transport
	Hosts        [][]int
}

// Hierarchical is the node-aware all-reduce: a ring reduce-scatter among
// the ranks of this host (local, through shared memory), then a ring
// all-reduce of this rank's slice among the ranks that hold the same slice
// on the other hosts (cross: every local rank carries its own slice, so
// every host's links are all used; Halving instead of the ring when
// HalvingWins for the number of hosts and the slice: at 64 hosts a 1 MiB
// slice takes 12 steps instead of 126), then a ring all-gather on the host.
// Every rank ends with the same bits.
func Hierarchical[T Elem](ctx context.Context, t Tiers, buf []T, fold func(dst, src []T), o Options) error {
	m := t.Local.Size()
	spans := Chunks(len(buf), m)
	steps := Plan(t.Local.Rank(), m)
	if err := Run(ctx, t.Local, buf, spans, steps[:m-1], fold, o); err != nil {
		return fmt.Errorf("on-host reduce-scatter: %w", err)
	}
	mine := spans[t.Local.Rank()]
	cross := AllReduce[T]
	if HalvingWins(t.Cross.Size(), mine.Len*reduce.SizeOf[T]()) {
		cross = Halving[T]
	}
	if err := cross(ctx, t.Cross, buf[mine.Off:mine.Off+mine.Len], fold, o); err != nil {
		return fmt.Errorf("cross-host all-reduce: %w", err)
	}
	if err := Run(ctx, t.Local, buf, spans, steps[m-1:], nil, o); err != nil {
		return fmt.Errorf("on-host all-gather: %w", err)
	}
	return nil
}

// placed returns, for each sub-rank of a group, the span of the global
// rank that pick names: the chunk layout the node-aware stages run on.
func placed(n int, span func(rank int) Span, pick func(i int) int) []Span {
	spans := make([]Span, n)
	for i := range spans {
		spans[i] = span(pick(i))
	}
	return spans
}

// HierarchicalReduceScatter is the node-aware reduce-scatter: on each
// host, a ring reduce-scatter of the chunks that the ranks at each place
// will own (one pass per host's set of chunks), then a ring
// reduce-scatter among the ranks at this rank's place on every host.
// Afterwards this rank's chunk of buf, Chunks(len(buf), N)[rank], holds
// the reduction over all ranks, as ReduceScatter's does; across hosts each
// host sends (H-1)/H of the buffer in all, over all its ranks' links,
// where the flat ring sends (N-1)/N of it over one.
func HierarchicalReduceScatter[T Elem](ctx context.Context, t Tiers, buf []T, fold func(dst, src []T), o Options) (Span, error) {
	m, nh := t.Local.Size(), t.Cross.Size()
	chunks := Chunks(len(buf), m*nh)
	at := func(r int) Span { return chunks[r] }
	steps := Plan(t.Local.Rank(), m)
	for h := range nh {
		spans := placed(m, at, func(i int) int { return t.Hosts[h][i] })
		if err := Run(ctx, t.Local, buf, spans, steps[:m-1], fold, o); err != nil {
			return Span{}, fmt.Errorf("on-host reduce-scatter: %w", err)
		}
	}
	place := t.Local.Rank()
	spans := placed(nh, at, func(h int) int { return t.Hosts[h][place] })
	if err := Run(ctx, t.Cross, buf, spans, Plan(t.Cross.Rank(), nh)[:nh-1], fold, o); err != nil {
		return Span{}, fmt.Errorf("cross-host reduce-scatter: %w", err)
	}
	return spans[t.Cross.Rank()], nil
}

// HierarchicalAllGather is the node-aware all-gather over recv, which
// holds N blocks of equal length with this rank's own block in place: a
// ring all-gather among the ranks at this rank's place on every host,
// then on each host a ring all-gather of what each place collected (one
// pass per host's blocks). Across hosts each host sends (H-1)/H of recv's
// blocks from its ranks' links at once, where the flat ring sends (N-1)/N
// of them over one.
func HierarchicalAllGather[T Elem](ctx context.Context, t Tiers, recv []T, o Options) error {
	m, nh := t.Local.Size(), t.Cross.Size()
	if len(recv)%(m*nh) != 0 {
		return fmt.Errorf("ring: all-gather buffer of %d elements is not %d equal blocks", len(recv), m*nh)
	}
	b := len(recv) / (m * nh)
	at := func(r int) Span { return Span{Off: r * b, Len: b} }
	place := t.Local.Rank()
	spans := placed(nh, at, func(h int) int { return t.Hosts[h][place] })
	if err := Run(ctx, t.Cross, recv, spans, Plan(t.Cross.Rank(), nh)[nh-1:], nil, o); err != nil {
		return fmt.Errorf("cross-host all-gather: %w", err)
	}
	steps := Plan(place, m)[m-1:]
	for h := range nh {
		spans := placed(m, at, func(i int) int { return t.Hosts[h][i] })
		if err := Run(ctx, t.Local, recv, spans, steps, nil, o); err != nil {
			return fmt.Errorf("on-host all-gather: %w", err)
		}
	}
	return nil
}
