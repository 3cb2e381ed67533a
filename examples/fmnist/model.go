package main

import (
	"math"

	"github.com/gorun/gorun/examples/fmnist/nn"
	"github.com/gorun/gorun/pipeline"
)

// newModel builds the -model network for 28x28 grey images (an MLP with
// the given hidden widths, if any); every rank draws the same initial
// weights from seed.
func newModel(kind string, hidden []int, seed uint64) (*nn.Model, error) {
	return newModelCNN(kind, hidden, nil, seed)
}

// newModelCNN is newModel with the CNN's widths (conv1, conv2 channels,
// dense units; nil for the default 8, 16, 64).
func newModelCNN(kind string, hidden, cnn []int, seed uint64) (*nn.Model, error) {
	in := nn.Shape{H: side, W: side, C: 1}
	if kind == "mlp" && len(hidden) > 0 {
		return nn.NewMLP(in, hidden, classes, seed)
	}
	if kind == "cnn" && len(cnn) == 3 {
		return nn.NewCNN(in, cnn[0], cnn[1], cnn[2], classes, seed)
	}
	return nn.New(kind, in, classes, seed)
}

// batch copies the samples idx of d into x (len(idx) images, widened to
// float64) and their labels into y, growing both as needed.
func batch(d *pipeline.Dataset, idx []int, x []float64, y []int) ([]float64, []int) {
	x, y = x[:0], y[:0]
	for _, i := range idx {
		for _, v := range d.Row(i) {
			x = append(x, float64(v))
		}
		y = append(y, d.Y[i])
	}
	return x, y
}

// evaluate returns, over d, the share that m classifies right, the mean
// cross-entropy of its predictions, and the root mean square error of the
// predicted class probabilities against the one-hot labels; in batches of
// 500.
func evaluate(m *nn.Model, d *dataset) (acc, loss, rmse float64) {
	const chunk = 500
	pred := make([]int, chunk)
	probs := make([]float64, chunk*classes)
	right := 0
	se := 0.0
	for off := 0; off < d.len(); off += chunk {
		n := min(chunk, d.len()-off)
		m.Predict(d.x[off*pixels:(off+n)*pixels], n, pred, probs)
		for i := range n {
			y := d.y[off+i]
			if pred[i] == y {
				right++
			}
			loss -= logClamp(probs[i*classes+y])
			for k, p := range probs[i*classes : (i+1)*classes] {
				if k == y {
					p--
				}
				se += p * p
			}
		}
	}
	n := float64(max(1, d.len()))
	return float64(right) / n, loss / n, math.Sqrt(se / (n * classes))
}

func logClamp(p float64) float64 { return math.Log(max(p, 1e-12)) }
