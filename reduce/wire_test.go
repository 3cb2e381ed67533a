package reduce

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

// The reference codec: slow and exact, in float64, sharing nothing with the
// bit tricks of half.go. A format is described by its layout; a value's
// pattern is found by a binary search over the format's positive finite
// patterns, whose values increase with the pattern.

type format struct {
	wire     Wire
	mant     int    // mantissa bits
	bias     int    // exponent bias
	maxFin   uint16 // largest finite pattern
	qnan     uint16 // canonical quiet NaN
	relError float64
}

var (
	fp16 = format{wire: WireFP16, mant: 10, bias: 15, maxFin: 0x7bff, qnan: 0x7e00, relError: 0x1p-11}
	bf16 = format{wire: WireBF16, mant: 7, bias: 127, maxFin: 0x7f7f, qnan: 0x7fc0, relError: 0x1p-8}
)

func (f format) isNaN(p uint16) bool { return p&0x7fff > f.maxFin+1 }

// value is p's exact value (NaN for a NaN pattern).
func (f format) value(p uint16) float64 {
	e := int(p&0x7fff) >> f.mant
	m := float64(int(p) & (1<<f.mant - 1))
	var v float64
	switch {
	case e == 0:
		v = math.Ldexp(m, 1-f.bias-f.mant)
	case p&0x7fff == f.maxFin+1:
		v = math.Inf(1)
	case e == int(f.maxFin+1)>>f.mant:
		return math.NaN()
	default:
		v = math.Ldexp(m+math.Ldexp(1, f.mant), e-f.bias-f.mant)
	}
	if p&0x8000 != 0 {
		v = -v
	}
	return v
}

// encode is the nearest pattern to x, ties to the even pattern, saturating
// finite values at the largest finite one.
func (f format) encode(x float32) uint16 {
	var sign uint16
	if math.Signbit(float64(x)) {
		sign = 0x8000
	}
	ax := math.Abs(float64(x))
	switch {
	case math.IsNaN(ax):
		return f.qnan | sign
	case math.IsInf(ax, 1):
		return (f.maxFin + 1) | sign
	case ax >= f.value(f.maxFin):
		return f.maxFin | sign
	}
	p := uint16(sort.Search(int(f.maxFin)+1, func(i int) bool { return f.value(uint16(i)) >= ax }))
	if f.value(p) == ax {
		return p | sign
	}
	lo := p - 1
	dlo, dhi := ax-f.value(lo), f.value(p)-ax
	if dlo < dhi || dlo == dhi && lo%2 == 0 {
		return lo | sign
	}
	return p | sign
}

func enc(t testing.TB, w Wire, src []float32) []byte {
	t.Helper()
	b := make([]byte, len(src)*w.Size())
	if err := Encode(w, b, src); err != nil {
		t.Fatal(err)
	}
	return b
}

func dec(t testing.TB, w Wire, b []byte) []float32 {
	t.Helper()
	d := make([]float32, len(b)/w.Size())
	if err := Decode(w, d, b); err != nil {
		t.Fatal(err)
	}
	return d
}

func patterns(b []byte) []uint16 {
	p := make([]uint16, len(b)/2)
	for i := range p {
		p[i] = binary.LittleEndian.Uint16(b[2*i:])
	}
	return p
}

// TestWireExhaustive decodes every fp16 and bf16 pattern, checks the value
// against the reference, and encodes it back.
func TestWireExhaustive(t *testing.T) {
	for _, f := range []format{fp16, bf16} {
		all := make([]byte, 2<<16)
		for p := range 1 << 16 {
			binary.LittleEndian.PutUint16(all[2*p:], uint16(p))
		}
		got := dec(t, f.wire, all)
		back := patterns(enc(t, f.wire, got))
		for p := range 1 << 16 {
			p := uint16(p)
			v, want := got[p], f.value(p)
			if f.isNaN(p) {
				if wantBits := uint32(p&0x8000)<<16 | 0x7fc00000; math.Float32bits(v) != wantBits {
					t.Fatalf("%v %#04x: decoded %#08x, want quiet NaN %#08x", f.wire, p, math.Float32bits(v), wantBits)
				}
				if back[p] != f.qnan|p&0x8000 {
					t.Fatalf("%v %#04x: NaN re-encoded as %#04x", f.wire, p, back[p])
				}
				continue
			}
			if float64(v) != want || math.Signbit(float64(v)) != (p&0x8000 != 0) {
				t.Fatalf("%v %#04x: decoded %g, want %g", f.wire, p, v, want)
			}
			if back[p] != p {
				t.Fatalf("%v %#04x: decoded %g, re-encoded as %#04x", f.wire, p, v, back[p])
			}
		}
	}
}

