package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"

	"github.com/gorun/gorun/examples/fmnist/nn"
	"github.com/gorun/gorun/pipeline"
)

// A snapshot is a model's gradient and parameters at one training step:
// the gradient of that step's batch, at the parameters it was taken at
// (before the step's update).
type snapshot struct {
	model  string
	step   int
	phase  string
	loss   float64 // the batch's loss
	grad   []float64
	params []float64
}

// A trained model: its snapshots and what training gave.
type trained struct {
	model    string
	params   int
	snaps    []snapshot
	accuracy float64 // on the test set (-1 without one)
	testN    int
}

// data is the training set and the test set (possibly empty) with the
// images' shape.
type data struct {
	train, test *pipeline.Dataset
	shape       nn.Shape
	source      string // what the data is, for the report
}

// loadData reads the IDX files of cfg, or draws synthetic images when
// cfg.Synthetic is set.
func loadData(cfg Config) (*data, error) {
	if cfg.Synthetic {
		return syntheticData(cfg.Seed, cfg.TrainN, cfg.TestN), nil
	}
	read := func(images, labels string, limit int) (*pipeline.Dataset, error) {
		fi, err := os.Open(images)
		if err != nil {
			return nil, err
		}
		defer fi.Close()
		fl, err := os.Open(labels)
		if err != nil {
			return nil, err
		}
		defer fl.Close()
		ds, err := pipeline.ReadIDX(fi, fl, pipeline.DefaultReadConfig())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", images, err)
		}
		if limit > 0 && limit < ds.N {
			ds = ds.Slice(0, limit)
		}
		return ds, nil
	}
	tr, err := read(cfg.TrainImages, cfg.TrainLabels, cfg.TrainN)
	if err != nil {
		return nil, err
	}
	if tr.D != 28*28 {
		return nil, fmt.Errorf("compress: %s: %d pixels an image, want 28x28", cfg.TrainImages, tr.D)
	}
	d := &data{train: tr, shape: nn.Shape{H: 28, W: 28, C: 1},
		source: fmt.Sprintf("Fashion-MNIST (%s), %d training images", cfg.TrainImages, tr.N)}
	if cfg.TestImages != "" && cfg.TestN != 0 {
		if d.test, err = read(cfg.TestImages, cfg.TestLabels, cfg.TestN); err != nil {
			return nil, err
		}
		d.source += fmt.Sprintf(", %d test images", d.test.N)
	}
	return d, nil
}

// syntheticData draws 8x8 images of 10 classes: a fixed random pattern
// per class, with noise, and pixels below 0.3 set to 0 like a dark
// background.
func syntheticData(seed uint64, trainN, testN int) *data {
	const side, classes = 8, 10
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	proto := make([][]float32, classes)
	for c := range proto {
		proto[c] = make([]float32, side*side)
		for i := range proto[c] {
			proto[c][i] = rng.Float32()
		}
	}
	draw := func(n int) *pipeline.Dataset {
		ds := &pipeline.Dataset{N: n, D: side * side, X: make([]float32, n*side*side), Y: make([]int, n)}
		for s := range n {
			c := rng.IntN(classes)
			ds.Y[s] = c
			for i, p := range proto[c] {
				x := min(max(p+0.2*float32(rng.NormFloat64()), 0), 1)
				if x < 0.3 {
					x = 0
				}
				ds.X[s*side*side+i] = x
			}
		}
		return ds
	}
	trainN = max(trainN, 1)
	return &data{train: draw(trainN), test: draw(max(testN, 0)), shape: nn.Shape{H: side, W: side, C: 1},
		source: fmt.Sprintf("synthetic 8x8 images of 10 classes, %d training and %d test", trainN, max(testN, 0))}
}

// newModel builds the named model of cfg's sizes.
func newModel(kind string, cfg Config, shape nn.Shape) (*nn.Model, error) {
	switch kind {
	case "mlp":
		return nn.NewMLP(shape, cfg.MLPHidden, 10, cfg.Seed)
	case "cnn":
		c := cfg.CNN
		return nn.NewCNN(shape, c[0], c[1], c[2], 10, cfg.Seed)
	}
	return nil, fmt.Errorf("compress: model %q: want mlp or cnn", kind)
}

// phaseName names snapshot i of n: early, middle, late (more than three:
// the middle ones are all "middle").
func phaseName(i, n int) string {
	switch {
	case i == 0:
		return "early"
	case i == n-1:
		return "late"
	}
	return "middle"
}

// train runs plain SGD (no momentum) on one model for cfg.Steps batches
// of cfg.Batch images drawn without replacement from a shuffled training
// set (reshuffled every pass), and copies the gradient and parameters at
// each of cfg.Snapshots.
func train(ctx context.Context, kind string, cfg Config, d *data) (*trained, error) {
	m, err := newModel(kind, cfg, d.shape)
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x7a1))
	tr := d.train
	order := rng.Perm(tr.N)
	next := 0
	x := make([]float64, cfg.Batch*tr.D)
	y := make([]int, cfg.Batch)
	out := &trained{model: kind, params: len(m.Params)}
	for step := 1; step <= cfg.Steps; step++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		for b := range cfg.Batch {
			if next == len(order) {
				rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
				next = 0
			}
			s := order[next]
			next++
			for i, v := range tr.Row(s) {
				x[b*tr.D+i] = float64(v)
			}
			y[b] = tr.Y[s]
		}
		loss := m.Gradient(x, y, cfg.Batch)
		if i := slices.Index(cfg.Snapshots, step); i >= 0 {
			out.snaps = append(out.snaps, snapshot{model: kind, step: step, phase: phaseName(i, len(cfg.Snapshots)),
				loss: loss, grad: slices.Clone(m.Grads), params: slices.Clone(m.Params)})
		}
		for i, g := range m.Grads {
			m.Params[i] -= cfg.LR * g
		}
	}
	out.accuracy = accuracy(m, d.test)
	if d.test != nil {
		out.testN = d.test.N
	}
	return out, nil
}

// accuracy is m's share of correct predictions on ds (-1 without one).
func accuracy(m *nn.Model, ds *pipeline.Dataset) float64 {
	if ds == nil || ds.N == 0 {
		return -1
	}
	const chunk = 256
	right := 0
	x := make([]float64, chunk*ds.D)
	pred := make([]int, chunk)
	for lo := 0; lo < ds.N; lo += chunk {
		n := min(chunk, ds.N-lo)
		for i, v := range ds.X[lo*ds.D : (lo+n)*ds.D] {
			x[i] = float64(v)
		}
		m.Predict(x, n, pred[:n], nil)
		for i := range n {
			if pred[i] == ds.Y[lo+i] {
				right++
			}
		}
	}
	return float64(right) / float64(ds.N)
}

// payloads turns a snapshot into its payloads: gradient and parameters in
// every dense format, and the gradient's top-k selections.
func payloads(s snapshot, pcts []float64) ([]payload, error) {
	var out []payload
	for _, src := range []struct {
		name string
		v    []float64
	}{{"grad", s.grad}, {"params", s.params}} {
		for _, f := range denseFormats {
			b, zeros, err := dense(f, src.v)
			if err != nil {
				return nil, err
			}
			out = append(out, payload{source: src.name, format: f, elems: len(src.v), zeros: zeros, data: b})
		}
	}
	tk, err := topKPayloads(s.grad, pcts)
	if err != nil {
		return nil, err
	}
	for i := range tk {
		tk[i].source = "grad"
	}
	out = append(out, tk...)
	for i := range out {
		out[i].model, out[i].step, out[i].phase = s.model, s.step, s.phase
	}
	return out, nil
}
