// Package bench measures collectives the way nccl-tests and the project's
// MPI harness (bench/mpi/allreduce_mpi.c) do, so that the figures compare: per size,
// batches of operations of about 50 ms each, a batch's time per op maxed
// over ranks, and the median over batches.
//
// The arithmetic is pure (BusBW, Batches, Median); Sweep runs it on a Comm.
package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gorun/gorun/collective"
)

// AlgBW is bytes per second.
func AlgBW(bytes int, t time.Duration) float64 {
	if t <= 0 {
		return 0
	}
	return float64(bytes) / t.Seconds()
}

// BusBW is nccl-tests' bus bandwidth of an all-reduce: algbw·2(n−1)/n, the
// rate each rank's link must sustain.
func BusBW(bytes int, t time.Duration, n int) float64 {
	if n < 2 {
		return AlgBW(bytes, t)
	}
	return AlgBW(bytes, t) * 2 * float64(n-1) / float64(n)
}

// Batches picks ops per batch (about batch long) and a batch count (about
// target in all, between 5 and 200) from the time of one probed op.
func Batches(probe, batch, target time.Duration) (opsPerBatch, batches int) {
	probe = max(probe, time.Microsecond)
	opsPerBatch = max(1, int(batch/probe))
	per := time.Duration(opsPerBatch) * probe
	batches = min(200, max(5, int(target/per)))
	return opsPerBatch, batches
}

// Median of ds; 0 for none.
func Median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Row is one size's result.
type Row struct {
	Bytes  int
	Median time.Duration // time per op, median over batches
	Min    time.Duration
	AlgBW  float64 // bytes/s
	BusBW  float64
}

// Sweep times float32 Sum all-reduces of each size on c. Every rank must
// call it with the same arguments; every rank gets the same rows.
func Sweep(ctx context.Context, c *collective.Comm, sizes []int, target time.Duration) ([]Row, error) {
	return SweepOf(ctx, c, sizes, target, AllReduceSum)
}

// Op is a collective on a float32 buffer that SweepOf times.
type Op func(ctx context.Context, c *collective.Comm, buf []float32) error

// AllReduceSum is a float32 Sum all-reduce.
func AllReduceSum(ctx context.Context, c *collective.Comm, buf []float32) error {
	return collective.AllReduce(ctx, c, buf, collective.Sum)
}

// AvgOfValues is a float32 Avg all-reduce of values such as gradients
// hold: the first time it sees a buffer it fills it (untimed, in SweepOf's
// warm-up) with normal values spread over about twenty binades, different
// on each rank, and an Avg keeps them in range call after call. A buffer
// of zeros (what the Sum all-reduce times) takes rarer paths in some
// kernels, exact sums' conversions among them.
func AvgOfValues() Op {
	var filled *float32
	return func(ctx context.Context, c *collective.Comm, buf []float32) error {
		if len(buf) > 0 && &buf[0] != filled {
			fillValues(buf, c.Rank())
			filled = &buf[0]
		}
		return collective.AllReduce(ctx, c, buf, collective.Avg)
	}
}

// fillValues is AvgOfValues' fill of rank's buffer.
func fillValues(buf []float32, rank int) {
	rng := rand.New(rand.NewPCG(uint64(rank), 1))
	for i := range buf {
		buf[i] = float32(math.Ldexp(rng.NormFloat64(), -rng.IntN(20)))
	}
}

// BroadcastFrom0 is a broadcast from rank 0. Its busbw, as nccl-tests
// count it, is its algbw; SweepOf reports the all-reduce's factor, so
// divide by 2(n-1)/n.
func BroadcastFrom0(ctx context.Context, c *collective.Comm, buf []float32) error {
	return collective.Broadcast(ctx, c, buf, 0)
}

// ReduceScatterSum is a sum reduce-scatter of the whole buffer. nccl-tests
// count its busbw as algbw*(n-1)/n; SweepOf reports twice that.
func ReduceScatterSum(ctx context.Context, c *collective.Comm, buf []float32) error {
	_, err := collective.ReduceScatter(ctx, c, buf, collective.Sum)
	return err
}

// AllGatherInto is an all-gather whose result fills buf (each rank sends
// len(buf)/n elements; a remainder is left out). Its busbw, as for
// ReduceScatterSum, is half what SweepOf reports.
func AllGatherInto(ctx context.Context, c *collective.Comm, buf []float32) error {
	b := len(buf) / c.Size()
	recv := buf[:b*c.Size()]
	return collective.AllGather(ctx, c, recv[c.Rank()*b:(c.Rank()+1)*b], recv)
}

// AllToAllEqual is an all-to-all of buf (len(buf)/n elements to each
// rank; a remainder is left out) into a buffer of the same size.
func AllToAllEqual(ctx context.Context, c *collective.Comm, buf []float32) error {
	b := len(buf) / c.Size() * c.Size()
	recv := scratchOf(len(buf))
	return collective.AllToAll(ctx, c, buf[:b], recv[:b])
}

var scratch []float32

func scratchOf(n int) []float32 {
	if cap(scratch) < n {
		scratch = make([]float32, n)
	}
	return scratch[:n]
}

// Group is one fused GroupAllReduce of parts buffers of len(buf) each.
func Group(parts int) Op {
	var bufs [][]float32
	return func(ctx context.Context, c *collective.Comm, buf []float32) error {
		if len(bufs) != parts || len(bufs[0]) != len(buf) {
			bufs = make([][]float32, parts)
			for i := range bufs {
				bufs[i] = make([]float32, len(buf))
			}
		}
		return collective.GroupAllReduce(ctx, c, bufs, collective.Sum)
	}
}

