package ring

import (
	"context"
	"fmt"
)

// Barrier is a dissemination barrier: in round k every rank signals the
// rank 2^k to its right and waits for the one 2^k to its left. No rank
// leaves before every rank has entered.
func Barrier(ctx context.Context, tr Transport, o Options) error {
	rank, size := tr.Rank(), tr.Size()
	for k, dist := uint32(0), 1; dist < size; k, dist = k+1, dist*2 {
		h := o.Header
		h.Step = k
		to, from := (rank+dist)%size, (rank-dist+size)%size
		if err := tr.Send(ctx, to, h, nil); err != nil {
			return fmt.Errorf("barrier round %d: send to rank %d: %w", k, to, err)
		}
		f, err := tr.Recv(ctx, from)
		if err != nil {
			return fmt.Errorf("barrier round %d: recv from rank %d: %w", k, from, err)
		}
		err = check(&f, o.Header, from, k, 0)
		f.Release()
		if err != nil {
			return fmt.Errorf("barrier round %d: %w", k, err)
		}
	}
	return nil
}
