//go:build amd64 && !purego

package exact

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestKernelsVector: on clean data the vector kernels convert every
// block themselves (none left to the element-by-element code), at every
// h of the contract and on both of FromFixed32's paths.
func TestKernelsVector(t *testing.T) {
	if !vector {
		t.Skip("no AVX2 and FMA")
	}
	rng := rand.New(rand.NewPCG(59, 60))
	const n = 1024
	for h := 1; h <= 15; h++ {
		c := kernelCaseOf(rng, n, h, []int{1, 4, 5}, 0, 0, 0.1)
		for i, v := range c.x {
			// Codes the float32 products take: 2^Scale32 a normal float32.
			c.codes[i] = max(c.codes[i], Code32(v), uint8(30-h))
		}
		q := make([]int32, n)
		if done := toFixed32AVX2(&c.x[0], &c.codes[0], &q[0], n, h, 30-h, 254-(30-h), 0); done != n {
			t.Fatalf("h %d: toFixed32AVX2 converted %d of %d", h, done, n)
		}
		want := make([]int32, n)
		toFixed32Go(c.x, c.codes, want, h)
		if i := firstDiff(q, want); i >= 0 {
			t.Fatalf("h %d: element %d: %d, want %d", h, i, q[i], want[i])
		}
		for _, avg := range []int{1, 4, 3} {
			// The scale's exponent bits c+bias, and the codes the results
			// are normal at: 31-h+k up.
			div, recip, bias, k := 0.0, 0.0, h-30-2, 2
			switch avg {
			case 1:
				bias, k = h-30, 0
			case 3:
				div, recip, bias = 3, 1.0/3, h-30
			}
			lo := 31 - h + k
			codes := make([]uint8, n)
			for i := range codes {
				codes[i] = max(c.codes[i], uint8(lo))
			}
			out := make([]float32, n)
			if done := fromFixed32AVX2(&c.q[0], &codes[0], &out[0], n, bias, lo, 254-lo, div, recip); done != n {
				t.Fatalf("h %d avg %d: fromFixed32AVX2 converted %d of %d", h, avg, done, n)
			}
			want := make([]float32, n)
			fromFixed32Go(c.q, codes, want, h, avg)
			if i := firstDiff(bitsOf(out), bitsOf(want)); i >= 0 {
				t.Fatalf("h %d avg %d: element %d (%d at code %d): %g, want %g", h, avg, i, c.q[i], codes[i], out[i], want[i])
			}
		}
	}
}

// TestKernelsVector64 is TestKernelsVector for the float64 kernels.
func TestKernelsVector64(t *testing.T) {
	if !vector {
		t.Skip("no AVX2 and FMA")
	}
	rng := rand.New(rand.NewPCG(65, 66))
	const n = 1024
	for h := 1; h <= 15; h++ {
		c := kernelCaseOf64(rng, n, h, []int{0, 1, 2, 4, 5}, 0, 0.2, 0.1)
		for i, v := range c.x {
			if c.codes[i] == Code64Special || Code64(v) == Code64Special {
				c.x[i], c.codes[i] = 1, int32(rng.Uint32())
			}
			if rng.IntN(8) == 0 {
				// A code below zero, and a shift below 64.
				c.codes[i] = -rng.Int32N(70)
			}
		}
		codes := make([]int32, n)
		codes64AVX2(&c.x[0], &codes[0], n)
		want := make([]int32, n)
		codes64Go(c.x, want)
		if i := firstDiff(codes, want); i >= 0 {
			t.Fatalf("code of %g: %d, want %d", c.x[i], codes[i], want[i])
		}
		q := make([]int64, n)
		if done := toFixed64AVX2(&c.x[0], &c.codes[0], &q[0], n, h); done != n {
			t.Fatalf("h %d: toFixed64AVX2 converted %d of %d", h, done, n)
		}
		wantQ := make([]int64, n)
		toFixed64Go(c.x, c.codes, wantQ, h)
		if i := firstDiff(q, wantQ); i >= 0 {
			t.Fatalf("h %d: element %d (%g at code %d): %d, want %d", h, i, c.x[i], c.codes[i], q[i], wantQ[i])
		}
		for _, avg := range []int{1, 4, 3} {
			lo, hi, mul, div, recip := 63-h, 2046, 0.0, 0.0, 0.0
			switch avg {
			case 4:
				mul = 0.25
			case 3:
				lo, hi, div, recip = 63-h+2, 2045-h, 3, 1.0/3
			}
			for i := range codes {
				codes[i] = int32(lo + rng.IntN(hi-lo+1))
			}
			out := make([]float64, n)
			if done := fromFixed64AVX2(&c.q[0], &codes[0], &out[0], n, h-62, lo, hi-lo, mul, div, recip); done != n {
				t.Fatalf("h %d avg %d: fromFixed64AVX2 converted %d of %d", h, avg, done, n)
			}
			want := make([]float64, n)
			fromFixed64Go(c.q, codes, want, h, avg)
			if i := firstDiff(bitsOf64(out), bitsOf64(want)); i >= 0 {
				t.Fatalf("h %d avg %d: element %d (%d at code %d): %g, want %g", h, avg, i, c.q[i], codes[i], out[i], want[i])
			}
		}
	}
}

// TestKernelsVectorSmallCodes: blocks of zeros, -0, subnormals, small
// codes and these among normal values (smallCase, in contract) the
// vector kernels convert themselves, with the arguments toFixed32 and
// fromFixed32 pass, at every h of the contract and on both of
// FromFixed32's paths.
func TestKernelsVectorSmallCodes(t *testing.T) {
	if !vector {
		t.Skip("no AVX2 and FMA")
	}
	rng := rand.New(rand.NewPCG(73, 74))
	const n = 1024
	for h := 1; h <= 31; h++ {
		c := smallCase(rng, n, h, false)
		lo, span := toFixed32Range(h)
		q := make([]int32, n)
		if done := toFixed32AVX2(&c.x[0], &c.codes[0], &q[0], n, h, lo, span, 0); done != n {
			t.Fatalf("h %d: toFixed32AVX2 converted %d of %d", h, done, n)
		}
		want := make([]int32, n)
		toFixed32Go(c.x, c.codes, want, h)
		if i := firstDiff(q, want); i >= 0 {
			t.Fatalf("h %d: element %d (%#x at code %d): %d, want %d", h, i, math.Float32bits(c.x[i]), c.codes[i], q[i], want[i])
		}
		for _, avg := range []int{1, 2, 4, 3, 7, 32767, 1<<31 - 1} {
			bias, lo, span, div, recip := fromFixed32Args(h, avg)
			for _, in := range [][]int32{c.q, q} {
				out := make([]float32, n)
				if done := fromFixed32AVX2(&in[0], &c.codes[0], &out[0], n, bias, lo, span, div, recip); done != n {
					t.Fatalf("h %d avg %d: fromFixed32AVX2 converted %d of %d", h, avg, done, n)
				}
				want := make([]float32, n)
				fromFixed32Go(in, c.codes, want, h, avg)
				if i := firstDiff(bitsOf(out), bitsOf(want)); i >= 0 {
					t.Fatalf("h %d avg %d: element %d (%d at code %d): %g, want %g", h, avg, i, in[i], c.codes[i], out[i], want[i])
				}
			}
		}
	}
}
