package collective

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gorun/gorun/transport"
	"github.com/gorun/gorun/transport/mem"
)

// onAllNet is onAll over a network the test made.
func onAllNet(t *testing.T, nw *mem.Network, cfg Config, f func(c *Comm) error) []error {
	t.Helper()
	comms, err := NewLocalOn(nw, cfg)
	if err != nil {
		t.Fatal(err)
	}
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for _, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[c.Rank()] = f(c)
		}()
	}
	wg.Wait()
	closeAll(comms)
	return errs
}

// TestHandlesInFlight: many collectives of every kind started at once on
// each rank complete in the order started, each with the reference
// result, whatever their sizes, on 1-9 ranks; buffers are reused only
// after Wait.
func TestHandlesInFlight(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	cfg := DefaultConfig()
	cfg.SmallBytes, cfg.SegmentBytes = 256, 64
	for size := 1; size <= 9; size++ {
		const k = 12
		lens := make([]int, k)
		opsOf := make([]Op, k)
		in := make([][][]int64, k)
		for i := range k {
			lens[i] = lengths[rng.IntN(len(lengths))]
			opsOf[i] = ops[rng.IntN(len(ops))]
			in[i] = make([][]int64, size)
			for r := range size {
				in[i][r] = gen[int64](rng, lens[i], opsOf[i])
			}
		}
		got := make([][][]int64, k)
		for i := range got {
			got[i] = make([][]int64, size)
		}
		errs := onAll(t, size, cfg, func(c *Comm) error {
			ctx := context.Background()
			r := c.Rank()
			hs := make([]*Handle, k)
			for i := range k {
				got[i][r] = slices.Clone(in[i][r])
				if i%3 == 2 {
					// A broadcast from a changing root among the reductions.
					hs[i] = StartBroadcast(ctx, c, got[i][r], i%size)
					continue
				}
				hs[i] = StartAllReduce(ctx, c, got[i][r], opsOf[i])
			}
			for i := k - 1; i >= 0; i-- {
				if err := hs[i].Wait(ctx); err != nil {
					return err
				}
				// Once the last is done, every one before it is.
				for j := 0; j < i; j++ {
					if done, _ := hs[j].Test(); !done {
						return fmt.Errorf("handle %d done before handle %d", i, j)
					}
				}
			}
			return nil
		})
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
		for i := range k {
			want := reference(in[i], opsOf[i])
			if i%3 == 2 {
				want = in[i][i%size]
			}
			checkAllReduced(t, fmt.Sprintf("size %d handle %d", size, i), got[i], want)
		}
	}
}

