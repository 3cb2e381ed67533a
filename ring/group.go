package ring

import (
	"context"
	"fmt"

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

// Global is the parent's number of sub-rank i.
func (g *Group) Global(i int) int { return g.ranks[i] }

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

// Hierarchical is the node-aware all-reduce: a ring reduce-scatter among
// the ranks of this host (local, through shared memory), then a ring
// all-reduce of this rank's slice among the ranks that hold the same slice
// on the other hosts (cross: every local rank carries its own slice, so
// every host's links are all used), then a ring all-gather on the host.
// Every host must have the same number of ranks. Every rank ends with the
// same bits.
func Hierarchical[T Elem](ctx context.Context, local, cross Transport, buf []T, fold func(dst, src []T), o Options) error {
	m := local.Size()
	spans := Chunks(len(buf), m)
	steps := Plan(local.Rank(), m)
	if err := Run(ctx, local, buf, spans, steps[:m-1], fold, o); err != nil {
		return fmt.Errorf("on-host reduce-scatter: %w", err)
	}
	mine := spans[local.Rank()]
	if err := AllReduce(ctx, cross, buf[mine.Off:mine.Off+mine.Len], fold, o); err != nil {
		return fmt.Errorf("cross-host all-reduce: %w", err)
	}
	if err := Run(ctx, local, buf, spans, steps[m-1:], nil, o); err != nil {
		return fmt.Errorf("on-host all-gather: %w", err)
	}
	return nil
}
