package ring

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gorun/gorun/transport"
	"github.com/gorun/gorun/transport/mem"
)

func sum(dst, src []int64) {
	for i := range dst {
		dst[i] += src[i]
	}
}

func minOp(dst, src []int64) {
	for i := range dst {
		dst[i] = min(dst[i], src[i])
	}
}

var sizes = []int{0, 1, 2, 3, 5, 7, 13, 31, 97, 1009}

// runAll runs f on every rank of an in-memory network and collects errors.
// Its calls take turns at three ways an executor's frames go out: all
// from its writer goroutine (TrySend sends nothing), the first few at once
// and the rest from the writer (TrySend refuses at random), and all at
// once while the peer's inbox has room.
func runAll(n int, f func(tr *mem.Transport) error) ([]error, *mem.Network) {
	nw := mem.NewNetwork(n)
	switch runs.Add(1) % 3 {
	case 1:
		var k atomic.Uint64
		nw.Try = func(from, to int) bool { return (k.Add(1)*0x9e3779b97f4a7c15)>>61 != 0 }
	case 2:
		nw.Try = func(from, to int) bool { return true }
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() { defer wg.Done(); errs[r] = f(nw.Transport(r)) }()
	}
	wg.Wait()
	return errs, nw
}

// runs counts runAll's calls.
var runs atomic.Uint64

func randInts(rng *rand.Rand, n int) []int64 {
	v := make([]int64, n)
	for i := range v {
		v[i] = rng.Int64N(2000) - 1000
	}
	return v
}

func opts(count int, segBytes int) Options {
	return Options{Header: transport.Header{Kind: 1, Count: uint64(count)}, SegmentBytes: segBytes}
}

// TestAllReduceMatchesReference: ring and direct all-reduce against a naive
// reduction, for 1-9 ranks and lengths 0, 1, primes and fewer than ranks,
// with segments small enough to pipeline.
func TestAllReduceMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	ctx := context.Background()
	for size := 1; size <= 9; size++ {
		for _, n := range sizes {
			for _, op := range []func(dst, src []int64){sum, minOp} {
				in := make([][]int64, size)
				want := make([]int64, n)
				for r := range size {
					in[r] = randInts(rng, n)
					if r == 0 {
						copy(want, in[0])
					} else {
						op(want, in[r])
					}
				}
				for algo, run := range map[string]func(context.Context, Transport, []int64, func(dst, src []int64), Options) error{
					"ring": AllReduce[int64], "direct": Direct[int64], "doubling": Doubling[int64], "halving": Halving[int64],
				} {
					bufs := make([][]int64, size)
					errs, _ := runAll(size, func(tr *mem.Transport) error {
						bufs[tr.Rank()] = append([]int64(nil), in[tr.Rank()]...)
						return run(ctx, tr, bufs[tr.Rank()], op, opts(n, 8*3))
					})
					for r := range size {
						if errs[r] != nil {
							t.Fatalf("%s size %d n %d rank %d: %v", algo, size, n, r, errs[r])
						}
						for i := range want {
							if bufs[r][i] != want[i] {
								t.Fatalf("%s size %d n %d rank %d: [%d] = %d, want %d", algo, size, n, r, i, bufs[r][i], want[i])
							}
						}
					}
				}
			}
		}
	}
}

func TestReduceScatterAllGatherBroadcast(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	ctx := context.Background()
	for size := 1; size <= 9; size++ {
		for _, n := range sizes {
			in := make([][]int64, size)
			want := make([]int64, n)
			for r := range size {
				in[r] = randInts(rng, n)
				if r == 0 {
					copy(want, in[0])
				} else {
					sum(want, in[r])
				}
			}
			spans := Chunks(n, size)
			got := make([][]int64, size)
			errs, _ := runAll(size, func(tr *mem.Transport) error {
				buf := append([]int64(nil), in[tr.Rank()]...)
				s, err := ReduceScatter(ctx, tr, buf, sum, opts(n, 16))
				got[tr.Rank()] = buf[s.Off : s.Off+s.Len]
				return err
			})
			for r := range size {
				if errs[r] != nil {
					t.Fatal(errs[r])
				}
				if !slices.Equal(got[r], want[spans[r].Off:spans[r].Off+spans[r].Len]) {
					t.Fatalf("reduce-scatter size %d n %d rank %d: %v", size, n, r, got[r])
				}
			}
			// All-gather: every rank contributes in[r], all get the concatenation.
			cat := []int64{}
			for r := range size {
				cat = append(cat, in[r]...)
			}
			// By the ring, in one round (DirectGather: whole blocks
			// written inline, or in segments by its sender), and by
			// recursive doubling (DoublingGather, 1 to 9 ranks: powers of
			// two and the pairing before and after).
			for _, mode := range []string{"ring", "direct", "direct in segments", "doubling", "doubling in segments"} {
				errs, _ = runAll(size, func(tr *mem.Transport) error {
					recv := make([]int64, n*size)
					copy(recv[tr.Rank()*n:], in[tr.Rank()])
					got[tr.Rank()] = recv
					switch mode {
					case "direct":
						return DirectGather(ctx, tr, recv, n, opts(n, 1<<20))
					case "direct in segments":
						return DirectGather(ctx, tr, recv, n, opts(n, 16))
					case "doubling":
						return DoublingGather(ctx, tr, recv, n, opts(n, 1<<20))
					case "doubling in segments":
						return DoublingGather(ctx, tr, recv, n, opts(n, 16))
					}
					return AllGather(ctx, tr, recv, opts(n, 16))
				})
				for r := range size {
					if errs[r] != nil || !slices.Equal(got[r], cat) {
						t.Fatalf("all-gather %s size %d n %d rank %d: %v %v", mode, size, n, r, errs[r], got[r])
					}
				}
			}
			for _, mode := range []string{"chain", "direct", "tree"} {
				root := rng.IntN(size)
				errs, _ = runAll(size, func(tr *mem.Transport) error {
					buf := make([]int64, n)
					if tr.Rank() == root {
						copy(buf, in[root])
					}
					got[tr.Rank()] = buf
					if mode == "tree" {
						return TreeBroadcast(ctx, tr, buf, root, opts(n, 16))
					}
					return Broadcast(ctx, tr, buf, root, mode == "direct", opts(n, 16))
				})
				for r := range size {
					if errs[r] != nil || !slices.Equal(got[r], in[root]) {
						t.Fatalf("broadcast %s size %d n %d root %d rank %d: %v", mode, size, n, root, r, errs[r])
					}
				}
			}
		}
	}
}