// TestHandleFailures: a rank killed while handles are outstanding fails
// every handle on every other rank, naming it; Close under outstanding
// handles returns ErrClosed; a cancelled context ends a Wait, not the
// collective.
func TestHandleFailures(t *testing.T) {
	t.Run("kill", func(t *testing.T) {
		nw := mem.NewNetwork(4)
		var once sync.Once
		nw.BeforeSend = func(from, to int, h transport.Header) bool {
			if h.Seq == 3 {
				once.Do(func() { go nw.Kill(2) })
			}
			return true
		}
		cfg := DefaultConfig()
		cfg.SegmentBytes = 64
		start := time.Now()
		errs := onAllNet(t, nw, cfg, func(c *Comm) error {
			if c.Rank() == 2 {
				return nil
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var hs []*Handle
			for range 6 {
				hs = append(hs, StartAllReduce(ctx, c, make([]float32, 5000), Sum))
			}
			for i, h := range hs[2:] {
				err := h.Wait(ctx)
				if !errors.Is(err, ErrPeerLost) && !errors.Is(err, ErrAborted) {
					return fmt.Errorf("handle %d: %v, want the loss of rank 2", i+2, err)
				}
			}
			return nil
		})
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("took %v", d)
		}
	})
	// On synctest's clock the waiter's 50 ms end only once every
	// goroutine waits: the collective was blocked on its peers, not slow.
	t.Run("close", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			comms, err := NewLocal(3, DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			// Rank 0 alone starts: its handles wait for peers that never come.
			h1 := StartAllReduce(ctx, comms[0], make([]int64, 100), Sum)
			h2 := StartAllGather(ctx, comms[0], make([]int64, 3), make([]int64, 9))
			wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			if err := h1.Wait(wctx); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("wait with an ended context: %v", err)
			}
			cancel()
			synctest.Wait()
			if done, _ := h1.Test(); done {
				t.Fatal("the collective ended with its waiter's context")
			}
			comms[0].Close()
			for _, h := range []*Handle{h1, h2} {
				if err := h.Wait(ctx); !errors.Is(err, ErrClosed) {
					t.Fatalf("after Close: %v, want ErrClosed", err)
				}
			}
			if err := comms[0].StartBarrier(ctx).Wait(ctx); !errors.Is(err, ErrClosed) {
				t.Fatalf("start after Close: %v", err)
			}
			closeAll(comms)
		})
	})
	t.Run("cancel", func(t *testing.T) {
		comms, err := NewLocal(2, DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		defer closeAll(comms)
		ctx, cancel := context.WithCancel(context.Background())
		h := StartAllReduce(ctx, comms[0], make([]int64, 10), Sum)
		cancel()
		if err := h.Wait(context.Background()); err == nil {
			t.Fatal("a cancelled collective succeeded alone")
		}
		// The peer learns of it instead of waiting.
		wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer wcancel()
		if err := AllReduce(wctx, comms[1], make([]int64, 10), Sum); !errors.Is(err, ErrAborted) {
			t.Fatalf("peer of a cancelled collective: %v, want ErrAborted", err)
		}
	})
}

// TestGroupAllReduce: a fused group equals each buffer reduced alone.
func TestGroupAllReduce(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for size := 1; size <= 9; size++ {
		for _, op := range ops {
			parts := rng.IntN(12)
			in := make([][][]float64, parts)
			for i := range in {
				n := lengths[rng.IntN(len(lengths))]
				in[i] = make([][]float64, size)
				for r := range size {
					in[i][r] = gen[float64](rng, n, op)
				}
			}
			got := make([][][]float64, size)
			errs := onAll(t, size, DefaultConfig(), func(c *Comm) error {
				r := c.Rank()
				got[r] = make([][]float64, parts)
				for i := range parts {
					got[r][i] = slices.Clone(in[i][r])
				}
				if r%2 == 0 {
					return StartGroupAllReduce(context.Background(), c, got[r], op).Wait(context.Background())
				}
				return GroupAllReduce(context.Background(), c, got[r], op)
			})
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			for i := range parts {
				per := make([][]float64, size)
				for r := range size {
					per[r] = got[r][i]
				}
				checkAllReduced(t, fmt.Sprintf("size %d %v part %d", size, op, i), per, reference(in[i], op))
			}
		}
	}
}

