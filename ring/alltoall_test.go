package ring

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gorun/gorun/reduce"
	"github.com/gorun/gorun/transport"
	"github.com/gorun/gorun/transport/mem"
)

// testSizes are the job sizes of the all-to-all, gather and scatter tests.
var testSizes = []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17}

// testSegs are the segment sizes: 16 bytes, so blocks go in several
// pipelined frames, and 1 MiB, so every block is one inline frame.
var testSegs = []int{16, 1 << 20}

// blockLens draws the length of the block rank i sends rank j: 0, 1 and
// primes, with one rank that sends nothing (an all-zero row) and one that
// receives nothing (an all-zero column).
func blockLens(rng *rand.Rand, size int) [][]int {
	choices := []int{0, 0, 1, 2, 3, 5, 7, 13, 31}
	zeroRow, zeroCol := rng.IntN(size), rng.IntN(size)
	l := make([][]int, size)
	for i := range l {
		l[i] = make([]int, size)
		for j := range l[i] {
			if i != zeroRow && j != zeroCol {
				l[i][j] = choices[rng.IntN(len(choices))]
			}
		}
	}
	return l
}

// layout places blocks of lens in a buffer in a random order with random
// gaps, and returns their spans and the buffer's length.
func layout(rng *rand.Rand, lens []int) ([]Span, int) {
	spans := make([]Span, len(lens))
	off := 0
	for _, j := range rng.Perm(len(lens)) {
		off += rng.IntN(3)
		spans[j] = Span{Off: off, Len: lens[j]}
		off += lens[j]
	}
	return spans, off + rng.IntN(2)
}

// randBits returns n elements of random bits: every bit pattern,
// NaNs with payloads included, must arrive unchanged.
func randBits[T Elem](rng *rand.Rand, n int) []T {
	v := make([]T, n)
	b := reduce.AsBytes(v)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return v
}

func equalBits[T Elem](a, b []T) bool {
	return len(a) == len(b) && bytes.Equal(reduce.AsBytes(a), reduce.AsBytes(b))
}

func TestAllToAllV(t *testing.T) {
	testAllToAllV[int64](t)
	testAllToAllV[float32](t)
}

// testAllToAllV runs AllToAllV on random layouts against a naive
// reference, which also says that recv outside its spans is untouched.
func testAllToAllV[T Elem](t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for _, size := range testSizes {
		for _, segBytes := range testSegs {
			for trial := range 3 {
				l := blockLens(rng, size)
				send := make([][]T, size)
				recv := make([][]T, size)
				sendSpans := make([][]Span, size)
				recvSpans := make([][]Span, size)
				for r := range size {
					col := make([]int, size)
					for j := range size {
						col[j] = l[j][r]
					}
					var n int
					sendSpans[r], n = layout(rng, l[r])
					send[r] = randBits[T](rng, n)
					recvSpans[r], n = layout(rng, col)
					recv[r] = randBits[T](rng, n)
				}
				want := make([][]T, size)
				for r := range size {
					want[r] = slices.Clone(recv[r])
					for j := range size {
						copy(part(want[r], recvSpans[r][j]), part(send[j], sendSpans[j][r]))
					}
				}
				errs, _ := runAll(size, func(tr *mem.Transport) error {
					r := tr.Rank()
					return AllToAllV(context.Background(), tr, send[r], sendSpans[r], recv[r], recvSpans[r], opts(0, segBytes))
				})
				for r := range size {
					if errs[r] != nil {
						t.Fatalf("%T size %d seg %d trial %d rank %d: %v", *new(T), size, segBytes, trial, r, errs[r])
					}
					if !equalBits(recv[r], want[r]) {
						t.Fatalf("%T size %d seg %d trial %d rank %d: recv differs from the reference", *new(T), size, segBytes, trial, r)
					}
				}
			}
		}
	}
}

func TestAllToAllBruck(t *testing.T) {
	testBruck[int64](t)
	testBruck[float32](t)
}

// testBruck checks Bruck's algorithm against the reference and against
// the pairwise exchange of the same blocks, bit for bit.
func testBruck[T Elem](t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	for _, size := range testSizes {
		for _, segBytes := range testSegs {
			for _, block := range []int{0, 1, 3, 7, 13} {
				send := make([][]T, size)
				for r := range send {
					send[r] = randBits[T](rng, size*block)
				}
				want := make([][]T, size)
				for r := range want {
					want[r] = make([]T, size*block)
					for j := range size {
						copy(want[r][j*block:(j+1)*block], send[j][r*block:(r+1)*block])
					}
				}
				spans := make([]Span, size)
				for j := range spans {
					spans[j] = Span{Off: j * block, Len: block}
				}
				got := map[string][][]T{}
				for _, algo := range []string{"bruck", "pairwise"} {
					recv := make([][]T, size)
					errs, _ := runAll(size, func(tr *mem.Transport) error {
						r := tr.Rank()
						recv[r] = make([]T, size*block)
						if algo == "bruck" {
							return AllToAllBruck(context.Background(), tr, send[r], recv[r], block, opts(0, segBytes))
						}
						return AllToAllV(context.Background(), tr, send[r], spans, recv[r], spans, opts(0, segBytes))
					})
					if err := errors.Join(errs...); err != nil {
						t.Fatalf("%s %T size %d block %d: %v", algo, *new(T), size, block, err)
					}
					got[algo] = recv
				}
				for r := range size {
					if !equalBits(got["bruck"][r], want[r]) || !equalBits(got["bruck"][r], got["pairwise"][r]) {
						t.Fatalf("%T size %d seg %d block %d rank %d: Bruck, pairwise and reference differ", *new(T), size, segBytes, block, r)
					}
				}
			}
		}
	}
}

