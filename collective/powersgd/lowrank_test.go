package powersgd

import (
	"math"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/mat"
)

func dense(rows, cols int, v []float32) *mat.Dense {
	d := mat.NewDense(rows, cols, nil)
	for i := range rows {
		for j := range cols {
			d.Set(i, j, float64(v[i*cols+j]))
		}
	}
	return d
}

func randFloat32(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

// near fails unless got (rows x cols, float32) is within tol of want,
// relative to want's largest element.
func near(t *testing.T, what string, got []float32, want *mat.Dense, tol float64) {
	t.Helper()
	rows, cols := want.Dims()
	scale := mat.Norm(want, math.Inf(1)) + 1e-30
	for i := range rows {
		for j := range cols {
			if d := math.Abs(float64(got[i*cols+j]) - want.At(i, j)); d > tol*scale {
				t.Fatalf("%s: [%d,%d] = %v, want %v", what, i, j, got[i*cols+j], want.At(i, j))
			}
		}
	}
}

// TestKernels: the products against gonum's on random shapes, including
// sides of 1 and ranks above a side.
func TestKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for range 200 {
		rows, cols := 1+rng.IntN(40), 1+rng.IntN(40)
		r := rankFor(1+rng.IntN(6), rows, cols)
		m, q := randFloat32(rng, rows*cols), randFloat32(rng, cols*r)
		M, Q := dense(rows, cols, m), dense(cols, r, q)

		p := make([]float32, rows*r)
		mulRight(p, m, q, rows, cols, r, make([]float64, cols*r))
		var want mat.Dense
		want.Mul(M, Q)
		near(t, "M Q", p, &want, 1e-5)

		q2 := make([]float32, cols*r)
		mulLeftT(q2, m, p, rows, cols, r, make([]float64, cols*r))
		want.Reset()
		want.Mul(M.T(), dense(rows, r, p))
		near(t, "Mᵀ P", q2, &want, 1e-5)

		out, res := append([]float32(nil), m...), make([]float32, rows*cols)
		approx(out, res, p, q2, rows, cols, r, 0.5, make([]float64, cols*r))
		want.Reset()
		want.Mul(dense(rows, r, p), dense(cols, r, q2).T())
		want.Scale(0.5, &want)
		near(t, "P Qᵀ / 2", out, &want, 1e-5)
		var diff mat.Dense
		diff.Sub(M, &want)
		near(t, "residual", res, &diff, 1e-5)
	}
}

// TestOrthonormalize: the columns come out orthonormal and spanning the
// same space when they are independent; zero, repeated and tiny columns
// are replaced so that the result is still an orthonormal basis.
func TestOrthonormalize(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	check := func(what string, p []float32, rows, r int) {
		t.Helper()
		P := dense(rows, r, p)
		var g mat.Dense
		g.Mul(P.T(), P)
		for i := range r {
			for j := range r {
				want := 0.0
				if i == j {
					want = 1
				}
				if d := math.Abs(g.At(i, j) - want); d > 1e-5 {
					t.Fatalf("%s: PᵀP[%d,%d] = %v", what, i, j, g.At(i, j))
				}
			}
		}
	}
	for range 200 {
		rows := 1 + rng.IntN(30)
		r := 1 + rng.IntN(min(rows, 6))
		p := randFloat32(rng, rows*r)
		orig := dense(rows, r, p)
		orthonormalize(p, rows, r, make([]float64, rows*r))
		check("random", p, rows, r)
		// Same span: projecting the original on P leaves it unchanged.
		P := dense(rows, r, p)
		var ptp, proj mat.Dense
		ptp.Mul(P.T(), orig)
		proj.Mul(P, &ptp)
		for i := range rows {
			for k := range r {
				if d := math.Abs(proj.At(i, k) - orig.At(i, k)); d > 1e-3*mat.Norm(orig, math.Inf(1)) {
					t.Fatalf("random %dx%d: span changed at [%d,%d]: %v vs %v", rows, r, i, k, proj.At(i, k), orig.At(i, k))
				}
			}
		}
	}
	for _, rows := range []int{1, 2, 5, 17} {
		for r := 1; r <= min(rows, 4); r++ {
			zero := make([]float32, rows*r)
			orthonormalize(zero, rows, r, make([]float64, rows*r))
			check("zero", zero, rows, r)

			rep := randFloat32(rng, rows)
			same := make([]float32, rows*r)
			for i := range rows {
				for k := range r {
					same[i*r+k] = rep[i] * float32(k+1)
					if k == r-1 && r > 1 {
						same[i*r+k] = rep[i] * 1e-9 // tiny
					}
				}
			}
			orthonormalize(same, rows, r, make([]float64, rows*r))
			check("repeated", same, rows, r)
		}
	}
}