// TestWireEdges pins the rules on values named one by one.
func TestWireEdges(t *testing.T) {
	bits := math.Float32frombits
	inf := float32(math.Inf(1))
	nan := float32(math.NaN())
	negNaN := bits(0xffc00000)
	cases := []struct {
		w    Wire
		x    float32
		want uint16
		why  string
	}{
		{WireFP16, 0, 0x0000, "zero"},
		{WireFP16, float32(math.Copysign(0, -1)), 0x8000, "-0"},
		{WireFP16, 0x1p-24, 0x0001, "smallest subnormal"},
		{WireFP16, -0x1p-24, 0x8001, "-smallest subnormal"},
		{WireFP16, 0x1p-25, 0x0000, "half the smallest subnormal: tie to even 0"},
		{WireFP16, -0x1p-25, 0x8000, "-half the smallest subnormal: -0"},
		{WireFP16, bits(math.Float32bits(0x1p-25) - 1), 0x0000, "just below half"},
		{WireFP16, bits(math.Float32bits(0x1p-25) + 1), 0x0001, "just above half"},
		{WireFP16, 3 * 0x1p-25, 0x0002, "1.5 subnormal steps: tie to even 2"},
		{WireFP16, 5 * 0x1p-25, 0x0002, "2.5 subnormal steps: tie to even 2"},
		{WireFP16, 0x1p-149, 0x0000, "float32's smallest subnormal"},
		{WireFP16, 0x1p-14, 0x0400, "smallest normal"},
		{WireFP16, 0x1p-14 - 0x1p-24, 0x03ff, "largest subnormal"},
		{WireFP16, 0x1p-14 - 0x1p-25, 0x0400, "tie between largest subnormal and smallest normal"},
		{WireFP16, 0x1p-14 - 0x1p-24 - 0x1p-26, 0x03ff, "just below the largest subnormal"},
		{WireFP16, 1, 0x3c00, "one"},
		{WireFP16, 1 + 0x1p-11, 0x3c00, "tie above 1: even 1"},
		{WireFP16, 1 + 3*0x1p-11, 0x3c02, "tie above 1+2^-10: even 1+2^-9"},
		{WireFP16, 1 + 0x1p-11 + 0x1p-20, 0x3c01, "just above a tie"},
		{WireFP16, 2 - 0x1p-12, 0x4000, "rounds up into the next binade"},
		{WireFP16, 65504, 0x7bff, "max finite"},
		{WireFP16, -65504, 0xfbff, "-max finite"},
		{WireFP16, 65519, 0x7bff, "below the rounding midpoint to inf"},
		{WireFP16, 65520, 0x7bff, "midpoint: RNE would give inf; saturates"},
		{WireFP16, 1e6, 0x7bff, "above max: saturates"},
		{WireFP16, -1e6, 0xfbff, "below -max: saturates"},
		{WireFP16, math.MaxFloat32, 0x7bff, "float32 max saturates"},
		{WireFP16, inf, 0x7c00, "+Inf"},
		{WireFP16, -inf, 0xfc00, "-Inf"},
		{WireFP16, nan, 0x7e00, "NaN"},
		{WireFP16, negNaN, 0xfe00, "-NaN"},
		{WireFP16, bits(0x7f800001), 0x7e00, "signalling NaN becomes quiet"},
		{WireBF16, 0, 0x0000, "zero"},
		{WireBF16, float32(math.Copysign(0, -1)), 0x8000, "-0"},
		{WireBF16, 1, 0x3f80, "one"},
		{WireBF16, 1 + 0x1p-8, 0x3f80, "tie above 1: even 1"},
		{WireBF16, 1 + 3*0x1p-8, 0x3f82, "tie: even up"},
		{WireBF16, bits(0x00008000), 0x0000, "subnormal tie to even 0"},
		{WireBF16, bits(0x00008001), 0x0001, "subnormal just above a tie"},
		{WireBF16, bits(0x00018000), 0x0002, "subnormal tie to even 2"},
		{WireBF16, bits(0x007fffff), 0x0080, "largest float32 subnormal rounds to the smallest normal"},
		{WireBF16, bits(0x7f7f7fff), 0x7f7f, "just below the midpoint to inf"},
		{WireBF16, bits(0x7f7f8000), 0x7f7f, "midpoint: RNE would give inf; saturates"},
		{WireBF16, math.MaxFloat32, 0x7f7f, "float32 max saturates"},
		{WireBF16, -math.MaxFloat32, 0xff7f, "-float32 max saturates"},
		{WireBF16, inf, 0x7f80, "+Inf"},
		{WireBF16, -inf, 0xff80, "-Inf"},
		{WireBF16, nan, 0x7fc0, "NaN"},
		{WireBF16, negNaN, 0xffc0, "-NaN"},
		{WireBF16, bits(0x7f800001), 0x7fc0, "signalling NaN, payload below bf16's bits"},
	}
	for _, c := range cases {
		got := patterns(enc(t, c.w, []float32{c.x}))[0]
		if got != c.want {
			t.Errorf("%v %s: %g (%#08x) encoded as %#04x, want %#04x", c.w, c.why, c.x, math.Float32bits(c.x), got, c.want)
		}
		f := fp16
		if c.w == WireBF16 {
			f = bf16
		}
		if ref := f.encode(c.x); ref != c.want {
			t.Errorf("reference %v %s: %#04x, want %#04x", c.w, c.why, ref, c.want)
		}
	}
}

