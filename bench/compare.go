package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/gorun/gorun/collective"
	"github.com/gorun/gorun/ps"
)

// Pair is one size measured through the ring and through ParamHub on the
// same job, with the hub traffic the cost model predicts.
type Pair struct {
	Bytes     int
	Ring, Hub Row
	// Loads is the model's bytes of the buffer on each hub, Parts its
	// partitions on each hub, and Part the largest partition's bytes.
	Loads []int64
	Parts []int
	Part  int64
	// HubBytes is the payload bytes (in plus out) through each hub per
	// all-reduce, summed over ranks.
	HubBytes []int64
}

// Busiest is the largest per-hub traffic of p.
func (p Pair) Busiest() int64 { return slices.Max(append([]int64{0}, p.HubBytes...)) }

// Lmax is the model's bytes of the buffer on the busiest hub.
func (p Pair) Lmax() int64 { return slices.Max(append([]int64{0}, p.Loads...)) }

// Model is p's extended cost model (see Model), on n ranks.
func (p Pair) Model(n int) Model {
	m := Model{Ranks: n, Bytes: int64(p.Bytes), Lmax: p.Lmax(), Part: p.Part}
	for h, l := range p.Loads {
		if l == m.Lmax && h < len(p.Parts) {
			m.Parts = max(m.Parts, p.Parts[h])
		}
	}
	return m
}

// LinkRate is the link goodput the extended model assumes, in bytes/s:
// the ring's busbw in its fastest batch (the median's on a Row without a
// minimum), so that a batch the machine slowed down does not slow the
// model too.
func (p Pair) LinkRate(n int) float64 {
	if p.Ring.Min > 0 {
		return BusBW(p.Bytes, p.Ring.Min, n)
	}
	return p.Ring.BusBW
}

// HubLoads is how many bytes of an s-byte float32 buffer each of k hubs
// handles when it is cut into partitions of at most part bytes, cut and
// placed as ParamHub's default client config does (its spread: hubs
// reached through shared memory).
func HubLoads(s, part, k int) []int64 {
	loads, _, _ := HubPlan(s, k, DefaultRule(part))
	return loads
}

// DefaultRule is ParamHub's default client config's rule for rounds, with
// partitions of at most part bytes.
func DefaultRule(part int) ps.RoundRule {
	cc := ps.DefaultClientConfig()
	return ps.RoundRule{Limit: part, PerHub: cc.RoundPartitionsPerHub, Spread: cc.RoundSpreadBytes}
}

// HubPlan is how a round of an s-byte float32 buffer is cut under rule
// and placed on k hubs: the bytes and partitions on each hub, and the
// largest partition's bytes.
func HubPlan(s, k int, rule ps.RoundRule) (loads []int64, parts []int, largest int64) {
	loads, parts = make([]int64, k), make([]int, k)
	for _, p := range ps.RoundPartitions(ps.RoundReduce, s/4, 4, 1, k, rule) {
		loads[p.Hub] += int64(4 * p.Len)
		parts[p.Hub]++
		largest = max(largest, int64(4*p.Len))
	}
	return loads, parts, largest
}

// ModelRatio is the time of a hub all-reduce over a ring all-reduce that
// a bandwidth-bound cost model predicts for n ranks, one per host, with
// hub h beside rank h and lmax the bytes of the s-byte buffer on the
// busiest hub: that host's link carries its rank's traffic to the other
// hubs, s-lmax, plus its hub's to the other ranks, (n-1)·lmax, against the
// ring's 2(n-1)/n·s. With lmax = s/k it is n(n+k-2)/(2k(n-1)): n/2 for
// one hub and 1 for k = n. Model.Ratio adds what a pipeline of partitions
// costs on top.
func ModelRatio(n int, s, lmax int64) float64 {
	if n < 2 || s <= 0 {
		return 1
	}
	return float64(s+int64(n-2)*lmax) * float64(n) / (2 * float64(n-1) * float64(s))
}

// ModelHubBytes is the payload in and out of the busiest hub per
// all-reduce on n ranks: n·lmax each way.
func ModelHubBytes(n int, lmax int64) int64 { return 2 * int64(n) * lmax }

// The model's costs that are not bandwidth, measured on the test hosts
// (results/hub/2026-11-24-da098e7.md, section 3 and 5).
const (
	// ModelPartitionCost is a hub's cost per partition (events, frames,
	// system calls): 64 against 256 KiB partitions at one hub.
	ModelPartitionCost = 100 * time.Microsecond
	// ModelReducePerByte is the hub's fold, in ns per byte of a part
	// (reduce.Bytes, float32 sum, uncontended).
	ModelReducePerByte = 0.06
)

