// Package nn is the small neural-network library behind the Fashion-MNIST
// trainers: dense, convolution (im2col + GEMM), ReLU and 2x2 max-pool
// layers, a softmax cross-entropy loss, and three models built from them
// (softmax regression, an MLP, a small CNN). The arithmetic runs on gonum's
// BLAS (blas64 GEMM and vector kernels).
//
// A Model keeps all its parameters in one flat vector, and its gradients
// in another of the same length, so that data-parallel training moves
// them with one AllReduce (ring) or one key (ParamHub); GradientEach
// tells when each layer's part of the gradients is final during
// backward, so that the ring can reduce them in buckets while backward
// goes on (ParamRange says where each layer's part lies). Everything is
// deterministic: the same seed gives the same initial weights on every
// rank, and the same batches give the same gradients bit for bit.
package nn

import (
	"fmt"
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
)

// Layer is one stage of a model. Activations are row-major batches: n
// samples of In() (or Out()) values each; images are height x width x
// channels, channels fastest.
type Layer interface {
	// In and Out are the values per sample that the layer takes and
	// gives.
	In() int
	Out() int
	// NumParams is the length of the layer's slice of the model's
	// parameter vector; Bind gives it that slice and the matching slice
	// of the gradient vector.
	NumParams() int
	Bind(params, grads []float64)
	// Init draws the layer's initial parameters.
	Init(rng *rand.Rand)
	// Forward maps a batch; the result belongs to the layer until its
	// next Forward. Backward takes the loss's gradient with respect to
	// the last Forward's output, adds the parameters' gradients to the
	// bound gradient slice, and returns the gradient with respect to the
	// input (the layer's until its next Backward).
	Forward(x []float64, n int) []float64
	Backward(dy []float64, n int) []float64
}

// grow returns b resized to n values, reusing its array when it can.
func grow(b []float64, n int) []float64 {
	if cap(b) < n {
		return make([]float64, n)
	}
	return b[:n]
}

func general(rows, cols int, data []float64) blas64.General {
	return blas64.General{Rows: rows, Cols: cols, Stride: cols, Data: data[:rows*cols]}
}

// Dense is y = x W + b, with W In x Out.
type Dense struct {
	in, out int
	w, b    []float64 // views of the model's parameters
	dw, db  []float64
	x       []float64 // the last input (not a copy)
	y, dx   []float64
}

// NewDense returns a dense layer from in to out values.
func NewDense(in, out int) *Dense { return &Dense{in: in, out: out} }

func (d *Dense) In() int        { return d.in }
func (d *Dense) Out() int       { return d.out }
func (d *Dense) NumParams() int { return d.in*d.out + d.out }

func (d *Dense) Bind(p, g []float64) {
	d.w, d.b = p[:d.in*d.out], p[d.in*d.out:d.NumParams()]
	d.dw, d.db = g[:d.in*d.out], g[d.in*d.out:d.NumParams()]
}

// Init draws W from He's normal distribution; b starts at zero.
func (d *Dense) Init(rng *rand.Rand) { heInit(rng, d.w, d.in); clear(d.b) }

func heInit(rng *rand.Rand, w []float64, fanIn int) {
	s := math.Sqrt(2 / float64(fanIn))
	for i := range w {
		w[i] = s * rng.NormFloat64()
	}
}

func (d *Dense) Forward(x []float64, n int) []float64 {
	d.x = x
	d.y = grow(d.y, n*d.out)
	for i := range n {
		copy(d.y[i*d.out:(i+1)*d.out], d.b)
	}
	blas64.Gemm(blas.NoTrans, blas.NoTrans, 1, general(n, d.in, x), general(d.in, d.out, d.w), 1, general(n, d.out, d.y))
	return d.y
}

func (d *Dense) Backward(dy []float64, n int) []float64 {
	// dW += x^T dy; db += column sums of dy; dx = dy W^T.
	blas64.Gemm(blas.Trans, blas.NoTrans, 1, general(n, d.in, d.x), general(n, d.out, dy), 1, general(d.in, d.out, d.dw))
	db := blas64.Vector{N: d.out, Inc: 1, Data: d.db}
	for i := range n {
		blas64.Axpy(1, blas64.Vector{N: d.out, Inc: 1, Data: dy[i*d.out : (i+1)*d.out]}, db)
	}
	d.dx = grow(d.dx, n*d.in)
	blas64.Gemm(blas.NoTrans, blas.Trans, 1, general(n, d.out, dy), general(d.in, d.out, d.w), 0, general(n, d.in, d.dx))
	return d.dx
}

