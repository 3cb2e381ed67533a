package powersgd

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/gorun/gorun/collective"
)

// BenchmarkAllReduce1024Rank4 is one call on a 1024 x 1024 gradient at
// rank 4 on a one-rank job: the computation (three thin products and the
// orthonormalization), with all-reduces that move nothing.
func BenchmarkAllReduce1024Rank4(b *testing.B) {
	benchmarkAllReduce(b, 1024, 1024, 4)
}

// BenchmarkAllReduce1024Rank1 is the same at rank 1.
func BenchmarkAllReduce1024Rank1(b *testing.B) {
	benchmarkAllReduce(b, 1024, 1024, 1)
}

func benchmarkAllReduce(b *testing.B, rows, cols, rank int) {
	comms, err := collective.NewLocal(1, collective.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	defer comms[0].Close()
	cfg := DefaultConfig()
	cfg.Rank = rank
	pc, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	grad := randFloat32(rng, rows*cols)
	ctx := context.Background()
	// The first call makes the key's state (Q, residual, scratch).
	if err := pc.AllReduce(ctx, comms[0], "w", grad, rows, cols); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(rows * cols * 4))
	b.ResetTimer()
	for b.Loop() {
		if err := pc.AllReduce(ctx, comms[0], "w", grad, rows, cols); err != nil {
			b.Fatal(err)
		}
	}
}
