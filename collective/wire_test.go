package collective

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gorun/gorun/reduce"
)

// wireBound is how far a float32 all-reduce over wire format w may be
// from the exact sum of in (per element, over n ranks): the sum is
// rounded to the format once per ring step (n-1 reduce-scatter steps and
// the owner's rounding before the all-gather), each rounding off by at
// most u of a partial sum no bigger than the sum of magnitudes, and
// float32 adds its own 2^-24 each; 1/8 of slack, and fp16's subnormal
// spacing for values near 0.
func wireBound(w Wire, n int, absSum float64) float64 {
	u := math.Ldexp(1, -11)
	if w == WireBF16 {
		u = math.Ldexp(1, -8)
	}
	return float64(n)*(u+math.Ldexp(1, -24))*absSum*1.125 + float64(n)*math.Ldexp(1, -25)
}

// hubWireBound is wireBound for the hub strategy, which rounds less: each
// rank's part is rounded to the format once, the hub sums in float32 and
// rounds the result once, so the error is at most u of the magnitudes
// twice plus float32's adds, and half of fp16's subnormal spacing per
// rounding.
func hubWireBound(w Wire, n int, absSum float64) float64 {
	u := math.Ldexp(1, -11)
	if w == WireBF16 {
		u = math.Ldexp(1, -8)
	}
	return (2*u+float64(n)*math.Ldexp(1, -24))*absSum*1.125 + float64(n+1)*math.Ldexp(1, -25)
}

// TestAllReduceWire: float32 all-reduces with Config.Wire (every size
// from empty to above the small-buffer limit, ranks 1-9, ring, halving
// and node-aware plans, and the hub strategy with one and three hubs)
// and with AllReduceWire end bit for bit the same on every rank and
// within wireBound (hubWireBound) of a float64 reference; sums,
// averages, maxima and minima alike. Other element types with Config.Wire are exact (they
// never travel in a lossy format).
func TestAllReduceWire(t *testing.T) {
	rng := rand.New(rand.NewPCG(36, 2))
	type plan struct {
		algo Algorithm
		hubs int // > 0: the hub strategy with this many colocated hubs
	}
	for _, w := range []Wire{WireFP16, WireBF16} {
		for _, pl := range []plan{{algo: Auto}, {algo: Ring}, {algo: Halving}, {hubs: 1}, {hubs: 3}} {
			for size := 1; size <= 9; size++ {
				for _, n := range []int{0, 1, 2, size - 1, 7, 97, 1009, 4099} {
					if n < 0 {
						continue
					}
					for _, op := range []Op{Sum, Avg, Max, Min} {
						cfg := DefaultConfig()
						cfg.Algorithm, cfg.SmallBytes, cfg.SegmentBytes, cfg.Wire = pl.algo, 256, 1024, w
						bound := wireBound
						if pl.hubs > 0 {
							cfg.Strategy, cfg.ColocatedHubs, cfg.HubPartitionBytes = StrategyHub, min(pl.hubs, size), 1024
							bound = hubWireBound
						}
						in := make([][]float32, size)
						exact := make([]float64, n)
						abs := make([]float64, n)
						for r := range in {
							in[r] = make([]float32, n)
							for i := range in[r] {
								v := float32(rng.NormFloat64() * 100)
								in[r][i] = v
								switch {
								case op == Max && r > 0:
									exact[i] = math.Max(exact[i], float64(v))
								case op == Min && r > 0:
									exact[i] = math.Min(exact[i], float64(v))
								case op == Max || op == Min:
									exact[i] = float64(v)
								default:
									exact[i] += float64(v)
								}
								abs[i] += math.Abs(float64(v))
							}
						}
						got := make([][]float32, size)
						perCall := n%2 == 1 // half the cases through AllReduceWire, the rest through Config.Wire
						errs := onAll(t, size, cfg, func(c *Comm) error {
							if pl.hubs > 0 && c.Strategy() != StrategyHub {
								return fmt.Errorf("strategy %v, want the hub", c.Strategy())
							}
							got[c.Rank()] = append([]float32(nil), in[c.Rank()]...)
							if perCall {
								c.cfg.Wire = WireFull
								return AllReduceWire(context.Background(), c, got[c.Rank()], op, w)
							}
							return AllReduce(context.Background(), c, got[c.Rank()], op)
						})
						what := fmt.Sprintf("%v algo %d hubs %d size %d n %d %v per-call %v", w, pl.algo, pl.hubs, size, n, op, perCall)
						if err := errors.Join(errs...); err != nil {
							t.Fatalf("%s: %v", what, err)
						}
						div := 1.0
						if op == Avg {
							div = float64(size)
						}
						if op != Avg && n*4 > cfg.SmallBytes && (size > 1 || pl.hubs > 0) {
							// The wire was used: every sum is a value of
							// the format.
							rounded := append([]float32(nil), got[0]...)
							if err := reduce.Round(w, rounded); err != nil {
								t.Fatal(err)
							}
							for i := range rounded {
								if math.Float32bits(rounded[i]) != math.Float32bits(got[0][i]) {
									t.Fatalf("%s: element %d is %v, not a value of %v: the wire format was not used", what, i, got[0][i], w)
								}
							}
						}
						for i := range n {
							for r := 1; r < size; r++ {
								if math.Float32bits(got[r][i]) != math.Float32bits(got[0][i]) {
									t.Fatalf("%s: element %d: rank %d has %v, rank 0 %v", what, i, r, got[r][i], got[0][i])
								}
							}
							if d, b := math.Abs(float64(got[0][i])-exact[i]/div), bound(w, size, abs[i])/div; d > b {
								t.Fatalf("%s: element %d: %v, exact %v: off by %g, bound %g", what, i, got[0][i], exact[i]/div, d, b)
							}
						}
					}
				}
			}
		}
	}
	// Integers under Config.Wire: exact, as without it.
	cfg := DefaultConfig()
	cfg.Wire, cfg.SmallBytes = WireBF16, 256
	in := [][]int32{{1 << 30, 3, -7}, {5, 1 << 29, 11}, {-2, 9, 1 << 28}}
	want := reference(in, Sum)
	for _, n := range []int{3} {
		got := make([][]int32, n)
		errs := onAll(t, n, cfg, func(c *Comm) error {
			got[c.Rank()] = append([]int32(nil), in[c.Rank()]...)
			return AllReduce(context.Background(), c, got[c.Rank()], Sum)
		})
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		checkAllReduced(t, "int32 with Config.Wire", got, want)
	}
}