// ReLU is max(0, x), elementwise.
type ReLU struct {
	size  int
	y, dx []float64
}

// NewReLU returns a ReLU over size values per sample.
func NewReLU(size int) *ReLU { return &ReLU{size: size} }

func (r *ReLU) In() int             { return r.size }
func (r *ReLU) Out() int            { return r.size }
func (r *ReLU) NumParams() int      { return 0 }
func (r *ReLU) Bind(_, _ []float64) {}
func (r *ReLU) Init(*rand.Rand)     {}
func (r *ReLU) Forward(x []float64, n int) []float64 {
	r.y = grow(r.y, n*r.size)
	for i, v := range x[:n*r.size] {
		r.y[i] = max(v, 0)
	}
	return r.y
}

func (r *ReLU) Backward(dy []float64, n int) []float64 {
	r.dx = grow(r.dx, n*r.size)
	for i, v := range r.y[:n*r.size] {
		if v > 0 {
			r.dx[i] = dy[i]
		} else {
			r.dx[i] = 0
		}
	}
	return r.dx
}

// Shape is an image's height, width and channels.
type Shape struct{ H, W, C int }

// Size is the values of one image.
func (s Shape) Size() int { return s.H * s.W * s.C }

// Conv is a 2-D convolution with K x K kernels, stride 1 and zero padding
// (K-1)/2, so the output keeps the input's height and width. It lays each
// image's patches out as rows (im2col) and multiplies them by the kernel
// matrix with one GEMM.
type Conv struct {
	in     Shape
	outC   int
	k, pad int
	w, b   []float64 // w: (k*k*in.C) x outC
	dw, db []float64
	cols   []float64 // n images' patches: (n*H*W) x (k*k*in.C)
	y, dx  []float64
	dcols  []float64
	yt, wt []float64 // transposed scratch
}

// NewConv returns a convolution from in to outC channels with k x k
// kernels (k odd).
func NewConv(in Shape, outC, k int) *Conv {
	return &Conv{in: in, outC: outC, k: k, pad: (k - 1) / 2}
}

func (c *Conv) In() int         { return c.in.Size() }
func (c *Conv) Out() int        { return c.in.H * c.in.W * c.outC }
func (c *Conv) OutShape() Shape { return Shape{c.in.H, c.in.W, c.outC} }
func (c *Conv) patch() int      { return c.k * c.k * c.in.C }
func (c *Conv) NumParams() int  { return c.patch()*c.outC + c.outC }

func (c *Conv) Bind(p, g []float64) {
	m := c.patch() * c.outC
	c.w, c.b, c.dw, c.db = p[:m], p[m:c.NumParams()], g[:m], g[m:c.NumParams()]
}

func (c *Conv) Init(rng *rand.Rand) { heInit(rng, c.w, c.patch()); clear(c.b) }

// walk calls f for every kernel position of every output pixel of n
// images that falls inside its image: row is the output pixel's row in
// the patch matrix (image after image), at the position's offset in that
// row, and pix the input pixel's offset in the batch. Positions outside
// the image (the zero padding) are skipped.
func (c *Conv) walk(n int, f func(row, at, pix int)) {
	s, k := c.in, c.k
	row := 0
	for img := range n {
		base := img * s.Size()
		for oy := range s.H {
			for ox := range s.W {
				for ky := range k {
					y := oy + ky - c.pad
					if y < 0 || y >= s.H {
						continue
					}
					for kx := range k {
						if x := ox + kx - c.pad; x >= 0 && x < s.W {
							f(row, (ky*k+kx)*s.C, base+(y*s.W+x)*s.C)
						}
					}
				}
				row++
			}
		}
	}
}