// TestBarrierWaitsForAll: no rank leaves the barrier before the last rank
// has entered it. On synctest's clock the late rank's 20 ms end only once
// every other rank waits in the barrier, and every rank leaves at 20 ms.
func TestBarrierWaitsForAll(t *testing.T) {
	const lateBy = 20 * time.Millisecond
	for size := 1; size <= 9; size++ {
		synctest.Test(t, func(t *testing.T) {
			var mu sync.Mutex
			entered := 0
			late := rand.IntN(size)
			start := time.Now()
			errs, _ := runAll(size, func(tr *mem.Transport) error {
				if tr.Rank() == late {
					time.Sleep(lateBy)
				}
				mu.Lock()
				entered++
				if tr.Rank() == late && entered != size {
					mu.Unlock()
					return fmt.Errorf("the late rank entered %d of %d: not all the others were waiting", entered, size)
				}
				mu.Unlock()
				if err := Barrier(context.Background(), tr, opts(0, 0)); err != nil {
					return err
				}
				if d := time.Since(start); d != lateBy {
					return fmt.Errorf("left the barrier at %v, want %v", d, lateBy)
				}
				mu.Lock()
				defer mu.Unlock()
				if entered != size {
					return errors.New("left the barrier early")
				}
				return nil
			})
			if err := errors.Join(errs...); err != nil {
				t.Fatalf("size %d: %v", size, err)
			}
		})
	}
}

// TestMismatchDetected: a rank with a different buffer length makes every
// rank fail with ErrSizeMismatch (after the detecting rank aborts), never
// hang and never write out of bounds.
func TestMismatchDetected(t *testing.T) {
	for size := 2; size <= 6; size++ {
		for _, algo := range []string{"ring", "direct", "doubling", "halving"} {
			odd := size - 1
			errs, _ := runAll(size, func(tr *mem.Transport) error {
				n := 10
				if tr.Rank() == odd {
					n = 11
				}
				buf := make([]int64, n)
				var err error
				switch algo {
				case "ring":
					err = AllReduce(context.Background(), tr, buf, sum, opts(n, 16))
				case "direct":
					err = Direct(context.Background(), tr, buf, sum, opts(n, 16))
				case "halving":
					err = Halving(context.Background(), tr, buf, sum, opts(n, 16))
				default:
					err = Doubling(context.Background(), tr, buf, sum, opts(n, 16))
				}
				if err != nil {
					tr.Abort(err)
				}
				return err
			})
			for r, err := range errs {
				if !errors.Is(err, transport.ErrSizeMismatch) {
					t.Fatalf("%s size %d rank %d: got %v, want ErrSizeMismatch", algo, size, r, err)
				}
			}
		}
	}
}

// TestKillMidRing is the deterministic failure harness: rank k is killed
// exactly when the m-th frame of the ring (or of recursive doubling) is
// about to be sent. Every survivor must return an error naming rank k;
// none may hang.
func TestKillMidRing(t *testing.T) {
	for _, run := range []func(context.Context, Transport, []int64, func(dst, src []int64), Options) error{AllReduce[int64], Doubling[int64], Halving[int64]} {
		killMid(t, run)
	}
}