// TestAllReduceWireSaturates: fp16 sums beyond its range saturate at
// ±65504 rather than turning into infinities.
func TestAllReduceWireSaturates(t *testing.T) {
	for _, hub := range []bool{false, true} {
		cfg := DefaultConfig()
		cfg.SmallBytes = 16
		if hub {
			cfg.Strategy, cfg.ColocatedHubs = StrategyHub, 2
		}
		const n = 64
		got := make([][]float32, 3)
		errs := onAll(t, 3, cfg, func(c *Comm) error {
			buf := make([]float32, n)
			for i := range buf {
				buf[i] = 40000 * float32(1-2*(i%2))
			}
			got[c.Rank()] = buf
			return AllReduceWire(context.Background(), c, buf, Sum, WireFP16)
		})
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("hub %v: %v", hub, err)
		}
		for r := range got {
			for i, v := range got[r] {
				if want := float32(65504 * (1 - 2*(i%2))); v != want {
					t.Fatalf("hub %v: rank %d element %d: %v, want %v", hub, r, i, v, want)
				}
			}
		}
	}
}

// TestWireMismatch: ranks that disagree on the wire format fail, naming
// it, and none hangs; a bad format in the environment or the Config is
// refused up front.
func TestWireMismatch(t *testing.T) {
	for _, hub := range []bool{false, true} {
		for _, other := range []Wire{WireBF16, WireFull} {
			// 300 000 elements: several partitions per hub, which ranks
			// of different formats cut differently.
			for _, n := range []int{1000, 300_000} {
				cfg := DefaultConfig()
				cfg.SmallBytes = 16
				if hub {
					cfg.Strategy, cfg.ColocatedHubs = StrategyHub, 2
				}
				errs := onAll(t, 3, cfg, func(c *Comm) error {
					w := WireFP16
					if c.Rank() == 1 {
						w = other
					}
					return AllReduceWire(context.Background(), c, make([]float32, n), Sum, w)
				})
				named := false
				for r, err := range errs {
					if err == nil {
						t.Fatalf("hub %v, rank 1 %v, n %d: rank %d succeeded with a wire format its peers do not share", hub, other, n, r)
					}
					named = named || contains(err.Error(), "wire format")
				}
				if !named {
					t.Fatalf("hub %v, rank 1 %v, n %d: no rank named the wire format: %v", hub, other, n, errs)
				}
			}
		}
	}
	bad := DefaultConfig()
	bad.Size, bad.Wire = 1, reduce.Wire(9)
	if err := bad.validate(); err == nil || !contains(err.Error(), "wire format 9") {
		t.Fatalf("Config.Wire 9: %v", err)
	}
	env := map[string]string{
		"GORUN_RANK": "0", "GORUN_SIZE": "1", "GORUN_JOB_ID": "abc", "GORUN_JOB_SECRET": "0123456789abcdef0123",
		"GORUN_PEERS": "127.0.0.1:1000", "GORUN_ADDR": "127.0.0.1", "GORUN_GOSSIP_PORT": "1000", "GORUN_WIRE": "bf16",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	if got, err := ConfigFromEnv(lookup); err != nil || got.Wire != WireBF16 {
		t.Fatalf("GORUN_WIRE=bf16: %v %v", got.Wire, err)
	}
	env["GORUN_WIRE"] = "fp8"
	if _, err := ConfigFromEnv(lookup); err == nil || !contains(err.Error(), "GORUN_WIRE") {
		t.Fatalf("GORUN_WIRE=fp8: %v", err)
	}
}
