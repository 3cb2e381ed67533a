package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"

	"github.com/gorun/gorun/pipeline"
)

const (
	side    = 28
	pixels  = side * side
	classes = 10
)

// dataset is images (pixels float64 each) and their labels: the test set
// as the model evaluates it, and the stand-in -data synthetic generates.
// The training set lives in a pipeline.Pipeline.
type dataset struct {
	x []float64
	y []int
}

func (d *dataset) len() int                    { return len(d.y) }
func (d *dataset) append(img []float64, l int) { d.x, d.y = append(d.x, img...), append(d.y, l) }

// DefaultData is where Debian's dataset-fashion-mnist package puts the
// original files.
const DefaultData = "/usr/share/datasets/fashion-mnist"

// readSet reads Fashion-MNIST (or MNIST) in its original IDX files,
// gzipped as distributed: {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz,
// with pipeline.ReadIDX (pixels scaled to [0, 1], sizes checked before
// allocating, a malformed file reported with its byte offset). limit > 0
// keeps the first limit samples (the rest is let go). The images must be
// 28x28 and the labels below 10.
func readSet(dir, prefix string, limit int) (*pipeline.Dataset, error) {
	images := filepath.Join(dir, prefix+"-images-idx3-ubyte.gz")
	labels := filepath.Join(dir, prefix+"-labels-idx1-ubyte.gz")
	fi, err := os.Open(images)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: no Fashion-MNIST here (on Debian or Ubuntu: apt-get install dataset-fashion-mnist, which puts it in %s; or -data DIR with the original .gz files, or -data synthetic)", images, DefaultData)
	}
	if err != nil {
		return nil, err
	}
	defer fi.Close()
	fl, err := os.Open(labels)
	if err != nil {
		return nil, err
	}
	defer fl.Close()
	d, err := pipeline.ReadIDX(fi, fl, pipeline.DefaultReadConfig())
	if err != nil {
		return nil, fmt.Errorf("%s (%s): %w", prefix, dir, err)
	}
	if d.D != pixels {
		return nil, fmt.Errorf("%s: images of %d pixels, want %dx%d", images, d.D, side, side)
	}
	for i, l := range d.Y {
		if l < 0 || l >= classes {
			return nil, fmt.Errorf("%s: label %d of sample %d", labels, l, i)
		}
	}
	if limit > 0 && limit < d.N {
		// A copy, so that the whole file's samples can be let go.
		d = &pipeline.Dataset{N: limit, D: d.D, X: slices.Clone(d.X[:limit*d.D]), Y: slices.Clone(d.Y[:limit])}
	}
	return d, nil
}

// toPipeline is d as a pipeline.Dataset (float32 features).
func toPipeline(d *dataset) *pipeline.Dataset {
	p := &pipeline.Dataset{N: d.len(), D: pixels, X: make([]float32, len(d.x)), Y: slices.Clone(d.y)}
	for i, v := range d.x {
		p.X[i] = float32(v)
	}
	return p
}

// fromPipeline is d as the model's float64 dataset.
func fromPipeline(d *pipeline.Dataset) *dataset {
	out := &dataset{x: make([]float64, len(d.X)), y: slices.Clone(d.Y)}
	for i, v := range d.X {
		out.x[i] = float64(v)
	}
	return out
}

// pipelineConfig is the pipeline -standardize, -filter, -sampling and
// -seed ask for. Without -standardize the pixels stay as read (scaled to
// [0, 1]), as before the pipeline.
func pipelineConfig(o options) pipeline.Config {
	cfg := pipeline.DefaultConfig()
	cfg.Seed = o.seed
	cfg.Standardize = o.standardize
	cfg.FilterTol = o.filter
	cfg.Replacement = o.sampling == "resample"
	return cfg
}

// prepare builds the training pipeline over train and runs its Prepare
// over g (every rank, at the same point, when g is the job's), then
// standardizes test with the training statistics: the model must see
// test inputs as it saw the training ones. The filter leaves the test set
// whole.
func prepare(ctx context.Context, o options, train, test *pipeline.Dataset, g pipeline.Group) (*pipeline.Pipeline, pipeline.Report, error) {
	cfg := pipelineConfig(o)
	p, err := pipeline.New(train, cfg)
	if err != nil {
		return nil, pipeline.Report{}, err
	}
	rep, err := p.Prepare(ctx, g)
	if err != nil {
		return nil, rep, err
	}
	if cfg.Standardize {
		rep.Stats.Standardize(test, cfg.Epsilon)
	}
	return p, rep, nil
}

// alone is a pipeline.Group of one: a rank that computes the statistics
// over the whole data set by itself (a restarted rank, whose peers are
// training and will not join a Prepare; and tests).
type alone struct{}

func (alone) Index() int                                    { return 0 }
func (alone) Size() int                                     { return 1 }
func (alone) AllReduceSum(context.Context, []float64) error { return nil }

// synthetic makes a Fashion-MNIST-shaped stand-in when the real files are
// not at hand: each class is a fixed pattern of a few soft blobs on the
// 28x28 grid, and each sample is its class's pattern, shifted by up to a
// pixel, with noise. Every rank makes the same data from seed.
func synthetic(seed uint64, n int) *dataset {
	rng := rand.New(rand.NewPCG(seed, 99))
	proto := make([][]float64, classes)
	prng := rand.New(rand.NewPCG(12345, 6789)) // the classes never change
	for k := range proto {
		proto[k] = make([]float64, pixels)
		for range 4 {
			cx, cy, r := 4+prng.Float64()*20, 4+prng.Float64()*20, 2+prng.Float64()*4
			for y := range side {
				for x := range side {
					d2 := (float64(x)-cx)*(float64(x)-cx) + (float64(y)-cy)*(float64(y)-cy)
					proto[k][y*side+x] += math.Exp(-d2 / (2 * r * r))
				}
			}
		}
	}
	d := &dataset{}
	img := make([]float64, pixels)
	for range n {
		k := rng.IntN(classes)
		dx, dy := rng.IntN(3)-1, rng.IntN(3)-1
		for y := range side {
			for x := range side {
				sx, sy := min(max(x+dx, 0), side-1), min(max(y+dy, 0), side-1)
				v := 0.5*proto[k][sy*side+sx] + 0.8*rng.NormFloat64()
				img[y*side+x] = min(max(v, 0), 1)
			}
		}
		d.append(img, k)
	}
	return d
}
