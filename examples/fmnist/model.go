package main

import (
	"math"

	"github.com/gorun/gorun/examples/fmnist/nn"
)

// newModel builds the -model network for 28x28 grey images; every rank
// draws the same initial weights from seed.
func newModel(kind string, seed uint64) (*nn.Model, error) {
	return nn.New(kind, nn.Shape{H: side, W: side, C: 1}, classes, seed)
}

// batch copies the samples idx of d into x (len(idx) images) and their
// labels into y, growing both as needed.
func batch(d *dataset, idx []int, x []float64, y []int) ([]float64, []int) {
	x, y = x[:0], y[:0]
	for _, i := range idx {
		x = append(x, d.image(i)...)
		y = append(y, d.y[i])
	}
	return x, y
}

// evaluate returns the share of d that m classifies right and the mean
// cross-entropy of its predictions, in batches of 500.
func evaluate(m *nn.Model, d *dataset) (acc, loss float64) {
	const chunk = 500
	pred := make([]int, chunk)
	probs := make([]float64, chunk*classes)
	right := 0
	for off := 0; off < d.len(); off += chunk {
		n := min(chunk, d.len()-off)
		m.Predict(d.x[off*pixels:(off+n)*pixels], n, pred, probs)
		for i := range n {
			if pred[i] == d.y[off+i] {
				right++
			}
			loss -= logClamp(probs[i*classes+d.y[off+i]])
		}
	}
	n := float64(max(1, d.len()))
	return float64(right) / n, loss / n
}

func logClamp(p float64) float64 { return math.Log(max(p, 1e-12)) }