// Separate is parts blocking all-reduces of len(buf) each: Group's
// baseline.
func Separate(parts int) Op {
	return func(ctx context.Context, c *collective.Comm, buf []float32) error {
		for range parts {
			if err := collective.AllReduce(ctx, c, buf, collective.Sum); err != nil {
				return err
			}
		}
		return nil
	}
}

// Siblings is an all-reduce of buf in child, one of two siblings (color
// 0 or 1) split from the Comm the op is called with: both at once, or
// with seq the second only after the first (a barrier on the parent
// between).
func Siblings(child *collective.Comm, color int, seq bool) Op {
	return func(ctx context.Context, c *collective.Comm, buf []float32) error {
		if seq && color == 1 {
			if err := c.Barrier(ctx); err != nil {
				return err
			}
		}
		if err := collective.AllReduce(ctx, child, buf, collective.Sum); err != nil {
			return err
		}
		if seq && color == 0 {
			return c.Barrier(ctx)
		}
		return nil
	}
}

// SplitHalves is a Comm.Split into two halves and the child's Close:
// what a split costs (buf is not used).
func SplitHalves(ctx context.Context, c *collective.Comm, _ []float32) error {
	child, err := c.Split(ctx, 2*c.Rank()/c.Size(), c.Rank())
	if err != nil {
		return err
	}
	return child.Close()
}

// SweepOf is Sweep for any collective op.
func SweepOf(ctx context.Context, c *collective.Comm, sizes []int, target time.Duration, op Op) ([]Row, error) {
	var rows []Row
	for _, bytes := range sizes {
		buf := make([]float32, bytes/4)
		// Warm-up, then a probe that doubles until it takes 50 ms.
		for range 3 {
			if err := op(ctx, c, buf); err != nil {
				return nil, err
			}
		}
		var probe time.Duration
		for n := 1; ; n *= 2 {
			d, err := timed(ctx, c, buf, n, op)
			if err != nil {
				return nil, err
			}
			if d >= 50*time.Millisecond || n >= 1<<16 {
				probe = d / time.Duration(n)
				break
			}
		}
		// Rank 0 decides so every rank runs the same count.
		plan := []int64{0, 0}
		if c.Rank() == 0 {
			m, b := Batches(probe, 50*time.Millisecond, target)
			plan = []int64{int64(m), int64(b)}
		}
		if err := collective.Broadcast(ctx, c, plan, 0); err != nil {
			return nil, err
		}
		per := make([]time.Duration, 0, plan[1])
		for range plan[1] {
			d, err := timed(ctx, c, buf, int(plan[0]), op)
			if err != nil {
				return nil, err
			}
			per = append(per, d/time.Duration(plan[0]))
		}
		med, lo := Median(per), slices.Min(per)
		rows = append(rows, Row{Bytes: bytes, Median: med, Min: lo, AlgBW: AlgBW(bytes, med), BusBW: BusBW(bytes, med, c.Size())})
	}
	return rows, nil
}

// timed runs n all-reduces after a barrier and returns the slowest rank's
// elapsed time.
func timed(ctx context.Context, c *collective.Comm, buf []float32, n int, op Op) (time.Duration, error) {
	if err := c.Barrier(ctx); err != nil {
		return 0, err
	}
	t0 := time.Now()
	for range n {
		if err := op(ctx, c, buf); err != nil {
			return 0, err
		}
	}
	el := []int64{int64(time.Since(t0))}
	if err := collective.AllReduce(ctx, c, el, collective.Max); err != nil {
		return 0, err
	}
	return time.Duration(el[0]), nil
}

// WriteTable prints rows nccl-tests style.
func WriteTable(w io.Writer, rows []Row, ranks int) error {
	if _, err := fmt.Fprintf(w, "%12s %12s %12s %10s %10s\n", "size", "time(us)", "min(us)", "algbw GB/s", "busbw GB/s"); err != nil {
		return err
	}
	for _, r := range rows {
		if _, err := fmt.Fprintf(w, "%12s %12.2f %12.2f %10.3f %10.3f\n", FormatSize(r.Bytes),
			float64(r.Median.Nanoseconds())/1e3, float64(r.Min.Nanoseconds())/1e3, r.AlgBW/1e9, r.BusBW/1e9); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(w, "# %d ranks, float32 sum; busbw = algbw*2(n-1)/n; median over batches\n", ranks)
	return err
}

// ParseSize reads "4096", "4KiB", "16MiB" or "1GiB" (K, M, G also work).
func ParseSize(s string) (int, error) {
	s = strings.TrimSpace(s)
	num, mult := s, 1
	for _, u := range []struct {
		suffix string
		mult   int
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}} {
		if strings.HasSuffix(s, u.suffix) {
			num, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("bad size %q (want e.g. 4096, 4KiB, 16MiB)", s)
	}
	if (n*mult)%4 != 0 {
		return 0, fmt.Errorf("size %q is not a whole number of float32s", s)
	}
	return n * mult, nil
}

// FormatSize prints bytes with a binary unit.
func FormatSize(n int) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return strconv.Itoa(n>>30) + "GiB"
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + "MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + "KiB"
	}
	return strconv.Itoa(n) + "B"
}
