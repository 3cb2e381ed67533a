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
	kind := rng.IntN(14)
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
	case 4:
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
	return more(ctx, c, kind, seed, round, rng, in, what)
}

// counts is a matrix of block lengths, the same on every rank: rows send,
// columns receive; some rows and columns are all zero.
func counts(rng *rand.Rand, size, n int) [][]int {
	m := make([][]int, size)
	for i := range m {
		m[i] = make([]int, size)
		if rng.IntN(5) == 0 {
			continue // a rank that sends nothing
		}
		for j := range m[i] {
			m[i][j] = rng.IntN(n + 1)
		}
	}
	return m
}

// more is the collectives added with handles, sub-communicators and the
// exchanges.
func more[T collective.Number](ctx context.Context, c *collective.Comm, kind int, seed uint64, round int, rng *rand.Rand, in [][]T, what string) error {
	size, rank := c.Size(), c.Rank()
	n := len(in[0])
	op := ops[rng.IntN(len(ops))]
	root := rng.IntN(size)
	switch kind {
	case 5: // all-to-all: block j of rank q's send goes to rank j
		block := n % 4099
		send := make([][]T, size)
		for q := range size {
			send[q] = input[T](seed, round, q, block*size, op)
		}
		recv := make([]T, block*size)
		if err := collective.AllToAll(ctx, c, send[rank], recv); err != nil {
			return err
		}
		var want []T
		for q := range size {
			want = append(want, send[q][rank*block:(rank+1)*block]...)
		}
		return compare("alltoall "+what, recv, want, 1)
	case 6: // all-to-all with per-peer counts, also learnt by Exchange
		m := counts(rng, size, n%1031)
		send := make([][]T, size)
		for q := range size {
			tot := 0
			for _, x := range m[q] {
				tot += x
			}
			send[q] = input[T](seed, round, q, tot, op)
		}
		var want []T
		rc := make([]int, size)
		for q := range size {
			off := 0
			for j := range rank {
				off += m[q][j]
			}
			want = append(want, send[q][off:off+m[q][rank]]...)
			rc[q] = m[q][rank]
		}
		recv := make([]T, len(want))
		if err := collective.AllToAllV(ctx, c, send[rank], m[rank], recv, rc); err != nil {
			return err
		}
		if err := compare("alltoallv "+what, recv, want, 1); err != nil {
			return err
		}
		got, gotCounts, err := collective.Exchange(ctx, c, send[rank], m[rank])
		if err != nil {
			return err
		}
		for q := range size {
			if gotCounts[q] != rc[q] {
				return fmt.Errorf("exchange %s: %d elements from rank %d, want %d", what, gotCounts[q], q, rc[q])
			}
		}
		return compare("exchange "+what, got, want, 1)
	case 7:
		var recv []T
		if rank == root {
			recv = make([]T, n*size)
		}
		if err := collective.Gather(ctx, c, in[rank], recv, root); err != nil {
			return err
		}
		if rank != root {
			return nil
		}
		var want []T
		for q := range size {
			want = append(want, in[q]...)
		}
		return compare("gather "+what, recv, want, 1)
	case 8:
		all := input[T](seed, round, root, n*size, op)
		var send []T
		if rank == root {
			send = all
		}
		recv := make([]T, n)
		if err := collective.Scatter(ctx, c, send, recv, root); err != nil {
			return err
		}
		return compare("scatter "+what, recv, all[rank*n:(rank+1)*n], 1)
	case 9:
		m := make([]int, 0, size)
		var want []T
		for q := range size {
			l := rng.IntN(n%4099 + 1)
			m = append(m, l)
			want = append(want, in[q][:min(l, n)]...)
			for range l - min(l, n) {
				want = append(want, 0)
			}
		}
		send := append(append([]T(nil), in[rank][:min(m[rank], n)]...), make([]T, m[rank]-min(m[rank], n))...)
		recv := make([]T, len(want))
		if err := collective.AllGatherV(ctx, c, send, recv, m); err != nil {
			return err
		}
		return compare("allgatherv "+what, recv, want, 1)
	case 10: // three collectives in flight at once, waited together
		red := append([]T(nil), in[rank]...)
		bc := make([]T, n)
		if rank == root {
			copy(bc, in[root])
		}
		gat := make([]T, n*size)
		h1 := collective.StartAllReduce(ctx, c, red, op)
		h2 := collective.StartBroadcast(ctx, c, bc, root)
		h3 := collective.StartAllGather(ctx, c, in[rank], gat)
		if err := collective.WaitAll(ctx, h1, h2, h3); err != nil {
			return err
		}
		var want []T
		for q := range size {
			want = append(want, in[q]...)
		}
		return errors.Join(compare("start allreduce "+what, red, reference(in, op), size),
			compare("start broadcast "+what, bc, in[root], 1), compare("start allgather "+what, gat, want, 1))
	case 11: // two children by parity, ranks in reverse order
		child, err := c.Split(ctx, rank%2, -rank)
		if err != nil {
			return err
		}
		defer child.Close()
		var members [][]T
		for q := size - 1; q >= 0; q-- {
			if q%2 == rank%2 {
				members = append(members, in[q])
			}
		}
		if child.Size() != len(members) || child.Rank() != (size-1-rank)/2 {
			return fmt.Errorf("split %s: rank %d of %d in the child, want %d of %d", what, child.Rank(), child.Size(), (size-1-rank)/2, len(members))
		}
		mine := append([]T(nil), in[rank]...)
		if err := collective.AllReduce(ctx, child, mine, op); err != nil {
			return err
		}
		return compare("split allreduce "+what, mine, reference(members, op), len(members))
	case 12: // point to point around the ring, two tags crossing
		if size == 1 {
			return nil
		}
		next, prev := (rank+1)%size, (rank+size-1)%size
		a, b := make([]T, n), make([]T, n)
		if err := collective.Send(ctx, c, in[rank], next, 7); err != nil {
			return err
		}
		if err := collective.Send(ctx, c, in[rank][:n/2], next, 3); err != nil {
			return err
		}
		if err := collective.Recv(ctx, c, b[:n/2], prev, 3); err != nil {
			return err
		}
		if err := collective.Recv(ctx, c, a, prev, 7); err != nil {
			return err
		}
		if err := errors.Join(compare("recv tag 7 "+what, a, in[prev], 1), compare("recv tag 3 "+what, b[:n/2], in[prev][:n/2], 1)); err != nil {
			return err
		}
		// Every other rank sends to rank 0, which receives from any source:
		// each sender once, with its own data. The tag is the round's own
		// (of this seed's run): a sender does not wait for rank 0, so a
		// fast one's message of a later round must not be taken for this
		// round's.
		tag := 1<<20 + int((seed*0x9e3779b1+uint64(round))%(1<<30))
		if rank != 0 {
			return collective.Send(ctx, c, in[rank], 0, tag)
		}
		seen := make([]bool, size)
		for range size - 1 {
			from, err := collective.RecvAny(ctx, c, a, tag)
			if err != nil {
				return err
			}
			if from <= 0 || from >= size || seen[from] {
				return fmt.Errorf("recv from any source %s: sender %d (seen %v)", what, from, seen)
			}
			seen[from] = true
			if err := compare(fmt.Sprintf("recv from any source (rank %d) %s", from, what), a, in[from], 1); err != nil {
				return err
			}
		}
		return nil
	default: // a fused group of buffers
		parts := rng.IntN(9)
		bufs := make([][]T, parts)
		ins := make([][][]T, parts)
		for i := range bufs {
			l := rng.IntN(n%4099 + 1)
			ins[i] = make([][]T, size)
			for q := range size {
				ins[i][q] = input[T](seed, round*16+i, q, l, op)
			}
			bufs[i] = append([]T(nil), ins[i][rank]...)
		}
		if err := collective.GroupAllReduce(ctx, c, bufs, op); err != nil {
			return err
		}
		for i := range bufs {
			if err := compare(fmt.Sprintf("group part %d %s", i, what), bufs[i], reference(ins[i], op), size); err != nil {
				return err
			}
		}
		return nil
	}
}

