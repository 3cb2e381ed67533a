package ring

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gorun/gorun/transport/mem"
)

func TestGatherScatter(t *testing.T) {
	testGatherScatter[int64](t)
	testGatherScatter[float32](t)
}

// testGatherScatter runs Gather and Scatter from every root against a
// naive reference, on random layouts of the blocks in the root's buffer
// (in any order, with gaps) whose lengths are 0, 1 and primes, all of
// them 0 in one trial. The root must talk to ⌈log2 size⌉ ranks only.
func testGatherScatter[T Elem](t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	choices := []int{0, 1, 2, 3, 5, 7, 13, 31}
	for _, size := range testSizes {
		for _, segBytes := range testSegs {
			for root := range size {
				for trial := range 2 {
					lens := make([]int, size)
					for r := range lens {
						if trial == 1 {
							lens[r] = choices[rng.IntN(len(choices))]
						}
					}
					spans, n := layout(rng, lens)
					links := log2(2*size - 1) // ⌈log2 size⌉
					name := func(op string) string {
						return fmt.Sprintf("%s %T size %d seg %d root %d lens %v", op, *new(T), size, segBytes, root, lens)
					}

					// Gather: the root's recv gets every block; its gaps keep their bits.
					in := make([][]T, size)
					for r := range in {
						in[r] = randBits[T](rng, lens[r])
					}
					recv := randBits[T](rng, n)
					want := slices.Clone(recv)
					for r := range size {
						copy(part(want, spans[r]), in[r])
					}
					errs, nw := runAll(size, func(tr *mem.Transport) error {
						var buf []T
						if tr.Rank() == root {
							buf = recv
						}
						return Gather(context.Background(), tr, in[tr.Rank()], buf, spans, root, opts(0, segBytes))
					})
					for r, err := range errs {
						if err != nil {
							t.Fatalf("%s: rank %d: %v", name("gather"), r, err)
						}
					}
					if !equalBits(recv, want) {
						t.Fatalf("%s: root's recv differs from the reference", name("gather"))
					}
					if got := nw.Links(root); got != links {
						t.Fatalf("%s: the root talked to %d ranks, want %d", name("gather"), got, links)
					}

					// Scatter: rank r gets the root's send span spans[r].
					send := randBits[T](rng, n)
					out := make([][]T, size)
					errs, nw = runAll(size, func(tr *mem.Transport) error {
						r := tr.Rank()
						var buf []T
						if r == root {
							buf = send
						}
						out[r] = make([]T, lens[r])
						return Scatter(context.Background(), tr, buf, spans, out[r], root, opts(0, segBytes))
					})
					for r, err := range errs {
						if err != nil {
							t.Fatalf("%s: rank %d: %v", name("scatter"), r, err)
						}
						if !equalBits(out[r], part(send, spans[r])) {
							t.Fatalf("%s: rank %d's recv differs from the reference", name("scatter"), r)
						}
					}
					if got := nw.Links(root); got != links {
						t.Fatalf("%s: the root talked to %d ranks, want %d", name("scatter"), got, links)
					}
				}
			}
		}
	}
}

// TestGatherScatterMismatch: one rank disagrees on the spans, either on
// the total (every frame's Count tells) or only on how it is split
// (the total agrees, but its subtree's stream is longer than its parent
// expects, which the frames' lengths and last-segment marks tell). Some
// rank finds it, every rank that fails fails with ErrSizeMismatch, and no
// rank hangs.
func TestGatherScatterMismatch(t *testing.T) {
	rng := rand.New(rand.NewPCG(33, 34))
	for _, size := range []int{2, 3, 5, 8, 9} {
		for _, segBytes := range testSegs {
			for _, split := range []bool{false, true} {
				for _, scatter := range []bool{false, true} {
					root := rng.IntN(size)
					bad := (root + 1 + rng.IntN(size-1)) % size
					x := rng.IntN(size)
					spans := func(rank int) []Span {
						lens := make([]int, size)
						for j := range lens {
							lens[j] = 5
						}
						if rank == bad {
							if split {
								lens[bad]++
								lens[root]--
							} else {
								lens[x]++
							}
						}
						s, _ := layout(rand.New(rand.NewPCG(uint64(rank), 1)), lens)
						return s
					}
					errs := runGuarded(t, size, func(ctx context.Context, tr *mem.Transport) error {
						r := tr.Rank()
						sp := spans(r)
						end := 0
						for _, s := range sp {
							end = max(end, s.Off+s.Len)
						}
						if scatter {
							return Scatter(ctx, tr, make([]int64, end), sp, make([]int64, sp[r].Len), root, opts(0, segBytes))
						}
						return Gather(ctx, tr, make([]int64, sp[r].Len), make([]int64, end), sp, root, opts(0, segBytes))
					})
					finder := -1
					if scatter {
						finder = bad // its stream from its parent is not what it expects
					}
					if err := checkMismatch(errs, finder); err != nil {
						t.Fatalf("scatter %v size %d seg %d root %d: rank %d disagrees (split %v, block %d): %v", scatter, size, segBytes, root, bad, split, x, err)
					}
				}
			}
		}
	}
}

// TestGatherArgs: argument errors are returned before any data moves.
func TestGatherArgs(t *testing.T) {
	nw := mem.NewNetwork(3)
	tr := nw.Transport(1)
	spans := []Span{{0, 2}, {2, 2}, {4, 2}}
	ctx := context.Background()
	for name, err := range map[string]error{
		"gather send":      Gather(ctx, tr, make([]int64, 3), nil, spans, 0, opts(0, 16)),
		"gather root":      Gather(ctx, tr, make([]int64, 2), nil, spans, 3, opts(0, 16)),
		"gather spans":     Gather(ctx, tr, make([]int64, 2), nil, spans[:2], 0, opts(0, 16)),
		"gather recv":      Gather(ctx, tr, make([]int64, 2), make([]int64, 5), spans, 1, opts(0, 16)),
		"scatter recv":     Scatter(ctx, tr, nil, spans, make([]int64, 1), 0, opts(0, 16)),
		"scatter send":     Scatter(ctx, tr, make([]int64, 5), spans, make([]int64, 2), 1, opts(0, 16)),
		"all-to-all own":   AllToAllV(ctx, tr, make([]int64, 6), spans, make([]int64, 6), []Span{{0, 2}, {2, 1}, {4, 2}}, opts(0, 16)),
		"all-to-all spans": AllToAllV(ctx, tr, make([]int64, 5), spans, make([]int64, 6), spans, opts(0, 16)),
		"bruck":            AllToAllBruck(ctx, tr, make([]int64, 6), make([]int64, 5), 2, opts(0, 16)),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if n := nw.Frames(1); n != 0 {
		t.Fatalf("rank 1 sent %d frames on bad arguments", n)
	}
}