// Model is the cost model of a hub all-reduce of Bytes on Ranks ranks,
// one per host, with hub h beside rank h, against a ring all-reduce of
// the same buffer, at a link goodput of bw bytes/s each way:
//
//	ring: 2(n-1)/n·S/bw
//	hub:  max(S+(n-2)L, (n-1)(L+p))/bw + P·δ + (n-1)·p·c
//
// with L the bytes on the busiest hub, p its largest partition and P its
// partitions. The first term is ModelRatio's: the busiest hub's host link
// carries its rank's pushes to the other hubs and its hub's results, S-L
// and (n-1)L; and the hub's in and out links each carry (n-1)L, offset by
// one partition's fan-in (a hub answers a partition only when every part
// of it is in). P·δ is the hub's cost per partition (ModelPartitionCost)
// and (n-1)·p·c the last partition's fold (ModelReducePerByte). It leaves
// out what an implementation can avoid: pushes that share a link unfairly,
// a hub that waits for another.
type Model struct {
	Ranks int
	Bytes int64 // S
	Lmax  int64 // L
	Part  int64 // p
	Parts int   // P
}

// RingTime is the ring's time at bw bytes/s.
func (m Model) RingTime(bw float64) time.Duration {
	if m.Ranks < 2 || bw <= 0 {
		return 0
	}
	return time.Duration(2 * float64(m.Ranks-1) / float64(m.Ranks) * float64(m.Bytes) / bw * 1e9)
}

// HubTime is the hubs' time at bw bytes/s.
func (m Model) HubTime(bw float64) time.Duration {
	if m.Ranks < 2 || bw <= 0 {
		return 0
	}
	n := int64(m.Ranks)
	wire := max(m.Bytes+(n-2)*m.Lmax, (n-1)*(m.Lmax+m.Part))
	return time.Duration(float64(wire)/bw*1e9) + time.Duration(m.Parts)*ModelPartitionCost +
		time.Duration(float64((n-1)*m.Part)*ModelReducePerByte)
}

// Ratio is HubTime over RingTime at bw bytes/s (1 for one rank).
func (m Model) Ratio(bw float64) float64 {
	r := m.RingTime(bw)
	if r <= 0 {
		return 1
	}
	return float64(m.HubTime(bw)) / float64(r)
}

// Compare times float32 Sum all-reduces of each size through the ring
// and then through the hubs, on a Comm that joined with the hub strategy,
// and counts the bytes through each hub. Every rank calls it with the same
// arguments and gets the same pairs. It leaves the Comm on the ring. The
// model cuts rounds as the Comm's hub client does.
func Compare(ctx context.Context, c *collective.Comm, sizes []int, target time.Duration) ([]Pair, error) {
	if err := c.SetStrategy(collective.StrategyHub); err != nil {
		return nil, err
	}
	defer c.SetStrategy(collective.StrategyRing)
	var out []Pair
	for _, bytes := range sizes {
		p := Pair{Bytes: bytes}
		for _, s := range []string{collective.StrategyRing, collective.StrategyHub} {
			if err := c.SetStrategy(s); err != nil {
				return nil, err
			}
			rows, err := Sweep(ctx, c, []int{bytes}, target)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", s, FormatSize(bytes), err)
			}
			if s == collective.StrategyRing {
				p.Ring = rows[0]
			} else {
				p.Hub = rows[0]
			}
		}
		var err error
		if p.HubBytes, err = hubTraffic(ctx, c, bytes); err != nil {
			return nil, err
		}
		// SetStrategy(hub) succeeded: the Comm has its hub client.
		p.Loads, p.Parts, p.Part = HubPlan(bytes, len(p.HubBytes), c.Hub().RoundRule())
		out = append(out, p)
	}
	return out, nil
}

// hubTraffic counts the payload bytes through each hub over a few
// all-reduces of size bytes, per all-reduce, summed over ranks.
func hubTraffic(ctx context.Context, c *collective.Comm, bytes int) ([]int64, error) {
	const reps = 3
	if err := c.SetStrategy(collective.StrategyRing); err != nil {
		return nil, err
	}
	if err := c.Barrier(ctx); err != nil {
		return nil, err
	}
	s0, r0 := c.HubBytes()
	if err := c.SetStrategy(collective.StrategyHub); err != nil {
		return nil, err
	}
	buf := make([]float32, bytes/4)
	for range reps {
		if err := collective.AllReduce(ctx, c, buf, collective.Sum); err != nil {
			return nil, err
		}
	}
	s1, r1 := c.HubBytes()
	per := make([]int64, len(s0))
	for h := range per {
		per[h] = (s1[h] - s0[h] + r1[h] - r0[h]) / reps
	}
	if err := c.SetStrategy(collective.StrategyRing); err != nil {
		return nil, err
	}
	if err := collective.AllReduce(ctx, c, per, collective.Sum); err != nil {
		return nil, err
	}
	return per, nil
}