// Drill is a fault drill: every rank runs large all-reduces in a loop; the
// last rank kills (SIGKILL) or freezes (SIGSTOP) itself in the middle of
// one. Survivors return the error they got and when they got it; the
// victim reports when it struck via report.
func Drill(ctx context.Context, c *collective.Comm, how syscall.Signal, mib int, report func(string)) (time.Time, error) {
	return drill(ctx, c, how, mib, false, report)
}

// DrillHandles is Drill with four nonblocking all-reduces outstanding at
// once: every handle must fail naming the victim.
func DrillHandles(ctx context.Context, c *collective.Comm, how syscall.Signal, mib int, report func(string)) (time.Time, error) {
	return drill(ctx, c, how, mib, true, report)
}

func drill(ctx context.Context, c *collective.Comm, how syscall.Signal, mib int, handles bool, report func(string)) (time.Time, error) {
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
		var err error
		if handles {
			// Four all-reduces in flight at once, then Wait for each.
			q := len(buf) / 4
			hs := make([]*collective.Handle, 4)
			for i := range hs {
				hs[i] = collective.StartAllReduce(ctx, c, buf[i*q:(i+1)*q], collective.Sum)
			}
			for _, h := range hs {
				if werr := h.Wait(ctx); werr != nil && err == nil {
					err = werr
				}
			}
		} else {
			err = collective.AllReduce(ctx, c, buf, collective.Sum)
		}
		if err != nil {
			return time.Now(), err
		}
		if iter > 1000 {
			return time.Now(), errors.New("drill: the victim never struck")
		}
	}
}
