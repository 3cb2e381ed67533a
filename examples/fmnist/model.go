package main

import "math"

// The model is softmax regression: weights W (classes x pixels) followed
// by biases b, flattened into one vector of params floats.
const params = classes*pixels + classes

// gradient adds the mean cross-entropy gradient over idx to g (zeroed
// first) and returns the mean loss.
func gradient(w []float64, d *dataset, idx []int, g []float64) float64 {
	clear(g)
	var logits [classes]float64
	loss := 0.0
	for _, i := range idx {
		x := d.image(i)
		probs(w, x, &logits)
		loss -= math.Log(max(logits[d.y[i]], 1e-12))
		logits[d.y[i]]--
		for k := range classes {
			row := g[k*pixels : (k+1)*pixels]
			e := logits[k]
			for j, v := range x {
				row[j] += e * v
			}
			g[classes*pixels+k] += e
		}
	}
	if len(idx) > 0 {
		inv := 1 / float64(len(idx))
		for j := range g {
			g[j] *= inv
		}
		loss *= inv
	}
	return loss
}

// probs writes the softmax of W x + b into out.
func probs(w, x []float64, out *[classes]float64) {
	top := math.Inf(-1)
	for k := range classes {
		s := w[classes*pixels+k]
		row := w[k*pixels : (k+1)*pixels]
		for j, v := range x {
			s += row[j] * v
		}
		out[k] = s
		top = max(top, s)
	}
	sum := 0.0
	for k := range out {
		out[k] = math.Exp(out[k] - top)
		sum += out[k]
	}
	for k := range out {
		out[k] /= sum
	}
}

// accuracy is the share of d classified right by w.
func accuracy(w []float64, d *dataset) float64 {
	var p [classes]float64
	right := 0
	for i := range d.len() {
		probs(w, d.image(i), &p)
		best := 0
		for k := range p {
			if p[k] > p[best] {
				best = k
			}
		}
		if best == d.y[i] {
			right++
		}
	}
	return float64(right) / float64(max(1, d.len()))
}