// im2col lays out, for each output pixel of each image, the input values
// under its kernel (zeros outside the image).
func (c *Conv) im2col(x []float64, n int) {
	p, ch := c.patch(), c.in.C
	c.cols = grow(c.cols, n*c.in.H*c.in.W*p)
	clear(c.cols)
	c.walk(n, func(row, at, pix int) {
		copy(c.cols[row*p+at:row*p+at+ch], x[pix:pix+ch])
	})
}

func (c *Conv) Forward(x []float64, n int) []float64 {
	c.im2col(x, n)
	rows := n * c.in.H * c.in.W
	c.y = grow(c.y, rows*c.outC)
	for r := range rows {
		copy(c.y[r*c.outC:(r+1)*c.outC], c.b)
	}
	// y^T = W^T cols^T: gonum's kernels run along the long dimension
	// (rows) this way, 2.7x faster than y = cols W for conv2's shapes.
	c.yt = grow(c.yt, c.outC*rows)
	blas64.Gemm(blas.Trans, blas.Trans, 1, general(c.patch(), c.outC, c.w), general(rows, c.patch(), c.cols), 0, general(c.outC, rows, c.yt))
	for r := range rows {
		y := c.y[r*c.outC : (r+1)*c.outC]
		for o := range y {
			y[o] += c.yt[o*rows+r]
		}
	}
	return c.y
}

func (c *Conv) Backward(dy []float64, n int) []float64 {
	rows, p := n*c.in.H*c.in.W, c.patch()
	// dW^T = dy^T cols, then added to dW (3.5x faster than dW += cols^T dy).
	c.wt = grow(c.wt, c.outC*p)
	blas64.Gemm(blas.Trans, blas.NoTrans, 1, general(rows, c.outC, dy), general(rows, p, c.cols), 0, general(c.outC, p, c.wt))
	for i := range p {
		for o := range c.outC {
			c.dw[i*c.outC+o] += c.wt[o*p+i]
		}
	}
	db := blas64.Vector{N: c.outC, Inc: 1, Data: c.db}
	for r := range rows {
		blas64.Axpy(1, blas64.Vector{N: c.outC, Inc: 1, Data: dy[r*c.outC : (r+1)*c.outC]}, db)
	}
	c.dcols = grow(c.dcols, rows*p)
	// dcols = dy W^T with W^T laid out first (7x faster than letting
	// Gemm transpose it: its kernel would take dot products of outC).
	for i := range p {
		for o := range c.outC {
			c.wt[o*p+i] = c.w[i*c.outC+o]
		}
	}
	blas64.Gemm(blas.NoTrans, blas.NoTrans, 1, general(rows, c.outC, dy), general(c.outC, p, c.wt), 0, general(rows, p, c.dcols))
	// col2im: add each patch's gradient back where it came from.
	ch := c.in.C
	c.dx = grow(c.dx, n*c.in.Size())
	clear(c.dx)
	c.walk(n, func(row, at, pix int) {
		d := c.dx[pix : pix+ch]
		for i, v := range c.dcols[row*p+at : row*p+at+ch] {
			d[i] += v
		}
	})
	return c.dx
}

// Pool is 2 x 2 max-pooling with stride 2 (height and width even).
type Pool struct {
	in    Shape
	arg   []int // for each output value, the input index of its maximum
	y, dx []float64
}

// NewPool returns a 2 x 2 max-pool over images of shape in.
func NewPool(in Shape) *Pool { return &Pool{in: in} }

func (p *Pool) In() int             { return p.in.Size() }
func (p *Pool) Out() int            { return p.OutShape().Size() }
func (p *Pool) OutShape() Shape     { return Shape{p.in.H / 2, p.in.W / 2, p.in.C} }
func (p *Pool) NumParams() int      { return 0 }
func (p *Pool) Bind(_, _ []float64) {}
func (p *Pool) Init(*rand.Rand)     {}

