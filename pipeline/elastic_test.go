package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorun/gorun/collective"
	"github.com/gorun/gorun/transport"
	"github.com/gorun/gorun/transport/mem"
)

// TestElasticEpoch: an elastic job in memory trains one epoch, each step
// an all-reduce of a histogram of the step's samples; a rank is killed
// in the middle of the epoch. The survivors resynchronize the step as
// collective's doc says, Resume the Part on the new view, and finish.
// The histograms rank 0 completed must count every sample of the epoch's
// order (less the dropped remainder) exactly once: nothing lost, nothing
// twice. Every survivor must end on the same Part.
func TestElasticEpoch(t *testing.T) {
	const n, batch = 41, 2
	resumed, runs := 0, 0
	for size := 3; size <= 5; size++ {
		for _, victim := range []int{1, size - 1} {
			for _, at := range []int{size, 5 * size, 12 * size} {
				t.Run(fmt.Sprintf("%d ranks, rank %d dies at frame %d", size, victim, at), func(t *testing.T) {
					runs++
					if elasticEpoch(t, size, victim, at, n, batch) {
						resumed++
					}
				})
			}
		}
	}
	t.Logf("%d of %d runs resumed on a new view", resumed, runs)
	if resumed < runs/2 {
		t.Fatalf("only %d of %d runs resumed: the kill points are off", resumed, runs)
	}
}

// elasticEpoch reports whether the part was resumed on a new view.
func elasticEpoch(t *testing.T, size, victim, at, n, batch int) bool {
	nw := mem.NewNetwork(size)
	var sent atomic.Int64
	nw.BeforeSend = func(from, to int, h transport.Header) bool {
		if sent.Add(1)-1 == int64(at) {
			nw.Kill(victim) // before this frame leaves: in the middle of a collective
		}
		return true
	}
	cfg := collective.DefaultConfig()
	cfg.Elastic = true
	comms, err := collective.NewLocalOn(nw, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := Sampler{N: n, Seed: 99}
	seen := make([]int64, n) // rank 0's completed histograms, summed
	final := make([]Part, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for _, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := c.Rank()
			err := func() error {
				part, err := s.Part(3, c.View().Ranks)
				if err != nil {
					return err
				}
				// Step k of the part, and at k = Steps the end of the epoch:
				// an all-reduce that every rank calls, so that a view
				// change during the last step reaches every rank.
				for k := 0; k <= part.Steps(batch); k++ {
					idx, err := s.Indices(part, r)
					if err != nil {
						return err
					}
					hist := make([]int64, n)
					for _, i := range idx[min(k*batch, len(idx)):min((k+1)*batch, len(idx))] {
						hist[i]++
					}
					err = collective.AllReduce(ctx, c, hist, collective.Sum)
					if errors.Is(err, collective.ErrViewChanged) {
						state := []int64{int64(k)}
						if err := collective.Resync(ctx, c, state); err != nil {
							return err
						}
						if part, err = part.Resume(part.Consumed(int(state[0]), batch), c.View().Ranks); err != nil {
							return err
						}
						k = -1
						continue
					}
					if err != nil {
						return fmt.Errorf("step %d: %w", k, err)
					}
					if r == 0 {
						for i, x := range hist {
							seen[i] += x
						}
					}
				}
				final[r] = part
				return nil
			}()
			if r != victim {
				errs[r] = err
			}
		}()
	}
	wg.Wait()
	for _, c := range comms {
		c.Close()
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	want := make([]int64, n)
	for _, i := range s.Order(3)[:n-n%size] {
		want[i]++
	}
	if !slices.Equal(seen, want) {
		t.Fatalf("samples seen %v, want %v", seen, want)
	}
	for r := range size {
		if r != victim && (!slices.Equal(final[r].Ranks, final[0].Ranks) || final[r].Start != final[0].Start) {
			t.Fatalf("rank %d ends on %+v, rank 0 on %+v", r, final[r], final[0])
		}
	}
	return len(final[0].Ranks) < size
}