// TestWireEncodeSweep compares Encode with the reference on float32 bit
// patterns spread over the whole range, and random ones.
func TestWireEncodeSweep(t *testing.T) {
	step := uint64(4099)
	if testing.Short() {
		step = 65537
	}
	var xs []float32
	for b := uint64(0); b < 1<<32; b += step {
		xs = append(xs, math.Float32frombits(uint32(b)))
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 100000 {
		xs = append(xs, math.Float32frombits(rng.Uint32()))
	}
	for _, f := range []format{fp16, bf16} {
		got := patterns(enc(t, f.wire, xs))
		for i, x := range xs {
			if want := f.encode(x); got[i] != want {
				t.Fatalf("%v: %g (%#08x) encoded as %#04x, want %#04x", f.wire, x, math.Float32bits(x), got[i], want)
			}
		}
	}
}

// TestWireRelativeError checks the error bound on normal values over the
// formats' exponent ranges.
func TestWireRelativeError(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, c := range []struct {
		f      format
		lo, hi int
	}{{fp16, -14, 15}, {bf16, -126, 127}} {
		xs := make([]float32, 200000)
		for i := range xs {
			x := float32(math.Ldexp(1+rng.Float64(), c.lo+rng.IntN(c.hi-c.lo+1)))
			if math.IsInf(float64(x), 0) || float64(x) > c.f.value(c.f.maxFin) {
				x = float32(c.f.value(c.f.maxFin))
			}
			if rng.IntN(2) == 0 {
				x = -x
			}
			xs[i] = x
		}
		got := dec(t, c.f.wire, enc(t, c.f.wire, xs))
		for i, x := range xs {
			if rel := math.Abs(float64(got[i])-float64(x)) / math.Abs(float64(x)); rel > c.f.relError {
				t.Fatalf("%v: %g came back as %g: relative error %g > %g", c.f.wire, x, got[i], rel, c.f.relError)
			}
		}
	}
}

// TestWireDecodeAdd checks DecodeAdd against Decode then a float32 add, and
// Round against Encode then Decode, for every format.
func TestWireDecodeAdd(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, w := range []Wire{WireFull, WireFP16, WireBF16} {
		for _, n := range []int{0, 1, 2, 7, 13, 1000} {
			src, acc := make([]float32, n), make([]float32, n)
			for i := range src {
				src[i] = float32(rng.NormFloat64() * math.Ldexp(1, rng.IntN(40)-20))
				acc[i] = float32(rng.NormFloat64() * math.Ldexp(1, rng.IntN(40)-20))
			}
			if n > 3 {
				src[0], src[1], src[2] = float32(math.NaN()), float32(math.Inf(-1)), 1e30
			}
			b := enc(t, w, src)
			want := dec(t, w, b)
			for i := range want {
				want[i] += acc[i]
			}
			for _, shift := range []int{0, 1} { // 1: a misaligned payload
				got := append([]float32(nil), acc...)
				bb := append(make([]byte, shift), b...)[shift:]
				if err := DecodeAdd(w, got, bb); err != nil {
					t.Fatal(err)
				}
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%v n=%d shift=%d: [%d] = %g, want %g", w, n, shift, i, got[i], want[i])
					}
				}
			}
			r := append([]float32(nil), src...)
			if err := Round(w, r); err != nil {
				t.Fatal(err)
			}
			rt := dec(t, w, b)
			for i := range r {
				if math.Float32bits(r[i]) != math.Float32bits(rt[i]) {
					t.Fatalf("Round %v n=%d: [%d] = %g, want %g", w, n, i, r[i], rt[i])
				}
			}
		}
	}
}