// TestBucketer: gradients marked ready in a different order on every rank
// come out reduced; the buckets obey the caps, are the same on every rank,
// and after the first step follow rank 0's ready order.
func TestBucketer(t *testing.T) {
	const size, grads, steps = 4, 23, 3
	rng := rand.New(rand.NewPCG(9, 10))
	lens := make([]int, grads)
	for i := range lens {
		lens[i] = rng.IntN(300)
	}
	for _, overlap := range []bool{true, false} {
		buckets := make([][][]int, size)
		errs := onAll(t, size, DefaultConfig(), func(c *Comm) error {
			r := c.Rank()
			g := make([][]float32, grads)
			for i := range g {
				g[i] = make([]float32, lens[i])
			}
			cfg := DefaultBucketConfig()
			cfg.FirstBytes, cfg.CapBytes, cfg.Overlap = 400, 2000, overlap
			b, err := NewBucketer(c, g, Sum, cfg)
			if err != nil {
				return err
			}
			for _, bk := range b.Buckets() {
				n := 0
				for _, i := range bk {
					n += 4 * lens[i]
				}
				if len(bk) > 1 && n > cfg.CapBytes {
					return fmt.Errorf("bucket %v holds %d bytes, over the cap", bk, n)
				}
			}
			order := rand.New(rand.NewPCG(uint64(r), 1)).Perm(grads)
			for step := range steps {
				for i := range g {
					for j := range g[i] {
						g[i][j] = float32((r + 1) * (i + j + step))
					}
				}
				for _, i := range order {
					if err := b.Ready(context.Background(), i); err != nil {
						return err
					}
				}
				if err := b.Wait(context.Background()); err != nil {
					return err
				}
				for i := range g {
					for j := range g[i] {
						if want := float32(10 * (i + j + step)); g[i][j] != want {
							return fmt.Errorf("step %d grad %d [%d] = %v, want %v", step, i, j, g[i][j], want)
						}
					}
				}
				if step == 0 {
					if len(b.Stats()) == 0 {
						return errors.New("no bucket stats")
					}
				}
			}
			buckets[r] = b.Buckets()
			return nil
		})
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		first := slices.Concat(buckets[0]...)
		if want := rand.New(rand.NewPCG(0, 1)).Perm(grads); !slices.Equal(first, want) {
			t.Fatalf("rebuilt order %v, want rank 0's ready order %v", first, want)
		}
		for r := 1; r < size; r++ {
			if !slices.EqualFunc(buckets[r], buckets[0], slices.Equal) {
				t.Fatalf("rank %d buckets %v, rank 0 %v", r, buckets[r], buckets[0])
			}
		}
	}
}

// TestPlan is the table of the plan's choices.
func TestPlan(t *testing.T) {
	for _, c := range []struct {
		s    situation
		want algo
	}{
		{situation{kind: kindAllReduce, bytes: 4096, ranks: 2, small: 8192}, viaDirect},
		{situation{kind: kindAllReduce, bytes: 4096, ranks: 4, small: 8192}, viaDoubling},
		{situation{kind: kindAllReduce, bytes: 4096, ranks: 6, small: 8192}, viaDirect},
		{situation{kind: kindAllReduce, bytes: 4096, ranks: 16, small: 8192}, viaDoubling},
		{situation{kind: kindAllReduce, bytes: 16 << 20, ranks: 2, small: 8192}, viaRing},
		{situation{kind: kindAllReduce, bytes: 64 << 10, ranks: 4, small: 8192}, viaHalving},
		{situation{kind: kindAllReduce, bytes: 16 << 20, ranks: 8, nodeAware: true, small: 8192}, viaHierarchical},
		{situation{kind: kindAllReduce, bytes: 16 << 20, ranks: 8, nodeAware: true, alg: Ring, small: 8192}, viaRing},
		{situation{kind: kindAllReduce, bytes: 16 << 20, ranks: 8, hub: true, small: 8192}, viaHub},
		{situation{kind: kindGroup, bytes: 512 << 10, ranks: 4, small: 8192}, viaRing},
		{situation{kind: kindBroadcast, bytes: 100, ranks: 16, small: 8192}, viaTree},
		{situation{kind: kindBroadcast, bytes: 100, ranks: 4, small: 8192}, viaDirect},
		{situation{kind: kindBroadcast, bytes: 1 << 20, ranks: 4, byHost: true, small: 8192}, viaChainByHost},
		{situation{kind: kindBroadcast, bytes: 1 << 20, ranks: 4, small: 8192}, viaChain},
		{situation{kind: kindAllGather, bytes: 100, ranks: 16, small: 8192}, viaDoubling},
		{situation{kind: kindAllGather, bytes: 8192, ranks: 4, small: 8192}, viaDoubling},
		{situation{kind: kindAllGather, bytes: 8192, ranks: 2, small: 8192}, viaDirect},
		{situation{kind: kindAllGather, bytes: 4096, ranks: 6, small: 8192}, viaDirect},
		{situation{kind: kindAllGather, bytes: 1 << 20, ranks: 2, small: 8192}, viaRing},
		{situation{kind: kindReduceScatter, bytes: 4096, ranks: 2, small: 8192}, viaRing},
		{situation{kind: kindReduceScatter, bytes: 1 << 20, ranks: 16, small: 8192}, viaRing},
		{situation{kind: kindAllToAll, bytes: 64, ranks: 8, small: 8192}, viaBruck},
		{situation{kind: kindAllToAll, bytes: 64, ranks: 4, small: 8192}, viaPairwise},
		{situation{kind: kindAllToAll, bytes: 64 << 10, ranks: 8, small: 8192}, viaPairwise},
		{situation{kind: kindAllToAll, bytes: 64, ranks: 8, hub: true, small: 8192}, viaBruck},
		{situation{kind: kindGather, bytes: 64, ranks: 8, hub: true}, viaTree},
		{situation{kind: kindBarrier, ranks: 8}, viaDissemination},
		{situation{kind: kindBarrier, ranks: 8, hub: true}, viaHub},
	} {
		if got := plan(c.s); got != c.want {
			t.Errorf("plan(%+v) = %v, want %v", c.s, got, c.want)
		}
	}
}

