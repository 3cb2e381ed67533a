package ring

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gorun/gorun/reduce"
	"github.com/gorun/gorun/transport"
	"github.com/gorun/gorun/transport/mem"
)

var wires = []reduce.Wire{reduce.WireFP16, reduce.WireBF16}

// unitRoundoff is half an ulp at 1 of w, relative: the largest relative
// error of one rounding of a normal value to w.
func unitRoundoff(w reduce.Wire) float64 {
	if w == reduce.WireFP16 {
		return 0x1p-11 // 10 mantissa bits
	}
	return 0x1p-8 // bf16: 7 mantissa bits
}

func wireOpts(n, segBytes int, op reduce.Op, w reduce.Wire) Options {
	o := opts(n, segBytes)
	o.Header.DType, o.Header.Op, o.Wire = reduce.Float32, uint8(op), w
	return o
}

func randFloats(rng *rand.Rand, n int, scale float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = (rng.Float32()*2 - 1) * scale
	}
	return v
}

// rounded reports whether every element of v is a value of w.
func rounded(w reduce.Wire, v []float32) bool {
	c := append([]float32(nil), v...)
	_ = reduce.Round(w, c)
	return equalBits(c, v)
}

// TestWireAllReduce: the ring all-reduce of float32 sums sent as fp16 or
// bf16, for 1-9 ranks and lengths 0, 1, primes, fewer than ranks and
// 100003, through the DecodeAdd path (Sum) and the generic fold path (a
// Sum fold under an Op the executor does not know as a sum). Every rank
// ends with the same bits, all values of the wire format, and within the
// bound below of the float64 sum.
//
// The bound: a chunk's sum over N ranks is rounded to the wire format N
// times (the first rank's encoded input, each of the N-2 forwarded
// partial sums, and the owner's Round of the total), and every partial sum
// has magnitude at most S = sum_r |x_r| (give or take the errors so far).
// One rounding errs by at most u*|value| with u = 2^-11 for fp16 and 2^-8
// for bf16, plus, for fp16's subnormals, 2^-25 absolute; the N-1 float32
// additions err by at most 2^-24*S each. So
//
//	|got - sum| <= N*(u + 2^-24)*S*(1+1/8) + N*2^-25,
//
// the 1/8 being slack for the compounding of the errors.
func TestWireAllReduce(t *testing.T) {
	rng := rand.New(rand.NewPCG(36, 2))
	ctx := context.Background()
	lens := append(append([]int(nil), sizes...), 100003)
	for _, w := range wires {
		u := unitRoundoff(w)
		for size := 1; size <= 9; size++ {
			for _, n := range lens {
				for _, op := range []reduce.Op{reduce.Sum, 0} {
					if op == 0 && n > 1009 {
						continue
					}
					segBytes := 6
					if n > 1009 {
						segBytes = 4 << 10
					}
					in := make([][]float32, size)
					for r := range in {
						in[r] = randFloats(rng, n, 1)
					}
					bufs := make([][]float32, size)
					errs, _ := runAll(size, func(tr *mem.Transport) error {
						r := tr.Rank()
						bufs[r] = append([]float32(nil), in[r]...)
						return AllReduce(ctx, tr, bufs[r], reduce.Func[float32](reduce.Sum), wireOpts(n, segBytes, op, w))
					})
					for r := range size {
						if errs[r] != nil {
							t.Fatalf("%v size %d n %d rank %d: %v", w, size, n, r, errs[r])
						}
						if !equalBits(bufs[r], bufs[0]) {
							t.Fatalf("%v size %d n %d: rank %d's bits differ from rank 0's", w, size, n, r)
						}
					}
					if size > 1 && !rounded(w, bufs[0]) {
						t.Fatalf("%v size %d n %d: result holds values that are not %v", w, size, n, w)
					}
					N := float64(size)
					for i := range n {
						var exact, abs float64
						for r := range size {
							exact += float64(in[r][i])
							abs += math.Abs(float64(in[r][i]))
						}
						bound := N*(u+0x1p-24)*abs*(1+1.0/8) + N*0x1p-25
						if d := math.Abs(float64(bufs[0][i]) - exact); d > bound {
							t.Fatalf("%v size %d n %d [%d]: got %g, want %g within %g (off by %g)", w, size, n, i, bufs[0][i], exact, bound, d)
						}
					}
				}
			}
		}
	}
}

