package powersgd

import (
	"hash/fnv"
	"math"
	"math/rand/v2"
)

// This file is the pure algorithm: matrix kernels on row-major float32
// matrices with float64 sums, and the orthonormalization. No I/O, no
// clock, no state: the same inputs give the same bits on every rank.

// rankFor is the approximation rank used for a rows x cols matrix: the
// configured rank, capped by the smaller dimension.
func rankFor(rank, rows, cols int) int {
	return min(rank, rows, cols)
}

// compresses reports whether a rows x cols matrix at rank r goes low-rank:
// it must be a matrix (r > 0), and the dense size must be at least
// minRate times the (rows+cols)*r floats that compression sends.
func compresses(rows, cols, r int, minRate float64) bool {
	if r <= 0 {
		return false
	}
	return float64(rows)*float64(cols) >= minRate*float64(rows+cols)*float64(r)
}

// keySeed is the stream of the random generator for a key: the same on
// every rank, independent of the order in which keys first appear.
func keySeed(key string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(key))
	return h.Sum64()
}

// fillGaussian fills q with standard normal values from rng.
func fillGaussian(q []float32, rng *rand.Rand) {
	for i := range q {
		q[i] = float32(rng.NormFloat64())
	}
}

// mulRight sets p (rows x r) = m (rows x cols) · q (cols x r); qf is
// scratch of cols*r.
func mulRight(p, m, q []float32, rows, cols, r int, qf []float64) {
	for i, v := range q {
		qf[i] = float64(v)
	}
	acc := make([]float64, r)
	for i := range rows {
		clear(acc)
		row := m[i*cols : (i+1)*cols]
		for j, v := range row {
			x := float64(v)
			qj := qf[j*r : (j+1)*r]
			for k := range acc {
				acc[k] += x * qj[k]
			}
		}
		pi := p[i*r : (i+1)*r]
		for k := range pi {
			pi[k] = float32(acc[k])
		}
	}
}

// mulLeftT sets q (cols x r) = mᵀ (cols x rows) · p (rows x r); acc is
// scratch of cols*r.
func mulLeftT(q, m, p []float32, rows, cols, r int, acc []float64) {
	clear(acc)
	pf := make([]float64, r)
	for i := range rows {
		for k := range r {
			pf[k] = float64(p[i*r+k])
		}
		row := m[i*cols : (i+1)*cols]
		for j, v := range row {
			x := float64(v)
			aj := acc[j*r : (j+1)*r]
			for k := range aj {
				aj[k] += x * pf[k]
			}
		}
	}
	for i := range q {
		q[i] = float32(acc[i])
	}
}

// approx computes the approximation p · qᵀ · scale (rows x cols) into
// out. With res non-nil it first sets res = m − approximation, where m is
// out's old contents (m and out may be the same slice). qf is scratch of
// cols*r.
func approx(out, res, p, q []float32, rows, cols, r int, scale float64, qf []float64) {
	for i, v := range q {
		qf[i] = float64(v)
	}
	pf := make([]float64, r)
	for i := range rows {
		for k := range r {
			pf[k] = float64(p[i*r+k]) * scale
		}
		row := out[i*cols : (i+1)*cols]
		var rrow []float32
		if res != nil {
			rrow = res[i*cols : (i+1)*cols]
		}
		for j := range row {
			qj := qf[j*r : (j+1)*r]
			var s float64
			for k := range pf {
				s += pf[k] * qj[k]
			}
			v := float32(s)
			if rrow != nil {
				rrow[j] = row[j] - v
			}
			row[j] = v
		}
	}
}

// orthonormalize makes the r columns of p (rows x r, r <= rows)
// orthonormal by modified Gram-Schmidt with a second pass ("twice is
// enough"), in float64 (w is scratch of rows*r). A column that lies in
// the span of the ones before it (left with less than 1e-4 of its
// length, or all zero) is replaced by the first unit vector e_t that is
// not, so the result is always an orthonormal basis and no column dies:
// with warm start a zero column would stay zero in every later call.
func orthonormalize(p []float32, rows, r int, w []float64) {
	for i, v := range p {
		w[i] = float64(v)
	}
	col := func(k int) func(i int) *float64 { return func(i int) *float64 { return &w[i*r+k] } }
	// project removes from column k its components along columns 0..k-1
	// twice and returns the norm left.
	project := func(k int) float64 {
		ck := col(k)
		for range 2 {
			for j := range k {
				cj := col(j)
				var d float64
				for i := range rows {
					d += *cj(i) * *ck(i)
				}
				for i := range rows {
					*ck(i) -= d * *cj(i)
				}
			}
		}
		var n float64
		for i := range rows {
			n += *ck(i) * *ck(i)
		}
		return math.Sqrt(n)
	}
	for k := range r {
		ck := col(k)
		var n0 float64
		for i := range rows {
			n0 += *ck(i) * *ck(i)
		}
		n0 = math.Sqrt(n0)
		n := project(k)
		if !(n > 1e-4*n0 && n > 0) {
			// The k columns before span a k-dimensional space, so the
			// unit vectors keep rows-k of their squared length in all:
			// one of them keeps at least (rows-k)/rows, and the first
			// with half of that will do.
			need := math.Sqrt(0.5 * float64(rows-k) / float64(rows))
			for t := range rows {
				for i := range rows {
					*ck(i) = 0
				}
				*ck(t) = 1
				if n = project(k); n >= need {
					break
				}
			}
		}
		for i := range rows {
			*ck(i) /= n
		}
	}
	for i := range p {
		p[i] = float32(w[i])
	}
}
