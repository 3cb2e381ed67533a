// Package conformance is a workload for end-to-end tests: ranks issue the
// same random collectives and check every result against a naive reference
// that each rank computes itself from every rank's (deterministic) input.
// It also holds the fault drills used by the failure tests.
package conformance

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"syscall"
	"time"

	"github.com/gorun/gorun/collective"
)

// lengths: 0, 1, primes, fewer than ranks, and both sides of the
// direct/ring threshold.
var lengths = []int{0, 1, 2, 3, 5, 7, 11, 97, 1021, 8191, 65537, 262147}

var ops = []collective.Op{collective.Sum, collective.Avg, collective.Min, collective.Max, collective.Prod}

// Run issues rounds of random collectives on c and checks each result.
func Run(ctx context.Context, c *collective.Comm, seed uint64, rounds int) error {
	for round := range rounds {
		rng := rand.New(rand.NewPCG(seed, uint64(round)))
		var err error
		switch rng.IntN(4) {
		case 0:
			err = round1[float32](ctx, c, seed, round, rng)
		case 1:
			err = round1[float64](ctx, c, seed, round, rng)
		case 2:
			err = round1[int32](ctx, c, seed, round, rng)
		default:
			err = round1[int64](ctx, c, seed, round, rng)
		}
		if err != nil {
			return fmt.Errorf("round %d: %w", round, err)
		}
	}
	return c.Barrier(ctx)
}

func input[T collective.Number](seed uint64, round, rank, n int, op collective.Op) []T {
	rng := rand.New(rand.NewPCG(seed^0x9e3779b97f4a7c15, uint64(round)<<16|uint64(rank)))
	v := make([]T, n)
	for i := range v {
		var z T
		switch any(z).(type) {
		case int32, int64:
			v[i] = T(rng.IntN(201) - 100)
		default:
			if op == collective.Prod {
				v[i] = T(0.5 + rng.Float64())
			} else {
				v[i] = T(rng.Float64()*200 - 100)
			}
		}
	}
	return v
}

func reference[T collective.Number](in [][]T, op collective.Op) []T {
	out := append([]T(nil), in[0]...)
	for _, v := range in[1:] {
		for i := range out {
			switch op {
			case collective.Sum, collective.Avg:
				out[i] += v[i]
			case collective.Min:
				out[i] = min(out[i], v[i])
			case collective.Max:
				out[i] = max(out[i], v[i])
			case collective.Prod:
				out[i] *= v[i]
			}
		}
	}
	if op == collective.Avg {
		for i := range out {
			out[i] /= T(len(in))
		}
	}
	return out
}

func near[T collective.Number](got, want T, ranks int) bool {
	var z T
	tol := 1e-12
	switch any(z).(type) {
	case int32, int64:
		return got == want
	case float32:
		tol = 1e-4
	}
	return math.Abs(float64(got-want)) <= tol*float64(ranks)*math.Max(1, math.Abs(float64(want)))
}

func compare[T collective.Number](what string, got, want []T, ranks int) error {
	if len(got) != len(want) {
		return fmt.Errorf("%s: %d elements, want %d", what, len(got), len(want))
	}
	for i := range want {
		if !near(got[i], want[i], ranks) {
			return fmt.Errorf("%s: [%d] = %v, want %v", what, i, got[i], want[i])
		}
	}
	return nil
}

func round1[T collective.Number](ctx context.Context, c *collective.Comm, seed uint64, round int, rng *rand.Rand) error {
	size, rank := c.Size(), c.Rank()
	n := lengths[rng.IntN(len(lengths))]
	op := ops[rng.IntN(len(ops))]
	root := rng.IntN(size)
	kind := rng.IntN(5)
	in := make([][]T, size)
	for q := range size {
		in[q] = input[T](seed, round, q, n, op)
	}
	mine := append([]T(nil), in[rank]...)
	what := fmt.Sprintf("%T n=%d op=%v root=%d", mine, n, op, root)
	switch kind {
	case 0:
		if err := collective.AllReduce(ctx, c, mine, op); err != nil {
			return err
		}
		return compare("allreduce "+what, mine, reference(in, op), size)
	case 1:
		if err := collective.Reduce(ctx, c, mine, op, root); err != nil {
			return err
		}
		if rank == root {
			return compare("reduce "+what, mine, reference(in, op), size)
		}
		return nil
	case 2:
		if rank != root {
			clear(mine)
		}
		if err := collective.Broadcast(ctx, c, mine, root); err != nil {
			return err
		}
		return compare("broadcast "+what, mine, in[root], 1)
	case 3:
		got, err := collective.ReduceScatter(ctx, c, mine, op)
		if err != nil {
			return err
		}
		off, l := collective.Chunk(n, size, rank)
		return compare("reducescatter "+what, got, reference(in, op)[off:off+l], size)
	default:
		recv := make([]T, n*size)
		if err := collective.AllGather(ctx, c, in[rank], recv); err != nil {
			return err
		}
		var want []T
		for q := range size {
			want = append(want, in[q]...)
		}
		return compare("allgather "+what, recv, want, 1)
	}
}

// Drill is a fault drill: every rank runs large all-reduces in a loop; the
// last rank kills (SIGKILL) or freezes (SIGSTOP) itself in the middle of
// one. Survivors return the error they got and when they got it; the
// victim reports when it struck via report.
func Drill(ctx context.Context, c *collective.Comm, how syscall.Signal, mib int, report func(string)) (time.Time, error) {
	buf := make([]float32, mib<<20/4)
	victim := c.Rank() == c.Size()-1
	for iter := 0; ; iter++ {
		if victim && iter == 2 {
			go func() {
				time.Sleep(20 * time.Millisecond)
				report(fmt.Sprintf("STRIKE %d", time.Now().UnixNano()))
				_ = syscall.Kill(os.Getpid(), how)
			}()
		}
		err := collective.AllReduce(ctx, c, buf, collective.Sum)
		if err != nil {
			return time.Now(), err
		}
		if iter > 1000 {
			return time.Now(), errors.New("drill: the victim never struck")
		}
	}
}