// TestWireReduceScatterAllGather: the halves on their own. After the
// reduce-scatter a rank's chunk is within the bound of TestWireAllReduce;
// the all-gather rounds each rank's own block in place and hands every
// rank the same bits: each rank's input rounded to the wire format.
func TestWireReduceScatterAllGather(t *testing.T) {
	rng := rand.New(rand.NewPCG(36, 3))
	ctx := context.Background()
	for _, w := range wires {
		for size := 1; size <= 9; size++ {
			for _, n := range sizes {
				in := make([][]float32, size)
				for r := range in {
					in[r] = randFloats(rng, n, 100)
				}
				got := make([][]float32, size)
				errs, _ := runAll(size, func(tr *mem.Transport) error {
					r := tr.Rank()
					recv := make([]float32, n*size)
					copy(recv[r*n:], in[r])
					got[r] = recv
					return AllGather(ctx, tr, recv, wireOpts(n, 6, 0, w))
				})
				var want []float32
				for r := range size {
					want = append(want, in[r]...)
				}
				if size > 1 {
					_ = reduce.Round(w, want)
				}
				for r := range size {
					if errs[r] != nil {
						t.Fatal(errs[r])
					}
					if !equalBits(got[r], want) {
						t.Fatalf("%v all-gather size %d n %d rank %d: got %v, want %v", w, size, n, r, got[r], want)
					}
				}
				spans := Chunks(n, size)
				errs, _ = runAll(size, func(tr *mem.Transport) error {
					r := tr.Rank()
					buf := append([]float32(nil), in[r]...)
					s, err := ReduceScatter(ctx, tr, buf, reduce.Func[float32](reduce.Sum), wireOpts(n, 6, reduce.Sum, w))
					got[r] = buf[s.Off : s.Off+s.Len]
					return err
				})
				for r := range size {
					if errs[r] != nil {
						t.Fatal(errs[r])
					}
					for i, v := range got[r] {
						var exact, abs float64
						for q := range size {
							exact += float64(in[q][spans[r].Off+i])
							abs += math.Abs(float64(in[q][spans[r].Off+i]))
						}
						bound := float64(size)*(unitRoundoff(w)+0x1p-24)*abs*(1+1.0/8) + float64(size)*0x1p-25
						if math.Abs(float64(v)-exact) > bound {
							t.Fatalf("%v reduce-scatter size %d n %d rank %d [%d]: got %g, want %g within %g", w, size, n, r, i, v, exact, bound)
						}
					}
				}
			}
		}
	}
}

// TestWireSaturates: fp16 sums and inputs beyond 65504 come out as ±65504
// on every rank, never as infinities or NaN.
func TestWireSaturates(t *testing.T) {
	ctx := context.Background()
	for size := 2; size <= 5; size++ {
		const n = 13
		in := make([][]float32, size)
		for r := range in {
			in[r] = make([]float32, n)
			for i := range in[r] {
				mag := []float32{40000, 65504, 1e6, 1e30, math.MaxFloat32}[(i+r)%5]
				if i%2 == 1 {
					mag = -mag
				}
				in[r][i] = mag
			}
		}
		bufs := make([][]float32, size)
		errs, _ := runAll(size, func(tr *mem.Transport) error {
			r := tr.Rank()
			bufs[r] = append([]float32(nil), in[r]...)
			return AllReduce(ctx, tr, bufs[r], reduce.Func[float32](reduce.Sum), wireOpts(n, 6, reduce.Sum, reduce.WireFP16))
		})
		for r := range size {
			if errs[r] != nil {
				t.Fatal(errs[r])
			}
			for i, v := range bufs[r] {
				want := float32(65504)
				if i%2 == 1 {
					want = -want
				}
				if v != want {
					t.Fatalf("size %d rank %d [%d]: got %g, want %g", size, r, i, v, want)
				}
			}
		}
	}
}

