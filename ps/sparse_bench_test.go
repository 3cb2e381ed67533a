package ps

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gorun/gorun/reduce"
)

// benchGradient is a 1M-element float32 gradient: normal, one element in
// 20 scaled by up to 100 (a heavy tail).
func benchGradient(seed uint64) []float32 {
	return as32(gradient(rand.New(rand.NewPCG(seed, 36)), 1<<20, false))
}

// BenchmarkSparseCodec measures each codec on a real top-k selection of
// a 1M-element float32 gradient at 1 % and 10 %, and on random-k's
// values alone at 10 %: MB/s counts the selection as values plus 4-byte
// indices (what CodecRaw sends for top-k), "ratio" is the encoded size
// over that, "B/elem" the encoded bytes per selected element.
func BenchmarkSparseCodec(b *testing.B) {
	g := benchGradient(1)
	var z zstdCodec
	for _, sel := range []struct {
		method SparseMethod
		ratio  float64
	}{{TopK, 0.01}, {TopK, 0.1}, {RandomK, 0.1}} {
		s := sparseSpec{method: sel.method, dtype: reduce.Float32, n: len(g), k: SparseK(len(g), sel.ratio), seed: 3}
		raw := int64(8 * s.k)
		for _, codec := range codecs {
			s.codec = codec
			idx, vals, p := encodeFor(b, s, g, &z)
			if sel.method == RandomK {
				idx = nil
				if codec == CodecRaw {
					continue // the same as CodecVarint: values only
				}
			}
			name := fmt.Sprintf("%v%g/%v", sel.method, 100*sel.ratio, codec)
			b.Run(name+"/encode", func(b *testing.B) {
				b.SetBytes(raw)
				w, _ := s.maxWire()
				buf := make([]byte, 0, w)
				for b.Loop() {
					if _, err := appendSparse(buf[:0], codec, vals, idx, &z); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(len(p))/float64(raw), "ratio")
				b.ReportMetric(float64(len(p))/float64(s.k), "B/elem")
			})
			b.Run(name+"/decode", func(b *testing.B) {
				b.SetBytes(raw)
				for b.Loop() {
					if _, _, err := decodeSparse(s, p, &z); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(len(p))/float64(raw), "ratio")
			})
		}
	}
}

// BenchmarkSparsePushRound: 4 workers push-pull a 1M-element float32
// key through one hub over loopback, dense and sparse (error feedback,
// the default codec). "wire-B/round" is every byte in and out of the hub
// a round (the dense pulls included), "push-B/round" the pushes' alone.
func BenchmarkSparsePushRound(b *testing.B) {
	const workers, n = 4, 1 << 20
	for _, c := range []struct {
		name string
		sc   SparseConfig
	}{
		{"dense", SparseConfig{}},
		{"topk1", SparseConfig{Method: TopK, Ratio: 0.01, ErrorFeedback: true}},
		{"topk10", SparseConfig{Method: TopK, Ratio: 0.1, ErrorFeedback: true}},
		{"randk1", SparseConfig{Method: RandomK, Ratio: 0.01, ErrorFeedback: true}},
		{"randk10", SparseConfig{Method: RandomK, Ratio: 0.1, ErrorFeedback: true}},
	} {
		b.Run(c.name, func(b *testing.B) {
			hubs, addrs := startHubs(b, 1, workers, false)
			cs := dialAll(b, workers, addrs, DefaultClientConfig().PartitionBytes)
			ctx := context.Background()
			if err := each(workers, func(w int) error { return cs[w].Declare(ctx, "w", KeyConfig{Len: n, Sparse: c.sc}) }); err != nil {
				b.Fatal(err)
			}
			g := make([][]float32, workers)
			dst := make([][]float32, workers)
			for w := range g {
				g[w], dst[w] = benchGradient(uint64(w)), make([]float32, n)
			}
			before := hubs[0].Stats()
			b.ResetTimer()
			for b.Loop() {
				if err := each(workers, func(w int) error { return PushPull(cs[w], "w", g[w], 1, dst[w]).Wait(ctx) }); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			st := hubs[0].Stats()
			in, out := st.BytesIn-before.BytesIn, st.BytesOut-before.BytesOut
			b.ReportMetric(float64(in+out)/float64(b.N), "wire-B/round")
			b.ReportMetric(float64(in)/float64(b.N), "push-B/round")
		})
	}
}
