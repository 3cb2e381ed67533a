package main

import (
	"context"
	"fmt"

	"github.com/gorun/gorun/collective"
	"github.com/gorun/gorun/collective/powersgd"
	"github.com/gorun/gorun/examples/fmnist/nn"
)

// exchange is how the ring averages the gradients over the ranks, the
// one place that chooses among the ways (a hub mode pushes through
// hubPush instead):
//
//   - full precision (-wire full, the default): the float64 gradients in
//     buckets of a collective.Bucketer, each bucket's all-reduce started
//     during backward as soon as its layers are done;
//   - float32 (-wire float32|fp16|bf16): the same buckets (the same
//     layers in each, -bucket-mb counting the float64 gradient), reduced
//     as float32 by a Bucketer[float32] on a Comm whose Config.Wire is
//     WireFull for float32, so that each bucket crosses the ring as plain
//     float32, 4 bytes an element (the baseline the 2-byte formats are
//     compared with), or the wire format for fp16 and bf16, 2 bytes an
//     element (the collective keeps buffers of at most Config.SmallBytes
//     at full float32). Each layer's gradient is copied into its float32
//     buffer divided by the number of ranks, as it becomes final, so
//     that the sum is the average and cannot overflow fp16 where the
//     average does not (Horovod's gradient_predivide_factor at the number
//     of ranks);
//   - PowerSGD (-powersgd R, after -powersgd-start iterations of the
//     first way): after backward, every dense layer's and convolution's
//     weight gradient as an out x fan-in float32 matrix (a convolution's
//     out x in·k·k, as PyTorch lays it out) approximated at rank R with
//     error feedback and warm start, the biases and the stop vote
//     averaged exactly, all in one powersgd.Compressor.AllReduceBatch:
//     three all-reduces a step, as PyTorch's hook per bucket.
//
// Every rank must make the same exchange with the same flags.
type exchange struct {
	wk   *worker
	wire collective.Wire
	cfg  collective.Config // the Comm's, for the wire bytes model

	b64 *collective.Bucketer[float64]
	b32 *collective.Bucketer[float32] // -wire float32|fp16|bf16
	g32 [][]float32                   // b32's buffers: each gradient's (ringGrads' order)
	of  []int                         // layer -> index in ringGrads (-1: no parameters)

	psgd    *powersgd.Compressor
	start   int // plain iterations before PowerSGD
	mats    []powersgd.Matrix
	layouts []psgdPart
	arena   []float32

	lowRank bool  // this step goes through PowerSGD
	sent    int64 // bytes this rank sent in the last step (the model of wireBytes)
}

// psgdPart is where one of PowerSGD's matrices lies in the gradient: at
// lo, rows x cols, transposed (stored fan-in x out, sent out x fan-in) or
// not.
type psgdPart struct {
	lo, rows, cols int
	transposed     bool
}

func newExchange(wk *worker, cfg collective.Config) (*exchange, error) {
	e := &exchange{wk: wk, wire: wk.o.wire, cfg: cfg, start: wk.o.powersgdStart}
	if wk.o.powersgd > 0 {
		pc := powersgd.DefaultConfig()
		pc.Rank, pc.Seed = wk.o.powersgd, wk.o.seed
		c, err := powersgd.New(pc)
		if err != nil {
			return nil, err
		}
		e.psgd = c
		e.layout()
	}
	return e, e.renew()
}

// renew makes the Bucketer for the current view (at the start, and after
// an elastic view change, which fails the old one with every collective
// of the step) and forgets PowerSGD's Qs and residuals on every rank
// alike, as powersgd asks after a failed call.
func (e *exchange) renew() error {
	wk := e.wk
	grads, of := wk.ringGrads()
	e.of = of
	cfg := bucketConfig(wk.o)
	var err error
	if !wk.o.float32Ring() {
		e.b64, err = collective.NewBucketer(wk.c, grads, collective.Sum, cfg)
	} else {
		// The same layers in each bucket as at full precision: float32
		// buffers hold half the bytes.
		cfg.CapBytes, cfg.FirstBytes = max(1, cfg.CapBytes/2), max(1, cfg.FirstBytes/2)
		if e.g32 == nil {
			e.g32 = make([][]float32, len(grads))
			for i, g := range grads {
				e.g32[i] = make([]float32, len(g))
			}
		}
		e.b32, err = collective.NewBucketer(wk.c, e.g32, collective.Sum, cfg)
	}
	if e.psgd != nil {
		e.psgd.Reset()
	}
	return err
}

// begin decides how step iter (0 first) is exchanged.
func (e *exchange) begin(iter int) { e.lowRank = e.psgd != nil && iter >= e.start }

// ready is called during backward with each layer whose gradient in
// wk.g is final.
func (e *exchange) ready(ctx context.Context, layer int) error {
	switch {
	case e.lowRank:
		return nil // PowerSGD runs after backward
	case e.b32 != nil:
		i := e.of[layer]
		lo, hi := e.wk.m.ParamRange(layer)
		inv := 1 / float64(e.wk.c.Size())
		for j, v := range e.wk.g[lo:hi] {
			e.g32[i][j] = float32(v * inv)
		}
		return e.b32.Ready(ctx, i)
	}
	return e.b64.Ready(ctx, e.of[layer])
}

