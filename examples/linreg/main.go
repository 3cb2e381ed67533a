// Command linreg trains a linear regression with ParamHub: the samples are
// split round-robin over the ranks (sample i goes to rank i mod N), every
// rank takes a few local SGD steps on its share, and the hub averages the
// ranks' weights, weighted by how many samples each one holds. Run it
// under gorun with the hub strategy:
//
//	gorun -np 4 --strategy hub ./linreg -rounds 30
//	gorun -np 4 --hubs 2 --strategy hub ./linreg -metrics linreg.jsonl
//
// Every rank generates the same synthetic data, y = X·w* + noise, from a
// shared seed; rank 0 reports the loss on all data and the distance of
// the averaged weights from w* and from the least-squares solution.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"time"

	"github.com/gorun/gorun/collective"
	"github.com/gorun/gorun/ps"
	"gonum.org/v1/gonum/mat"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout)) }

type data struct {
	x     *mat.Dense // samples x features
	y     []float64
	wTrue []float64
}

// generate makes n samples of d features from seed; every rank gets the
// same data.
func generate(seed uint64, n, d int, noise float64) data {
	rng := rand.New(rand.NewPCG(seed, 1))
	w := make([]float64, d)
	for i := range w {
		w[i] = rng.NormFloat64()
	}
	x := mat.NewDense(n, d, nil)
	y := make([]float64, n)
	for i := range n {
		dot := 0.0
		for j := range d {
			v := rng.NormFloat64()
			x.Set(i, j, v)
			dot += v * w[j]
		}
		y[i] = dot + noise*rng.NormFloat64()
	}
	return data{x: x, y: y, wTrue: w}
}

// mse is the mean squared error of w on rows.
func mse(dt data, rows []int, w []float64) float64 {
	s := 0.0
	for _, i := range rows {
		r := mat.Dot(dt.x.RowView(i), mat.NewVecDense(len(w), w)) - dt.y[i]
		s += r * r
	}
	return s / float64(max(1, len(rows)))
}

// localSteps runs SGD over this rank's rows, in order, steps times.
func localSteps(dt data, rows []int, w []float64, lr float64, steps int) {
	d := len(w)
	for range steps {
		for _, i := range rows {
			row := dt.x.RawRowView(i)
			pred := 0.0
			for j := range d {
				pred += row[j] * w[j]
			}
			g := pred - dt.y[i]
			for j := range d {
				w[j] -= lr * g * row[j]
			}
		}
	}
}

func run(args []string, out io.Writer) int {
	fs := flag.NewFlagSet("linreg", flag.ContinueOnError)
	n := fs.Int("n", 2000, "samples")
	d := fs.Int("d", 16, "features")
	rounds := fs.Int("rounds", 20, "averaging rounds")
	steps := fs.Int("steps", 1, "local passes over the rank's share per round")
	lr := fs.Float64("lr", 0.01, "local SGD step")
	seed := fs.Uint64("seed", 7, "data seed, shared by every rank")
	metrics := fs.String("metrics", "", "write per-iteration metrics as JSON lines to this file (rank N writes FILE.N)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := train(*n, *d, *rounds, *steps, *lr, *seed, *metrics, out); err != nil {
		fmt.Fprintln(os.Stderr, "linreg:", err)
		return 1
	}
	return 0
}

func train(n, d, rounds, steps int, lr float64, seed uint64, metricsFile string, out io.Writer) error {
	ctx := context.Background()
	c, err := collective.Join(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	hub := c.Hub()
	if hub == nil {
		return errors.New("run with the hub strategy: gorun --strategy hub (or GORUN_STRATEGY=hub)")
	}
	dt := generate(seed, n, d, 0.1)
	var mine, all []int
	for i := range n {
		all = append(all, i)
		if i%c.Size() == c.Rank() {
			mine = append(mine, i)
		}
	}
	var mw io.Writer
	if metricsFile != "" {
		f, err := os.Create(fmt.Sprintf("%s.%d", metricsFile, c.Rank()))
		if err != nil {
			return err
		}
		defer f.Close()
		mw = f
	}
	// The hub's SGD mode with step 1 and no momentum turns pushes of
	// (global - local) weighted by sample counts into the weighted mean of
	// the local weights: w <- w - sum(n_i (w - w_i)) / sum(n_i).
	if err := hub.Declare(ctx, "w", ps.KeyConfig{Len: d, Update: ps.SGD, LR: 1}); err != nil {
		return err
	}
	global := make([]float64, d)
	delta := make([]float64, d)
	for r := range rounds {
		t0 := time.Now()
		local := append([]float64(nil), global...)
		localSteps(dt, mine, local, lr, steps)
		compute := time.Since(t0)
		for j := range delta {
			delta[j] = global[j] - local[j]
		}
		if err := ps.PushPull(hub, "w", delta, max(1, len(mine)), global).Wait(ctx); err != nil {
			return err
		}
		m := hub.Tick(len(mine), compute)
		if mw != nil {
			if err := m.WriteJSON(mw); err != nil {
				return err
			}
		}
		if c.Rank() == 0 && (r == 0 || r == rounds-1 || (r+1)%10 == 0) {
			fmt.Fprintf(out, "round %d: loss %.6f\n", r+1, mse(dt, all, global))
		}
	}
	if c.Rank() != 0 {
		return c.Barrier(ctx)
	}
	var ls mat.VecDense
	if err := ls.SolveVec(dt.x, mat.NewVecDense(n, dt.y)); err != nil {
		return err
	}
	dist := func(a []float64, b func(int) float64) float64 {
		s := 0.0
		for j := range a {
			s += (a[j] - b(j)) * (a[j] - b(j))
		}
		return math.Sqrt(s)
	}
	fmt.Fprintf(out, "final: loss %.6f (least squares %.6f), |w - w*| %.4f, |w - least squares| %.4f, ranks %d\n",
		mse(dt, all, global), mse(dt, all, ls.RawVector().Data), dist(global, func(j int) float64 { return dt.wTrue[j] }), dist(global, ls.AtVec), c.Size())
	return c.Barrier(ctx)
}