// runGuarded runs f on every rank with a context that only guards against
// a hang; a rank that fails aborts its transport, as collective.Comm
// does, so that the others learn why.
func runGuarded(t *testing.T, size int, f func(ctx context.Context, tr *mem.Transport) error) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	nw := mem.NewNetwork(size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Go(func() {
			tr := nw.Transport(r)
			if errs[r] = f(ctx, tr); errs[r] != nil {
				tr.Abort(errs[r])
			}
		})
	}
	wg.Wait()
	return errs
}

// checkMismatch says that the ranks failed as a collective mismatch
// should make them: the rank that found it (at least one) with a
// *transport.MismatchError, and every rank that failed with an error that
// wraps ErrSizeMismatch (its own, or the abort of the rank that found
// it), not with the hang guard's deadline.
func checkMismatch(errs []error, finder int) error {
	var me *transport.MismatchError
	if finder >= 0 && !errors.As(errs[finder], &me) {
		return fmt.Errorf("rank %d found no mismatch: %v", finder, errs[finder])
	}
	found := false
	for r, err := range errs {
		if err != nil && !errors.Is(err, transport.ErrSizeMismatch) {
			return fmt.Errorf("rank %d: %v, want ErrSizeMismatch", r, err)
		}
		found = found || errors.As(err, &me)
	}
	if !found {
		return errors.New("no rank found the mismatch")
	}
	return nil
}

// TestAllToAllMismatch: one rank expects a block of a different length
// than its peer sends (longer, shorter, or empty against one element),
// with blocks in one frame or in many. The rank finds it at the first
// frame of that block; no rank hangs.
func TestAllToAllMismatch(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 26))
	for _, size := range []int{2, 3, 5, 8, 9} {
		for _, segBytes := range testSegs {
			for _, delta := range [][2]int{{10, 1}, {10, -1}, {10, -9}, {0, 1}, {1, -1}} {
				base, d := delta[0], delta[1]
				bad, peer := rng.IntN(size), rng.IntN(size-1)
				if peer >= bad {
					peer++
				}
				sendSpans, recvSpans := make([][]Span, size), make([][]Span, size)
				sendLen, recvLen := make([]int, size), make([]int, size)
				for r := range size {
					lens := make([]int, size)
					for j := range lens {
						lens[j] = base
					}
					sendSpans[r], sendLen[r] = layout(rng, lens)
					if r == bad {
						lens[peer] += d
					}
					recvSpans[r], recvLen[r] = layout(rng, lens)
				}
				errs := runGuarded(t, size, func(ctx context.Context, tr *mem.Transport) error {
					r := tr.Rank()
					return AllToAllV(ctx, tr, make([]int64, sendLen[r]), sendSpans[r], make([]int64, recvLen[r]), recvSpans[r], opts(0, segBytes))
				})
				if err := checkMismatch(errs, bad); err != nil {
					t.Fatalf("size %d seg %d rank %d expects %d+%d from rank %d: %v", size, segBytes, bad, base, d, peer, err)
				}
			}
		}
		// Bruck: one rank with a different block.
		errs := runGuarded(t, size, func(ctx context.Context, tr *mem.Transport) error {
			block := 3
			if tr.Rank() == size-1 {
				block = 4
			}
			return AllToAllBruck(ctx, tr, make([]int64, size*block), make([]int64, size*block), block, opts(0, 16))
		})
		if err := checkMismatch(errs, -1); err != nil {
			t.Fatalf("bruck size %d: %v", size, err)
		}
	}
}

// BenchmarkAllToAll compares the pairwise exchange with Bruck's algorithm
// on 8 in-memory ranks, per block size; bytes are one rank's send buffer.
func BenchmarkAllToAll(b *testing.B) {
	const size = 8
	for _, blockBytes := range []int{64, 1 << 10, 64 << 10} {
		block := blockBytes / 8
		spans := make([]Span, size)
		for j := range spans {
			spans[j] = Span{Off: j * block, Len: block}
		}
		for _, algo := range []string{"pairwise", "bruck"} {
			b.Run(fmt.Sprintf("%s/%dB", algo, blockBytes), func(b *testing.B) {
				nw := mem.NewNetwork(size)
				b.SetBytes(int64(size * blockBytes))
				b.ResetTimer()
				errs := make([]error, size)
				var wg sync.WaitGroup
				for r := range size {
					wg.Go(func() {
						tr := nw.Transport(r)
						send, recv := make([]int64, size*block), make([]int64, size*block)
						o := opts(0, 512<<10)
						for i := 0; i < b.N && errs[r] == nil; i++ {
							if algo == "bruck" {
								errs[r] = AllToAllBruck(context.Background(), tr, send, recv, block, o)
							} else {
								errs[r] = AllToAllV(context.Background(), tr, send, spans, recv, spans, o)
							}
							if errs[r] != nil {
								tr.Abort(errs[r])
							}
						}
					})
				}
				wg.Wait()
				if err := errors.Join(errs...); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}