// finish, after backward and the stop vote (wk.g's last element), ends
// the exchange: wk.g then holds the ranks' average times scale(), and
// their vote summed (or averaged: above 0 is a stop either way).
func (e *exchange) finish(ctx context.Context) error {
	wk := e.wk
	params := len(wk.w)
	switch {
	case e.lowRank:
		return e.powerSGD(ctx)
	case e.b32 != nil:
		e.g32[0][0] = float32(wk.g[params])
		if err := e.b32.Ready(ctx, 0); err != nil {
			return err
		}
		if err := e.b32.Wait(ctx); err != nil {
			return err
		}
		grads, _ := wk.ringGrads()
		for i, g := range grads {
			for j, v := range e.g32[i] {
				g[j] = float64(v)
			}
		}
		e.sent = 0
		for _, s := range e.b32.Stats() {
			e.sent += ringBytes(wk.c.Size(), s.Bytes/4*e.elemBytes(s.Bytes))
		}
		return nil
	}
	if err := e.b64.Ready(ctx, 0); err != nil {
		return err
	}
	if err := e.b64.Wait(ctx); err != nil {
		return err
	}
	// The ring sends 2(N-1)/N of the buffer per all-reduce.
	n := wk.c.Size()
	e.sent = int64(2 * (n - 1) * len(wk.g) * 8 / max(1, n))
	return nil
}

// scale is what finish's wk.g is to be multiplied by for the average:
// 1/N after a sum, 1 where the average came out.
func (e *exchange) scale() float64 {
	if e.b64 != nil && !e.lowRank {
		return 1 / float64(e.wk.c.Size())
	}
	return 1
}

// stats is the last step's buckets (nil after a PowerSGD step, which has
// none).
func (e *exchange) stats() []collective.BucketStat {
	switch {
	case e.lowRank:
		return nil
	case e.b32 != nil:
		return e.b32.Stats()
	}
	return e.b64.Stats()
}

// elemBytes is the bytes an element of a float32 bucket of nbytes takes
// on the wire: the wire format's, unless the collective keeps the buffer
// at full precision (Config.Wire: the small-buffer algorithms, which
// Auto picks up to Config.SmallBytes, and Direct and Doubling always).
func (e *exchange) elemBytes(nbytes int) int {
	switch e.cfg.Algorithm {
	case collective.Auto:
		if nbytes <= e.cfg.SmallBytes {
			return 4
		}
	case collective.Direct, collective.Doubling:
		return 4
	}
	return e.wire.Size()
}

// ringBytes is what one rank sends in a ring all-reduce of nbytes over n
// ranks: 2(n-1)/n of the buffer (halving and doubling moves as much).
func ringBytes(n, nbytes int) int64 { return int64(2 * (n - 1) * nbytes / max(1, n)) }

// layout lays out PowerSGD's matrices once: per layer with parameters,
// a dense layer's or convolution's weight gradient as an out x fan-in
// matrix (stored fan-in x out: transposed on the way), its bias as a 1 x
// out vector, any other layer's parameters as one vector; then the stop
// vote, 1 x 1. Vectors and 1 x 1 go dense, exact.
func (e *exchange) layout() {
	m := e.wk.m
	var parts []psgdPart
	var keys []string
	for i, l := range m.Layers {
		n := l.NumParams()
		if n == 0 {
			continue
		}
		lo, _ := m.ParamRange(i)
		out := 0
		switch l := l.(type) {
		case *nn.Dense:
			out = l.Out()
		case *nn.Conv:
			out = l.OutShape().C
		}
		if out > 0 && n > out && (n-out)%out == 0 {
			fanIn := (n - out) / out
			parts = append(parts, psgdPart{lo, out, fanIn, true}, psgdPart{lo + fanIn*out, 1, out, false})
			keys = append(keys, fmt.Sprintf("layer%d.weight", i), fmt.Sprintf("layer%d.bias", i))
			continue
		}
		parts = append(parts, psgdPart{lo, 1, n, false})
		keys = append(keys, fmt.Sprintf("layer%d", i))
	}
	parts = append(parts, psgdPart{len(e.wk.w), 1, 1, false})
	keys = append(keys, "vote")
	total := 0
	for _, p := range parts {
		total += p.rows * p.cols
	}
	e.arena = make([]float32, total)
	e.layouts, e.mats = parts, make([]powersgd.Matrix, len(parts))
	off := 0
	for k, p := range parts {
		e.mats[k] = powersgd.Matrix{Key: keys[k], Grad: e.arena[off : off+p.rows*p.cols], Rows: p.rows, Cols: p.cols}
		off += p.rows * p.cols
	}
}

// powerSGD averages wk.g (and the vote) by PowerSGD, in place.
func (e *exchange) powerSGD(ctx context.Context) error {
	g := e.wk.g
	for k, p := range e.layouts {
		dst := e.mats[k].Grad
		src := g[p.lo : p.lo+p.rows*p.cols]
		if p.transposed { // src is cols x rows
			for r := range p.rows {
				for c := range p.cols {
					dst[r*p.cols+c] = float32(src[c*p.rows+r])
				}
			}
			continue
		}
		for j, v := range src {
			dst[j] = float32(v)
		}
	}
	before := e.psgd.Stats().Bytes
	if err := e.psgd.AllReduceBatch(ctx, e.wk.c, e.mats); err != nil {
		return err
	}
	e.sent = ringBytes(e.wk.c.Size(), int(e.psgd.Stats().Bytes-before))
	for k, p := range e.layouts {
		src := e.mats[k].Grad
		dst := g[p.lo : p.lo+p.rows*p.cols]
		if p.transposed {
			for r := range p.rows {
				for c := range p.cols {
					dst[c*p.rows+r] = float64(src[r*p.cols+c])
				}
			}
			continue
		}
		for j, v := range src {
			dst[j] = float64(v)
		}
	}
	return nil
}
