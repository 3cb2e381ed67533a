package ring

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gorun/gorun/transport"
	"github.com/gorun/gorun/transport/mem"
)

// boundedNet models shared-memory rings on an in-memory network: each
// direction of a pair holds at most capBytes of frames sent and not yet
// received, and a frame larger than that goes only while its receiver is
// receiving from the sender (a ring passes it piece by piece). A Send
// that does not fit waits, so an executor that writes more than a ring
// holds before it reads from a peer doing the same hangs here as it would
// on shared memory, where the in-memory network alone buffers without
// limit.
type boundedNet struct {
	nw       *mem.Network
	capBytes int
	mu       sync.Mutex
	changed  *sync.Cond
	inflight map[[2]int]int // [from, to]: bytes sent, not yet received
	reading  map[[2]int]int // [from, to]: Recv calls of to waiting on from
}

func newBoundedNet(n, capBytes int) *boundedNet {
	b := &boundedNet{nw: mem.NewNetwork(n), capBytes: capBytes, inflight: map[[2]int]int{}, reading: map[[2]int]int{}}
	b.changed = sync.NewCond(&b.mu)
	return b
}

type boundedTr struct {
	b  *boundedNet
	tr *mem.Transport
}

func (b *boundedNet) Transport(r int) *boundedTr { return &boundedTr{b: b, tr: b.nw.Transport(r)} }

func (t *boundedTr) Rank() int { return t.tr.Rank() }
func (t *boundedTr) Size() int { return t.tr.Size() }

func (t *boundedTr) Send(ctx context.Context, to int, h transport.Header, payload []byte) error {
	b, k, n := t.b, [2]int{t.Rank(), to}, len(payload)
	stop := context.AfterFunc(ctx, func() { b.mu.Lock(); b.changed.Broadcast(); b.mu.Unlock() })
	defer stop()
	b.mu.Lock()
	for {
		if err := ctx.Err(); err != nil {
			b.mu.Unlock()
			return fmt.Errorf("send of %d bytes to rank %d: the ring holds %d of %d bytes and the peer does not read: %w", n, to, b.inflight[k], b.capBytes, err)
		}
		if b.inflight[k]+n <= b.capBytes || n > b.capBytes && b.reading[k] > 0 {
			break
		}
		b.changed.Wait()
	}
	if n <= b.capBytes {
		b.inflight[k] += n
	}
	b.mu.Unlock()
	return t.tr.Send(ctx, to, h, payload)
}

func (t *boundedTr) Recv(ctx context.Context, from int) (transport.Frame, error) {
	b, k := t.b, [2]int{from, t.Rank()}
	b.mu.Lock()
	b.reading[k]++
	b.changed.Broadcast()
	b.mu.Unlock()
	f, err := t.tr.Recv(ctx, from)
	b.mu.Lock()
	b.reading[k]--
	if err == nil && len(f.Payload) <= b.capBytes {
		b.inflight[k] -= len(f.Payload)
	}
	b.changed.Broadcast()
	b.mu.Unlock()
	return f, err
}

// TestExecutorsWithinRings: every executor that exchanges with peers
// (ring all-reduce, direct, doubling, halving, all-gather, broadcast,
// all-to-all, Bruck, gather and scatter) completes, with the naive
// reference's result, on a network whose pairs hold only 64 KiB (the
// smallest shared-memory ring) unread: none writes more to a peer than a
// ring holds before it reads from that peer. Ranks 2 to 9, int64 buffers
// from empty to 3 MiB, segments of 512 KiB (collective's default).
func TestExecutorsWithinRings(t *testing.T) {
	rng := rand.New(rand.NewPCG(64, 1))
	const ringCap, seg = 64 << 10, 512 << 10
	for size := 2; size <= 9; size++ {
		for _, n := range []int{0, 1, size - 1, 997, 8191, 32771, 131101, 393209} {
			in := make([][]int64, size)
			for r := range in {
				in[r] = randInts(rng, n)
			}
			want := make([]int64, n)
			for r := range in {
				sum(want, in[r])
			}
			type exec struct {
				name string
				run  func(ctx context.Context, tr Transport, mine []int64) ([]int64, error)
				want func(r int) []int64
			}
			concat := slices.Concat(in...)
			execs := []exec{
				{"ring", func(ctx context.Context, tr Transport, b []int64) ([]int64, error) {
					return b, AllReduce(ctx, tr, b, sum, opts(n, seg))
				}, func(int) []int64 { return want }},
				{"direct", func(ctx context.Context, tr Transport, b []int64) ([]int64, error) {
					return b, Direct(ctx, tr, b, sum, opts(n, seg))
				}, func(int) []int64 { return want }},
				{"doubling", func(ctx context.Context, tr Transport, b []int64) ([]int64, error) {
					return b, Doubling(ctx, tr, b, sum, opts(n, seg))
				}, func(int) []int64 { return want }},
				{"halving", func(ctx context.Context, tr Transport, b []int64) ([]int64, error) {
					return b, Halving(ctx, tr, b, sum, opts(n, seg))
				}, func(int) []int64 { return want }},
				{"broadcast", func(ctx context.Context, tr Transport, b []int64) ([]int64, error) {
					if tr.Rank() != 0 {
						clear(b)
					}
					return b, Broadcast(ctx, tr, b, 0, false, opts(n, seg))
				}, func(int) []int64 { return in[0] }},
				{"allgather", func(ctx context.Context, tr Transport, b []int64) ([]int64, error) {
					all := make([]int64, n*size)
					copy(all[tr.Rank()*n:], b)
					return all, AllGather(ctx, tr, all, opts(n*size, seg))
				}, func(int) []int64 { return concat }},
				{"alltoall", func(ctx context.Context, tr Transport, b []int64) ([]int64, error) {
					send := slices.Concat(slices.Repeat([][]int64{b}, size)...)
					spans := make([]Span, size)
					for i := range spans {
						spans[i] = Span{i * n, n}
					}
					recv := make([]int64, n*size)
					return recv, AllToAllV(ctx, tr, send, spans, recv, spans, opts(n*size, seg))
				}, func(int) []int64 { return concat }},
				{"bruck", func(ctx context.Context, tr Transport, b []int64) ([]int64, error) {
					send := slices.Concat(slices.Repeat([][]int64{b}, size)...)
					recv := make([]int64, n*size)
					return recv, AllToAllBruck(ctx, tr, send, recv, n, opts(n*size, seg))
				}, func(int) []int64 { return concat }},
			}
			for _, e := range execs {
				what := fmt.Sprintf("%s: %d ranks, %d elements", e.name, size, n)
				bn := newBoundedNet(size, ringCap)
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				got := make([][]int64, size)
				errs := make([]error, size)
				var wg sync.WaitGroup
				for r := range size {
					wg.Go(func() {
						got[r], errs[r] = e.run(ctx, bn.Transport(r), slices.Clone(in[r]))
						if errs[r] != nil {
							cancel()
						}
					})
				}
				wg.Wait()
				cancel()
				if err := errors.Join(errs...); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				for r := range size {
					if !slices.Equal(got[r], e.want(r)) {
						t.Fatalf("%s: rank %d's result differs from the reference", what, r)
					}
				}
			}
		}
	}
}