// WriteComparison prints pairs as a table, with the cost model beside the
// measurements, and a bar chart of the times. The extended model's link
// rate is Pair.LinkRate, the ring's busbw in its fastest batch: its hub
// time is what the hubs would take on the links the ring saw.
func WriteComparison(w io.Writer, pairs []Pair, ranks int) error {
	if len(pairs) == 0 {
		return errors.New("bench: nothing measured")
	}
	k := len(pairs[0].HubBytes)
	var b strings.Builder
	fmt.Fprintf(&b, "# ring vs ParamHub: %d ranks, %d hub(s); float32 sum; median time per all-reduce\n", ranks, k)
	fmt.Fprintf(&b, "%10s %12s %10s %12s %10s %10s %10s %14s %14s %9s %12s %10s %10s\n", "size", "ring(us)", "ring busbw", "hub(us)", "hub busbw", "hub/ring", "bw model", "busiest hub B", "model 2nL",
		"parts", "model(us)", "model", "hub/model")
	for _, p := range pairs {
		ratio := 0.0
		if p.Ring.Median > 0 {
			ratio = float64(p.Hub.Median) / float64(p.Ring.Median)
		}
		m, bw := p.Model(ranks), p.LinkRate(ranks)
		mt := m.HubTime(bw)
		vs := 0.0
		if mt > 0 {
			vs = float64(p.Hub.Median) / float64(mt)
		}
		fmt.Fprintf(&b, "%10s %12.1f %10.3f %12.1f %10.3f %10.2f %10.2f %14d %14d %9s %12.1f %10.2f %10.2f\n", FormatSize(p.Bytes),
			us(p.Ring.Median), p.Ring.BusBW/1e9, us(p.Hub.Median), p.Hub.BusBW/1e9, ratio, ModelRatio(ranks, int64(p.Bytes), p.Lmax()),
			p.Busiest(), ModelHubBytes(ranks, p.Lmax()), fmt.Sprintf("%dx%s", m.Parts, FormatSize(int(m.Part))), us(mt), m.Ratio(bw), vs)
	}
	b.WriteString("# busbw = algbw*2(n-1)/n for both; bw model = (S+(n-2)L)n/(2(n-1)S), bandwidth-bound, one rank per host, hub h beside rank h,\n")
	b.WriteString("#   L = bytes on the busiest hub (S/K when the partitions spread evenly: n(n+K-2)/(2K(n-1)), n/2 for one hub)\n")
	b.WriteString("# busiest hub B = payload bytes in+out of the busiest hub per all-reduce (model: 2nL)\n")
	b.WriteString("# parts = P partitions of p bytes on the busiest hub; model(us) = max(S+(n-2)L, (n-1)(L+p))/B + P*0.1ms + (n-1)p*0.06ns/B,\n")
	b.WriteString("#   B = the ring's busbw in its fastest batch; model = the model's hub/ring at B; hub/model = hub(us)/model(us)\n\n")
	longest := time.Duration(0)
	for _, p := range pairs {
		longest = max(longest, p.Ring.Median, p.Hub.Median)
	}
	const width = 50
	bar := func(d time.Duration) string {
		n := 0
		if longest > 0 {
			n = int(float64(width) * float64(d) / float64(longest))
		}
		return strings.Repeat("#", max(n, 1))
	}
	b.WriteString("# time per all-reduce (longest bar = " + longest.Round(time.Microsecond).String() + ")\n")
	for _, p := range pairs {
		fmt.Fprintf(&b, "%10s ring |%s\n%10s hub  |%s\n", FormatSize(p.Bytes), bar(p.Ring.Median), "", bar(p.Hub.Median))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteCSV writes pairs as CSV, one row per size.
func WriteCSV(w io.Writer, pairs []Pair, ranks int) error {
	var b strings.Builder
	b.WriteString("bytes,ranks,hubs,ring_us,ring_busbw,hub_us,hub_busbw,hub_over_ring,model_ratio,busiest_hub_bytes,model_hub_bytes,partitions,partition_bytes,model_hub_us,model_ext_ratio\n")
	for _, p := range pairs {
		k := len(p.HubBytes)
		m, bw := p.Model(ranks), p.LinkRate(ranks)
		fmt.Fprintf(&b, "%d,%d,%d,%.1f,%.4g,%.1f,%.4g,%.3f,%.3f,%d,%d,%d,%d,%.1f,%.3f\n", p.Bytes, ranks, k, us(p.Ring.Median), p.Ring.BusBW,
			us(p.Hub.Median), p.Hub.BusBW, float64(p.Hub.Median)/float64(max(p.Ring.Median, 1)), ModelRatio(ranks, int64(p.Bytes), p.Lmax()), p.Busiest(), ModelHubBytes(ranks, p.Lmax()),
			m.Parts, m.Part, us(m.HubTime(bw)), m.Ratio(bw))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