// TestWireMinMax: max and min only pick values, so with a wire format the
// result is exact up to the rounding of the inputs: the extreme of the
// rounded inputs (which is the rounded extreme), on every rank.
func TestWireMinMax(t *testing.T) {
	rng := rand.New(rand.NewPCG(36, 4))
	ctx := context.Background()
	for _, w := range wires {
		for _, op := range []reduce.Op{reduce.Max, reduce.Min} {
			for size := 2; size <= 9; size++ {
				for _, n := range sizes {
					in := make([][]float32, size)
					for r := range in {
						in[r] = randFloats(rng, n, 1000)
					}
					want := append([]float32(nil), in[0]...)
					for r := 1; r < size; r++ {
						reduce.Func[float32](op)(want, in[r])
					}
					_ = reduce.Round(w, want)
					bufs := make([][]float32, size)
					errs, _ := runAll(size, func(tr *mem.Transport) error {
						r := tr.Rank()
						bufs[r] = append([]float32(nil), in[r]...)
						return AllReduce(ctx, tr, bufs[r], reduce.Func[float32](op), wireOpts(n, 6, op, w))
					})
					for r := range size {
						if errs[r] != nil {
							t.Fatal(errs[r])
						}
						if !equalBits(bufs[r], want) {
							t.Fatalf("%v %v size %d n %d rank %d: got %v, want %v", w, op, size, n, r, bufs[r], want)
						}
					}
				}
			}
		}
	}
}

// TestWireNeedsFloat32: an int32 or float64 buffer with a 2-byte wire
// format fails on every rank with ErrWireType before any frame is sent,
// for every executor built on Run; so does an unknown format.
func TestWireNeedsFloat32(t *testing.T) {
	ctx := context.Background()
	for size := 1; size <= 4; size++ {
		for _, w := range []reduce.Wire{reduce.WireFP16, reduce.WireBF16, 7} {
			errs, nw := runAll(size, func(tr *mem.Transport) error {
				o := wireOpts(10, 6, reduce.Sum, w)
				o.Header.DType = reduce.Int32
				return errors.Join(
					AllReduce(ctx, tr, make([]int32, 10), reduce.Func[int32](reduce.Sum), o),
					AllGather(ctx, tr, make([]int32, 10*tr.Size()), o),
					AllReduce(ctx, tr, make([]float64, 10), reduce.Func[float64](reduce.Sum), o),
				)
			})
			for r, err := range errs {
				if w.Valid() && (!errors.Is(err, ErrWireType) || !strings.Contains(err.Error(), "int32") || !strings.Contains(err.Error(), "float64")) {
					t.Fatalf("%v size %d rank %d: got %v, want ErrWireType naming int32 and float64", w, size, r, err)
				}
				if !w.Valid() && (err == nil || !strings.Contains(err.Error(), "unknown wire format")) {
					t.Fatalf("%v size %d rank %d: got %v, want unknown wire format", w, size, r, err)
				}
				if f := nw.Frames(r); f != 0 {
					t.Fatalf("%v size %d rank %d sent %d frames", w, size, r, f)
				}
			}
		}
	}
}

// TestWireMismatch: one rank runs with another wire format than the rest
// (full against fp16, fp16 against bf16, bf16 against full). Its
// neighbours find it at the first frame and name the wire format (the
// other ranks may learn of it first through an abort); every rank fails
// with ErrSizeMismatch, none hangs.
func TestWireMismatch(t *testing.T) {
	pairs := [][2]reduce.Wire{{reduce.WireFull, reduce.WireFP16}, {reduce.WireFP16, reduce.WireBF16}, {reduce.WireBF16, reduce.WireFull}}
	for size := 2; size <= 5; size++ {
		for _, p := range pairs {
			for _, n := range []int{0, 1, 10} {
				odd := size / 2
				errs := runGuarded(t, size, func(ctx context.Context, tr *mem.Transport) error {
					w := p[0]
					if tr.Rank() == odd {
						w = p[1]
					}
					return AllReduce(ctx, tr, make([]float32, n), reduce.Func[float32](reduce.Sum), wireOpts(n, 6, reduce.Sum, w))
				})
				if err := checkMismatch(errs, -1); err != nil {
					t.Fatalf("size %d %v/%v n %d: %v", size, p[0], p[1], n, err)
				}
				for r, err := range errs {
					var me *transport.MismatchError
					if !errors.As(err, &me) {
						continue
					}
					if me.What != "wire format" || (me.Mine != p[0] || me.Got != p[1]) && (me.Mine != p[1] || me.Got != p[0]) {
						t.Fatalf("size %d %v/%v n %d: rank %d: %v, want a wire format mismatch", size, p[0], p[1], n, r, err)
					}
				}
			}
		}
	}
}