// TestHandlesElastic: a rank killed while every survivor has handles
// outstanding on an elastic job: each handle either succeeds or fails
// with ErrViewChanged (none runs on the new view), and after Resync a new
// round of handles gives the new view's sums.
func TestHandlesElastic(t *testing.T) {
	for _, at := range []int{1, 5, 20} {
		nw := mem.NewNetwork(5)
		sent := 0
		var mu sync.Mutex
		nw.BeforeSend = func(from, to int, h transport.Header) bool {
			mu.Lock()
			defer mu.Unlock()
			if sent++; sent == at {
				go nw.Kill(4)
			}
			return true
		}
		cfg := DefaultConfig()
		cfg.Elastic, cfg.SegmentBytes = true, 64
		errs := onAllNet(t, nw, cfg, func(c *Comm) error {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			changed := false
			for round := 0; round < 6; round++ {
				before := c.View().Ranks
				bufs := make([][]int64, 4)
				hs := make([]*Handle, 4)
				for i := range hs {
					bufs[i] = []int64{int64(c.Rank() + 1), int64(i)}
					hs[i] = StartAllReduce(ctx, c, bufs[i], Sum)
				}
				failed := false
				for i, h := range hs {
					err := h.Wait(ctx)
					if errors.Is(err, ErrViewChanged) {
						failed = true
						continue
					}
					if err != nil {
						return fmt.Errorf("round %d handle %d: %v", round, i, err)
					}
					// A handle done before the change summed the old view.
					sum := func(ranks []int) (w int64) {
						for _, q := range ranks {
							w += int64(q + 1)
						}
						return w
					}
					if got := bufs[i][0]; failed || got != sum(before) && got != sum(c.View().Ranks) {
						return fmt.Errorf("round %d handle %d: sum %d (after a failed handle: %v), want %d for %v or %d for %v", round, i, got, failed, sum(before), before, sum(c.View().Ranks), c.View().Ranks)
					}
				}
				if failed {
					changed = true
					if err := Resync(ctx, c, []int64{0}); err != nil {
						return err
					}
				}
			}
			if c.JobSize() != 5 {
				return fmt.Errorf("job size %d in view %v, want 5", c.JobSize(), c.View().Ranks)
			}
			if !changed && c.View().Epoch == 0 {
				return errors.New("the victim was never lost")
			}
			return nil
		})
		errs[4] = nil // the victim fails anywhere
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("kill at frame %d: %v", at, err)
		}
	}
}
