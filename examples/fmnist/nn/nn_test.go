package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// checkLayer compares a layer's analytic gradients, with respect to its
// parameters and to its input, with central finite differences of the
// scalar L = sum(Forward(x) * r) for a random r.
func checkLayer(t *testing.T, name string, l Layer, n int, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	p := make([]float64, l.NumParams())
	g := make([]float64, l.NumParams())
	l.Bind(p, g)
	l.Init(rng)
	for i := range p {
		p[i] += 0.1 * rng.NormFloat64() // biases away from zero too
	}
	x := make([]float64, n*l.In())
	for i := range x {
		x[i] = rng.NormFloat64()
	}
	r := make([]float64, n*l.Out())
	for i := range r {
		r[i] = rng.NormFloat64()
	}
	loss := func() float64 {
		y := l.Forward(x, n)
		s := 0.0
		for i, v := range y {
			s += v * r[i]
		}
		return s
	}
	loss()
	clear(g)
	dx := append([]float64(nil), l.Backward(r, n)...)
	const h = 1e-6
	check := func(what string, v []float64, i int, analytic float64) {
		old := v[i]
		v[i] = old + h
		up := loss()
		v[i] = old - h
		down := loss()
		v[i] = old
		num := (up - down) / (2 * h)
		if math.Abs(num-analytic) > 1e-5*math.Max(1, math.Abs(num)) {
			t.Fatalf("%s: d/d%s[%d]: analytic %.9g, numeric %.9g", name, what, i, analytic, num)
		}
	}
	// Every parameter and input of small layers; a random sample of big ones.
	for _, i := range sample(rng, len(p), 300) {
		check("param", p, i, g[i])
	}
	for _, i := range sample(rng, len(x), 300) {
		check("x", x, i, dx[i])
	}
}

func sample(rng *rand.Rand, n, k int) []int {
	if n <= k {
		out := make([]int, n)
		for i := range out {
			out[i] = i
		}
		return out
	}
	out := make([]int, k)
	for i := range out {
		out[i] = rng.IntN(n)
	}
	return out
}

// TestLayerGradients: every layer's backward pass matches finite
// differences, on batches of 1 and 3.
func TestLayerGradients(t *testing.T) {
	for _, n := range []int{1, 3} {
		checkLayer(t, "dense", NewDense(7, 5), n, 1)
		checkLayer(t, "relu", NewReLU(11), n, 2)
		checkLayer(t, "conv 1->3 k3", NewConv(Shape{6, 5, 1}, 3, 3), n, 3)
		checkLayer(t, "conv 2->4 k5", NewConv(Shape{6, 6, 2}, 4, 5), n, 4)
		checkLayer(t, "pool", NewPool(Shape{4, 6, 3}), n, 5)
	}
}

// TestModelGradients: the whole models' gradients of the cross-entropy
// match finite differences (on small images, for speed), and the loss of
// a fresh model is near log(classes).
func TestModelGradients(t *testing.T) {
	in, classes, n := Shape{8, 8, 1}, 10, 4
	rng := rand.New(rand.NewPCG(7, 7))
	x := make([]float64, n*in.Size())
	for i := range x {
		x[i] = rng.Float64()
	}
	y := []int{3, 0, 9, 3}
	for _, kind := range append(Kinds, "cnn 3,5,7") {
		var m *Model
		var err error
		if kind == "cnn 3,5,7" {
			m, err = NewCNN(in, 3, 5, 7, classes, 42)
		} else {
			m, err = New(kind, in, classes, 42)
		}
		if err != nil {
			t.Fatal(err)
		}
		loss := m.Gradient(x, y, n)
		if math.Abs(loss-math.Log(float64(classes))) > 1.5 {
			t.Fatalf("%s: initial loss %v, want about log 10", kind, loss)
		}
		g := append([]float64(nil), m.Grads...)
		const h = 1e-6
		for _, i := range sample(rng, len(m.Params), 200) {
			old := m.Params[i]
			m.Params[i] = old + h
			up := m.Gradient(x, y, n)
			m.Params[i] = old - h
			down := m.Gradient(x, y, n)
			m.Params[i] = old
			num := (up - down) / (2 * h)
			if math.Abs(num-g[i]) > 1e-6*math.Max(1, math.Abs(num)) {
				t.Fatalf("%s: param %d: analytic %.9g, numeric %.9g", kind, i, g[i], num)
			}
		}
	}
}

// TestModelLearns: a few hundred SGD steps on a separable toy problem take
// every model from chance to near-perfect training accuracy.
func TestModelLearns(t *testing.T) {
	in, classes := Shape{8, 8, 1}, 3
	rng := rand.New(rand.NewPCG(3, 3))
	const n = 30
	x := make([]float64, n*in.Size())
	y := make([]int, n)
	for i := range n {
		y[i] = i % classes
		// Class c lights up rows 2c..2c+1, plus noise.
		for p := range in.Size() {
			v := 0.1 * rng.Float64()
			if p/in.W/2 == y[i] {
				v += 1
			}
			x[i*in.Size()+p] = v
		}
	}
	for _, kind := range Kinds {
		m, err := New(kind, in, classes, 1)
		if err != nil {
			t.Fatal(err)
		}
		for range 200 {
			m.Gradient(x, y, n)
			for j, g := range m.Grads {
				m.Params[j] -= 0.1 * g
			}
		}
		pred := make([]int, n)
		m.Predict(x, n, pred, nil)
		right := 0
		for i := range pred {
			if pred[i] == y[i] {
				right++
			}
		}
		if right < n-1 {
			t.Fatalf("%s: %d of %d right after training", kind, right, n)
		}
	}
}