// TestWireDTypeFits: wireDType packs the element type into four bits.
func TestWireDTypeFits(t *testing.T) {
	for _, d := range []uint8{reduce.Float32, reduce.Float64, reduce.Int32, reduce.Int64, reduce.Int8, reduce.Uint8} {
		if d > 0x0f {
			t.Fatalf("dtype code %d does not fit in four bits", d)
		}
		if wireDType(d, reduce.WireFull) != d {
			t.Fatalf("wireDType(%d, full) = %d", d, wireDType(d, reduce.WireFull))
		}
	}
}

// TestWireHierarchical: the node-aware all-reduce with a wire format (its
// cross-host stage the ring or, when HalvingWins, halving at full
// precision) still hands every rank the same bits, values of the wire
// format, within TestWireAllReduce's bound for m+H roundings (m-1 on the
// host, at most H across hosts, one for the owner).
func TestWireHierarchical(t *testing.T) {
	rng := rand.New(rand.NewPCG(36, 5))
	ctx := context.Background()
	for _, w := range wires {
		for _, hm := range [][2]int{{2, 2}, {2, 3}, {3, 2}, {3, 3}} {
			nh, m := hm[0], hm[1]
			size := nh * m
			hosts := make([][]int, nh)
			for h := range hosts {
				for i := range m {
					hosts[h] = append(hosts[h], h*m+i)
				}
			}
			for _, n := range append(append([]int(nil), sizes...), 20011) {
				in := make([][]float32, size)
				for r := range in {
					in[r] = randFloats(rng, n, 1)
				}
				bufs := make([][]float32, size)
				errs, _ := runAll(size, func(tr *mem.Transport) error {
					r := tr.Rank()
					h, i := r/m, r%m
					local, err := NewGroup(tr, hosts[h])
					if err != nil {
						return err
					}
					var peers []int
					for _, hr := range hosts {
						peers = append(peers, hr[i])
					}
					cross, err := NewGroup(tr, peers)
					if err != nil {
						return err
					}
					bufs[r] = append([]float32(nil), in[r]...)
					return Hierarchical(ctx, Tiers{Local: local, Cross: cross, Hosts: hosts}, bufs[r], reduce.Func[float32](reduce.Sum), wireOpts(n, 64, reduce.Sum, w))
				})
				for r := range size {
					if errs[r] != nil {
						t.Fatalf("%v %dx%d n %d rank %d: %v", w, nh, m, n, r, errs[r])
					}
					if !equalBits(bufs[r], bufs[0]) {
						t.Fatalf("%v %dx%d n %d: rank %d's bits differ from rank 0's", w, nh, m, n, r)
					}
				}
				if !rounded(w, bufs[0]) {
					t.Fatalf("%v %dx%d n %d: result holds values that are not %v", w, nh, m, n, w)
				}
				k := float64(m + nh)
				for i := range n {
					var exact, abs float64
					for r := range size {
						exact += float64(in[r][i])
						abs += math.Abs(float64(in[r][i]))
					}
					bound := k*(unitRoundoff(w)+0x1p-24)*abs*(1+1.0/8) + k*0x1p-25
					if d := math.Abs(float64(bufs[0][i]) - exact); d > bound {
						t.Fatalf("%v %dx%d n %d [%d]: got %g, want %g within %g", w, nh, m, n, i, bufs[0][i], exact, bound)
					}
				}
			}
		}
	}
}

// TestWireKillMidRing: killMid's harness over a float32 all-reduce sent
// as fp16 or bf16: rank k dies at the m-th frame, every survivor returns
// an error naming it, none hangs.
func TestWireKillMidRing(t *testing.T) {
	for _, w := range wires {
		killMid(t, func(ctx context.Context, tr Transport, buf []int64, _ func(dst, src []int64), o Options) error {
			o.Header.DType, o.Header.Op, o.Wire = reduce.Float32, uint8(reduce.Sum), w
			return AllReduce(ctx, tr, make([]float32, len(buf)), reduce.Func[float32](reduce.Sum), o)
		})
	}
}