func (p *Pool) Forward(x []float64, n int) []float64 {
	s, o := p.in, p.OutShape()
	p.y = grow(p.y, n*o.Size())
	if cap(p.arg) < n*o.Size() {
		p.arg = make([]int, n*o.Size())
	}
	p.arg = p.arg[:n*o.Size()]
	i := 0
	for img := range n {
		base := img * s.Size()
		for oy := range o.H {
			for ox := range o.W {
				for ch := range s.C {
					best := base + ((2*oy)*s.W+2*ox)*s.C + ch
					for _, d := range [3][2]int{{0, 1}, {1, 0}, {1, 1}} {
						j := base + ((2*oy+d[0])*s.W+2*ox+d[1])*s.C + ch
						if x[j] > x[best] {
							best = j
						}
					}
					p.y[i], p.arg[i] = x[best], best
					i++
				}
			}
		}
	}
	return p.y
}

func (p *Pool) Backward(dy []float64, n int) []float64 {
	p.dx = grow(p.dx, n*p.in.Size())
	clear(p.dx)
	for i, j := range p.arg[:n*p.Out()] {
		p.dx[j] += dy[i]
	}
	return p.dx
}

// SoftmaxCrossEntropy returns the mean cross-entropy of softmax(logits)
// against labels over n samples of k classes, and writes its gradient
// with respect to the logits into dlogits (which must hold n*k values).
func SoftmaxCrossEntropy(logits []float64, labels []int, n, k int, dlogits []float64) float64 {
	loss := 0.0
	inv := 1 / float64(n)
	for i := range n {
		row, d := logits[i*k:(i+1)*k], dlogits[i*k:(i+1)*k]
		Softmax(row, d)
		loss -= math.Log(max(d[labels[i]], 1e-300))
		d[labels[i]]--
		for j := range d {
			d[j] *= inv
		}
	}
	return loss * inv
}

// Softmax writes the softmax of x into out.
func Softmax(x, out []float64) {
	top := math.Inf(-1)
	for _, v := range x {
		top = max(top, v)
	}
	sum := 0.0
	for j, v := range x {
		out[j] = math.Exp(v - top)
		sum += out[j]
	}
	for j := range out {
		out[j] /= sum
	}
}

// Model is a stack of layers ending in logits over Classes, with every
// parameter in Params and every gradient in Grads.
type Model struct {
	Name    string
	Layers  []Layer
	Params  []float64
	Grads   []float64
	Classes int
	dlogits []float64
}

// NewModel binds layers into a model and draws its initial parameters
// from seed (the same seed gives the same model on every rank).
func NewModel(name string, seed uint64, layers ...Layer) (*Model, error) {
	total := 0
	for i, l := range layers {
		if i > 0 && layers[i-1].Out() != l.In() {
			return nil, fmt.Errorf("nn: %s: layer %d takes %d values, layer %d gives %d", name, i, l.In(), i-1, layers[i-1].Out())
		}
		total += l.NumParams()
	}
	m := &Model{Name: name, Layers: layers, Params: make([]float64, total), Grads: make([]float64, total), Classes: layers[len(layers)-1].Out()}
	rng := rand.New(rand.NewPCG(seed, 0x6e6e))
	off := 0
	for _, l := range layers {
		k := l.NumParams()
		l.Bind(m.Params[off:off+k], m.Grads[off:off+k])
		l.Init(rng)
		off += k
	}
	return m, nil
}

// Inputs is the values per sample the model takes.
func (m *Model) Inputs() int { return m.Layers[0].In() }

// Forward returns the logits of n samples.
func (m *Model) Forward(x []float64, n int) []float64 {
	for _, l := range m.Layers {
		x = l.Forward(x, n)
	}
	return x
}

// Gradient sets Grads to the gradient of the mean cross-entropy over the
// batch (n samples x, labels y) and returns that loss.
func (m *Model) Gradient(x []float64, y []int, n int) float64 {
	return m.GradientEach(x, y, n, nil)
}

// GradientEach is Gradient that calls done(i), if done is not nil, as soon
// as layer i's slice of Grads (ParamRange) is final: during the backward
// pass, last layer first, and only for layers with parameters. A
// data-parallel trainer starts reducing a layer's gradient from done
// while backward goes on through the layers before it. done must not
// touch the model, but may read (or copy) that slice.
func (m *Model) GradientEach(x []float64, y []int, n int, done func(layer int)) float64 {
	clear(m.Grads)
	if n == 0 {
		// Nothing to learn from: every gradient is final at zero.
		for i := len(m.Layers) - 1; i >= 0; i-- {
			if done != nil && m.Layers[i].NumParams() > 0 {
				done(i)
			}
		}
		return 0
	}
	logits := m.Forward(x, n)
	m.dlogits = grow(m.dlogits, n*m.Classes)
	loss := SoftmaxCrossEntropy(logits, y, n, m.Classes, m.dlogits)
	d := m.dlogits
	for i := len(m.Layers) - 1; i >= 0; i-- {
		d = m.Layers[i].Backward(d, n)
		if done != nil && m.Layers[i].NumParams() > 0 {
			done(i)
		}
	}
	return loss
}