// TestSameSeedSameModel: the same seed gives the same weights, another
// seed other weights, and a bad stack is an error.
func TestSameSeedSameModel(t *testing.T) {
	a, _ := New("cnn", Shape{28, 28, 1}, 10, 5)
	b, _ := New("cnn", Shape{28, 28, 1}, 10, 5)
	c, _ := New("cnn", Shape{28, 28, 1}, 10, 6)
	same, differ := true, false
	for i := range a.Params {
		same = same && a.Params[i] == b.Params[i]
		differ = differ || a.Params[i] != c.Params[i]
	}
	if !same || !differ {
		t.Fatalf("same seed same weights %v, other seed other weights %v", same, differ)
	}
	for _, hidden := range [][]int{{256, 128}, {7}, {}} {
		m, err := NewMLP(Shape{28, 28, 1}, hidden, 10, 1)
		if err != nil || len(m.Params) != MLPParams(784, hidden, 10) {
			t.Fatalf("hidden %v: %d parameters, MLPParams says %d (%v)", hidden, len(m.Params), MLPParams(784, hidden, 10), err)
		}
	}
	if _, err := NewModel("bad", 1, NewDense(4, 3), NewDense(2, 1)); err == nil {
		t.Fatal("a stack whose sizes do not match was accepted")
	}
	if _, err := New("resnet", Shape{28, 28, 1}, 10, 1); err == nil {
		t.Fatal("an unknown model was accepted")
	}
}

func BenchmarkGradient(b *testing.B) {
	for _, kind := range Kinds {
		b.Run(kind, func(b *testing.B) {
			m, _ := New(kind, Shape{28, 28, 1}, 10, 1)
			const n = 64
			x := make([]float64, n*784)
			for i := range x {
				x[i] = float64(i%255) / 255
			}
			y := make([]int, n)
			for b.Loop() {
				m.Gradient(x, y, n)
			}
		})
	}
}

// TestGradientEach: GradientEach calls back once per layer with
// parameters, last layer first, when that layer's gradient already holds
// its final value; it leaves the same gradients and loss as Gradient, bit
// for bit; the layers' ranges tile the parameters; and an empty batch
// still reports every layer (with zero gradients).
func TestGradientEach(t *testing.T) {
	in, classes, n := Shape{8, 8, 1}, 10, 3
	rng := rand.New(rand.NewPCG(9, 9))
	x := make([]float64, n*in.Size())
	for i := range x {
		x[i] = rng.Float64()
	}
	y := []int{1, 7, 4}
	for _, kind := range Kinds {
		m, err := New(kind, in, classes, 3)
		if err != nil {
			t.Fatal(err)
		}
		var want []int // layers with parameters, last first
		off := 0
		for i := len(m.Layers) - 1; i >= 0; i-- {
			if m.Layers[i].NumParams() > 0 {
				want = append(want, i)
			}
		}
		for i := range m.Layers {
			lo, hi := m.ParamRange(i)
			if lo != off || hi-lo != m.Layers[i].NumParams() {
				t.Fatalf("%s: layer %d: range [%d,%d), want [%d,%d)", kind, i, lo, hi, off, off+m.Layers[i].NumParams())
			}
			off = hi
		}
		if off != len(m.Params) {
			t.Fatalf("%s: ranges end at %d of %d parameters", kind, off, len(m.Params))
		}
		lossAll := m.Gradient(x, y, n)
		all := append([]float64(nil), m.Grads...)
		var got []int
		seen := make([][]float64, len(m.Layers)) // each layer's slice when reported
		loss := m.GradientEach(x, y, n, func(layer int) {
			got = append(got, layer)
			lo, hi := m.ParamRange(layer)
			seen[layer] = append([]float64(nil), m.Grads[lo:hi]...)
		})
		if loss != lossAll || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: loss %v (Gradient %v), layers reported %v, want %v", kind, loss, lossAll, got, want)
		}
		for j := range all {
			if m.Grads[j] != all[j] {
				t.Fatalf("%s: gradient %d: %v, Gradient gave %v", kind, j, m.Grads[j], all[j])
			}
		}
		for _, i := range want {
			lo, _ := m.ParamRange(i)
			nonzero := false
			for j, v := range seen[i] {
				if v != all[lo+j] {
					t.Fatalf("%s: layer %d reported with gradient %d at %v, final %v", kind, i, lo+j, v, all[lo+j])
				}
				nonzero = nonzero || v != 0
			}
			if !nonzero {
				t.Fatalf("%s: layer %d reported with an all-zero gradient", kind, i)
			}
		}
		got = got[:0]
		if loss := m.GradientEach(nil, nil, 0, func(layer int) { got = append(got, layer) }); loss != 0 || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: empty batch: loss %v, layers reported %v, want %v", kind, loss, got, want)
		}
		for j, v := range m.Grads {
			if v != 0 {
				t.Fatalf("%s: empty batch left gradient %d at %v", kind, j, v)
			}
		}
	}
}
