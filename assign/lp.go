package assign

import (
	"errors"
	"fmt"

	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/optimize/convex/lp"
)

// solveLP solves the relaxation of p in standard form (A·v = b, v ≥ 0)
// with gonum's simplex. With y_i = x_i − lo_i the variables are
//
//	y_0..y_{n-1}, T, s_0..s_{n-1} (makespan slacks), u_0..u_{n-1} (upper
//	slacks), and, when the total may vary, z (samples above smin) and w
//	(its slack)
//
// and the rows
//
//	T − c_i·y_i − s_i = c_i·lo_i + o_i   (c_i·x_i + o_i ≤ T)
//	y_i + u_i = hi_i − lo_i              (x_i ≤ hi_i, only if hi_i < smax)
//	Σ y_i − z = smin − Σ lo_i            (Σ x_i = smin + z)
//	z + w = smax − smin                  (only when smax > smin)
//
// The objective is w1·T + w3·Σ r_i·c_i·y_i − w2·z plus the constant
// w3·Σ r_i·(c_i·lo_i + o_i) − w2·smin. It returns x (real) and the LP's
// optimum of the full objective. Every row holds a slack of its own but
// the sum row, so A has full row rank, and no column is all zero.
func solveLP(p Problem, b bounds, tol float64) ([]float64, float64, error) {
	n := len(p.Workers)
	grow := b.smax > b.smin
	// An upper row is needed only when hi_i < smax: otherwise the sum
	// row already keeps x_i ≤ smax.
	var upper []int
	for i := range p.Workers {
		if b.hi[i] < b.smax {
			upper = append(upper, i)
		}
	}
	cols := 2*n + 1 + len(upper)
	rows := n + len(upper) + 1
	if grow {
		cols += 2
		rows++
	}
	A := mat.NewDense(rows, cols, nil)
	rhs := make([]float64, rows)
	c := make([]float64, cols)
	tcol := n
	sumRow := n + len(upper)
	w := p.Weights
	konst := -w.Accuracy * float64(b.smin)
	sumLo := 0
	for i, wk := range p.Workers {
		// makespan row i
		A.Set(i, tcol, 1)
		A.Set(i, i, -wk.Cost)
		A.Set(i, n+1+i, -1)
		rhs[i] = wk.Cost*float64(b.lo[i]) + wk.Overhead
		A.Set(sumRow, i, 1)
		c[i] = w.Resource * wk.Price * wk.Cost
		konst += w.Resource * wk.Price * (wk.Cost*float64(b.lo[i]) + wk.Overhead)
		sumLo += b.lo[i]
	}
	for k, i := range upper {
		A.Set(n+k, i, 1)
		A.Set(n+k, 2*n+1+k, 1)
		rhs[n+k] = float64(b.hi[i] - b.lo[i])
	}
	c[tcol] = w.Time
	rhs[sumRow] = float64(b.smin - sumLo)
	if grow {
		z := 2*n + 1 + len(upper)
		A.Set(sumRow, z, -1)
		A.Set(sumRow+1, z, 1)
		A.Set(sumRow+1, z+1, 1)
		rhs[sumRow+1] = float64(b.smax - b.smin)
		c[z] = -w.Accuracy
	}
	opt, v, err := lp.Simplex(c, A, rhs, tol, nil)
	if err != nil {
		if errors.Is(err, lp.ErrInfeasible) {
			// bounds() has already shown an integer point exists.
			return nil, 0, fmt.Errorf("%w: simplex found the relaxation infeasible: %v", ErrSolver, err)
		}
		return nil, 0, fmt.Errorf("%w: %v", ErrSolver, err)
	}
	x := make([]float64, n)
	for i := range x {
		x[i] = float64(b.lo[i]) + v[i]
	}
	return x, opt + konst, nil
}