// ParamRange is where layer i's parameters lie in Params, and its
// gradient in Grads: [lo, hi), empty for a layer without parameters. The
// layers' ranges tile the vectors in layer order.
func (m *Model) ParamRange(i int) (lo, hi int) {
	for _, l := range m.Layers[:i] {
		lo += l.NumParams()
	}
	return lo, lo + m.Layers[i].NumParams()
}

// Predict writes the most likely class of each of n samples into out, and
// the predicted probabilities into probs if it is not nil (n*Classes).
func (m *Model) Predict(x []float64, n int, out []int, probs []float64) {
	logits := m.Forward(x, n)
	k := m.Classes
	for i := range n {
		row := logits[i*k : (i+1)*k]
		best := 0
		for j, v := range row {
			if v > row[best] {
				best = j
			}
		}
		out[i] = best
		if probs != nil {
			Softmax(row, probs[i*k:(i+1)*k])
		}
	}
}

// Kinds are the models New builds.
var Kinds = []string{"softmax", "mlp", "cnn"}

// New builds a model for images of shape in and classes classes: softmax
// (regression: one dense layer), mlp (in-256-128-classes with ReLU), or
// cnn (two 5x5 convolutions of 8 and 16 channels, each with ReLU and 2x2
// max-pooling, then dense 64 with ReLU and dense to classes).
func New(kind string, in Shape, classes int, seed uint64) (*Model, error) {
	switch kind {
	case "softmax":
		return NewModel(kind, seed, NewDense(in.Size(), classes))
	case "mlp":
		return NewMLP(in, []int{256, 128}, classes, seed)
	case "cnn":
		return NewCNN(in, 8, 16, 64, classes, seed)
	}
	return nil, fmt.Errorf("nn: model %q: want softmax, mlp or cnn", kind)
}

// NewCNN is two 5x5 convolutions of c1 and c2 channels, each with ReLU and
// 2x2 max-pooling, then a dense layer of dense units with ReLU and a
// dense layer to classes.
func NewCNN(in Shape, c1, c2, dense, classes int, seed uint64) (*Model, error) {
	if c1 < 1 || c2 < 1 || dense < 1 {
		return nil, fmt.Errorf("nn: cnn of %d, %d channels and %d dense units", c1, c2, dense)
	}
	conv1 := NewConv(in, c1, 5)
	p1 := NewPool(conv1.OutShape())
	conv2 := NewConv(p1.OutShape(), c2, 5)
	p2 := NewPool(conv2.OutShape())
	return NewModel("cnn", seed, conv1, NewReLU(conv1.Out()), p1, conv2, NewReLU(conv2.Out()), p2,
		NewDense(p2.Out(), dense), NewReLU(dense), NewDense(dense, classes))
}

// NewMLP is a multi-layer perceptron: dense layers of the hidden widths,
// each followed by ReLU, then a dense layer to classes.
func NewMLP(in Shape, hidden []int, classes int, seed uint64) (*Model, error) {
	var layers []Layer
	prev := in.Size()
	for _, h := range hidden {
		if h < 1 {
			return nil, fmt.Errorf("nn: hidden layer of %d units", h)
		}
		layers = append(layers, NewDense(prev, h), NewReLU(h))
		prev = h
	}
	return NewModel("mlp", seed, append(layers, NewDense(prev, classes))...)
}

// MLPParams is the parameter count of NewMLP's model, without building it.
func MLPParams(in int, hidden []int, classes int) int {
	n, prev := 0, in
	for _, h := range append(append([]int(nil), hidden...), classes) {
		n += prev*h + h
		prev = h
	}
	return n
}