// TestWireLengths: bad lengths and formats are errors, never panics.
func TestWireLengths(t *testing.T) {
	for _, w := range []Wire{WireFull, WireFP16, WireBF16, 3, 255} {
		for _, c := range []struct{ nb, n int }{{0, 0}, {1, 0}, {3, 1}, {2, 1}, {4, 1}, {8, 1}, {7, 4}, {8, 4}, {16, 4}, {6, 4}} {
			ok := w.Valid() && c.nb == c.n*w.Size()
			b, f := make([]byte, c.nb), make([]float32, c.n)
			errs := []error{Encode(w, b, f), Decode(w, f, b), DecodeAdd(w, f, b)}
			for i, err := range errs {
				if (err == nil) != ok {
					t.Errorf("%v op %d: %d bytes, %d elements: err %v", w, i, c.nb, c.n, err)
				}
				if err != nil && w.Valid() && !errors.Is(err, ErrLength) {
					t.Errorf("%v op %d: %v is not ErrLength", w, i, err)
				}
			}
		}
		if err := Round(w, []float32{1}); (err == nil) != w.Valid() {
			t.Errorf("Round %v: %v", w, err)
		}
	}
}

func TestWireNames(t *testing.T) {
	for _, w := range []Wire{WireFull, WireFP16, WireBF16} {
		got, err := ParseWire(w.String())
		if err != nil || got != w {
			t.Errorf("ParseWire(%q) = %v, %v", w.String(), got, err)
		}
	}
	for s, want := range map[string]Wire{"": WireFull, "FP32": WireFull, "half": WireFP16, "float16": WireFP16, "BFloat16": WireBF16} {
		if got, err := ParseWire(s); err != nil || got != want {
			t.Errorf("ParseWire(%q) = %v, %v, want %v", s, got, err, want)
		}
	}
	if _, err := ParseWire("fp8"); err == nil {
		t.Error("fp8 accepted")
	}
	if s := Wire(9).String(); s != "Wire(9)" {
		t.Errorf("Wire(9) = %q", s)
	}
	if Wire(3).Valid() || Wire(3).Size() != 0 {
		t.Error("Wire(3) valid")
	}
}

// FuzzDecode: any bytes, any format, any element count: Decode never
// panics, fails exactly on a length mismatch, and (when it succeeds)
// re-encoding gives the input back except for NaN payloads.
func FuzzDecode(f *testing.F) {
	f.Add([]byte{}, uint8(WireFP16), uint16(0))
	f.Add([]byte{0x00, 0x7c, 0x01, 0x7c, 0xff, 0xfb}, uint8(WireFP16), uint16(3))
	f.Add([]byte{0x80, 0x7f, 0xc1, 0xff, 0x7f}, uint8(WireBF16), uint16(2))
	f.Add([]byte{0, 0, 0xc0, 0x7f}, uint8(WireFull), uint16(1))
	f.Fuzz(func(t *testing.T, b []byte, w8 uint8, n16 uint16) {
		w, n := Wire(w8), int(n16)
		dst := make([]float32, n)
		err := Decode(w, dst, b)
		if ok := w.Valid() && len(b) == n*w.Size(); (err == nil) != ok {
			t.Fatalf("%v: %d bytes into %d: err %v", w, len(b), n, err)
		}
		if err != nil || w == WireFull {
			return
		}
		back := patterns(enc(t, w, dst))
		in := patterns(b)
		for i := range in {
			f := fp16
			if w == WireBF16 {
				f = bf16
			}
			want := in[i]
			if f.isNaN(want) {
				want = f.qnan | want&0x8000
			}
			if back[i] != want {
				t.Fatalf("%v: %#04x decoded to %g, re-encoded as %#04x", w, in[i], dst[i], back[i])
			}
		}
	})
}