func killMid(t *testing.T, run func(context.Context, Transport, []int64, func(dst, src []int64), Options) error) {
	for size := 2; size <= 7; size++ {
		for victim := range size {
			for _, at := range []int{0, 1, size, 3 * size} {
				nw := mem.NewNetwork(size)
				sent := 0
				nw.BeforeSend = func(from, to int, h transport.Header) bool {
					if sent == at {
						nw.Kill(victim)
					}
					sent++
					return true
				}
				errs := make([]error, size)
				var wg sync.WaitGroup
				for r := range size {
					wg.Add(1)
					go func() {
						defer wg.Done()
						buf := make([]int64, 97)
						errs[r] = run(context.Background(), nw.Transport(r), buf, sum, opts(97, 8*4))
					}()
				}
				done := make(chan struct{})
				go func() { wg.Wait(); close(done) }()
				select {
				case <-done:
				case <-time.After(10 * time.Second):
					t.Fatalf("size %d victim %d at %d: hung", size, victim, at)
				}
				for r, err := range errs {
					if r == victim {
						continue
					}
					var pl *transport.PeerLostError
					if !errors.As(err, &pl) || pl.Rank != victim {
						t.Fatalf("size %d victim %d at %d: rank %d got %v", size, victim, at, r, err)
					}
				}
			}
		}
	}
}

// TestDoublingSameBits: an op that is not commutative bit for bit (a
// min that keeps its first operand when either is NaN) must still leave
// every rank with the same bits, because partners combine the lower
// ranks' part first.
func TestDoublingSameBits(t *testing.T) {
	for _, run := range []func(context.Context, Transport, []float64, func(dst, src []float64), Options) error{Doubling[float64], Halving[float64]} {
		sameBits(t, run)
	}
}

func sameBits(t *testing.T, run func(context.Context, Transport, []float64, func(dst, src []float64), Options) error) {
	firstMin := func(dst, src []float64) {
		for i := range dst {
			if src[i] < dst[i] {
				dst[i] = src[i]
			}
		}
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for _, size := range []int{2, 3, 4, 5, 6, 7, 8, 9, 16, 17} {
		const n = 64
		in := make([][]float64, size)
		for r := range in {
			in[r] = make([]float64, n)
			for i := range in[r] {
				in[r][i] = rng.Float64()
				if rng.IntN(3) == 0 {
					in[r][i] = math.Float64frombits(0x7ff8000000000000 | uint64(rng.IntN(1<<20))) // NaNs with payloads
				}
			}
		}
		got := make([][]float64, size)
		errs, _ := runAll(size, func(tr *mem.Transport) error {
			got[tr.Rank()] = slices.Clone(in[tr.Rank()])
			return run(context.Background(), tr, got[tr.Rank()], firstMin, opts(n, 1<<10))
		})
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		for r := 1; r < size; r++ {
			for i := range n {
				if math.Float64bits(got[r][i]) != math.Float64bits(got[0][i]) {
					t.Fatalf("size %d: ranks 0 and %d differ at %d: %x vs %x", size, r, i, math.Float64bits(got[0][i]), math.Float64bits(got[r][i]))
				}
			}
		}
	}
}

// TestHalvingMany runs Halving on the job sizes where HalvingWins picks it
// and on sizes just off a power of two, against a naive sum; segments as
// small as two elements make every exchange several frames.
func TestHalvingMany(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	ctx := context.Background()
	for _, size := range []int{8, 15, 16, 31, 32, 33, 64} {
		for _, n := range []int{0, 1, size - 1, size, 97, 1009 + rng.IntN(3000)} {
			in := make([][]int64, size)
			want := make([]int64, n)
			for r := range size {
				in[r] = randInts(rng, n)
				sum(want, in[r])
			}
			bufs := make([][]int64, size)
			errs, _ := runAll(size, func(tr *mem.Transport) error {
				bufs[tr.Rank()] = slices.Clone(in[tr.Rank()])
				return Halving(ctx, tr, bufs[tr.Rank()], sum, opts(n, 16))
			})
			for r := range size {
				if errs[r] != nil {
					t.Fatalf("size %d n %d rank %d: %v", size, n, r, errs[r])
				}
				if !slices.Equal(bufs[r], want) {
					t.Fatalf("size %d n %d rank %d: result differs from the naive sum", size, n, r)
				}
			}
		}
	}
}

// TestGroupNamesJobRanks: a group of a group (the node-aware stages of an
// elastic job's view) names its members by their ranks in the job.
func TestGroupNamesJobRanks(t *testing.T) {
	nw := mem.NewNetwork(6)
	view, err := NewGroup(nw.Transport(3), []int{0, 2, 3, 5})
	if err != nil {
		t.Fatal(err)
	}
	host, err := NewGroup(view, []int{1, 2}) // view places 1 and 2: ranks 2 and 3
	if err != nil {
		t.Fatal(err)
	}
	if host.Rank() != 1 || host.Global(0) != 2 || host.Global(1) != 3 || view.Global(3) != 5 {
		t.Fatalf("host rank %d, globals %d %d, view's 3rd %d", host.Rank(), host.Global(0), host.Global(1), view.Global(3))
	}
}