// FuzzDecodeAdd: any bytes, any format, any element count: DecodeAdd never
// panics, fails exactly on a length mismatch, and equals Decode plus add.
func FuzzDecodeAdd(f *testing.F) {
	f.Add([]byte{}, uint8(WireFP16), uint16(0), float32(0))
	f.Add([]byte{0x01, 0x00, 0xff, 0x7b}, uint8(WireFP16), uint16(2), float32(-1))
	f.Add([]byte{0x80, 0x7f, 0xc1, 0xff}, uint8(WireBF16), uint16(2), float32(3))
	f.Add([]byte{1, 2, 3}, uint8(WireFull), uint16(1), float32(0))
	f.Fuzz(func(t *testing.T, b []byte, w8 uint8, n16 uint16, a float32) {
		w, n := Wire(w8), int(n16)
		acc := make([]float32, n)
		for i := range acc {
			acc[i] = a
		}
		err := DecodeAdd(w, acc, b)
		if ok := w.Valid() && len(b) == n*w.Size(); (err == nil) != ok {
			t.Fatalf("%v: %d bytes into %d: err %v", w, len(b), n, err)
		}
		if err != nil {
			return
		}
		want := dec(t, w, b)
		for i := range want {
			want[i] += a
			if math.Float32bits(acc[i]) != math.Float32bits(want[i]) && !(want[i] != want[i] && acc[i] != acc[i]) {
				t.Fatalf("%v [%d]: %g, want %g", w, i, acc[i], want[i])
			}
		}
	})
}

// BenchmarkWire measures the codec per element on 1 Mi elements of
// gradient-like values (normal, spread over several magnitudes, some in
// fp16's subnormal range).
func BenchmarkWire(b *testing.B) {
	const n = 1 << 20
	rng := rand.New(rand.NewPCG(9, 10))
	src := make([]float32, n)
	for i := range src {
		src[i] = float32(rng.NormFloat64() * math.Ldexp(1, -rng.IntN(20)))
	}
	acc := make([]float32, n)
	for _, w := range []Wire{WireFP16, WireBF16, WireFull} {
		buf := make([]byte, n*w.Size())
		if err := Encode(w, buf, src); err != nil {
			b.Fatal(err)
		}
		run := func(name string, f func() error) {
			b.Run(fmt.Sprintf("%v/%s", w, name), func(b *testing.B) {
				b.SetBytes(4 * n)
				for b.Loop() {
					if err := f(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/elem")
			})
		}
		run("encode", func() error { return Encode(w, buf, src) })
		run("decode", func() error { return Decode(w, acc, buf) })
		run("decodeadd", func() error { return DecodeAdd(w, acc, buf) })
	}
}

func ExampleEncode() {
	src := []float32{1, 0.1, 1e6, float32(math.Inf(-1))}
	wire := make([]byte, len(src)*WireFP16.Size())
	if err := Encode(WireFP16, wire, src); err != nil {
		fmt.Println(err)
		return
	}
	acc := []float32{1, 1, 1, 1}
	if err := DecodeAdd(WireFP16, acc, wire); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(acc)
	fmt.Println(Decode(WireFP16, acc, wire[:7]))
	// Output:
	// [2 1.0999756 65505 -Inf]
	// reduce: decode fp16: 7 bytes is not a whole number of 2-byte elements: wire length mismatch
}

// TestWireMisaligned: payloads at odd addresses take the fallback loops and
// give the same bytes and values as aligned ones.
func TestWireMisaligned(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	src := make([]float32, 257)
	for i := range src {
		src[i] = float32(rng.NormFloat64() * math.Ldexp(1, rng.IntN(60)-30))
	}
	src[3], src[4] = float32(math.NaN()), 1e9
	for _, w := range []Wire{WireFull, WireFP16, WireBF16} {
		aligned := enc(t, w, src)
		want := dec(t, w, aligned)
		odd := make([]byte, len(aligned)+1)[1:]
		if err := Encode(w, odd, src); err != nil {
			t.Fatal(err)
		}
		if string(odd) != string(aligned) {
			t.Fatalf("%v: misaligned Encode differs", w)
		}
		got := make([]float32, len(src))
		if err := Decode(w, got, odd); err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%v: misaligned Decode [%d] = %g, want %g", w, i, got[i], want[i])
			}
		}
	}
}
