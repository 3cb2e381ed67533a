package ring

import (
	"context"
	"errors"
	"testing"

	"github.com/gorun/gorun/internal/canceled"
	"github.com/gorun/gorun/transport"
)

// abortedNet is rank 0 of 4 whose sends wait until their context ends
// (a peer that stopped reading) and whose receives bring a peer's abort:
// rank 2 gave up because its own context ended.
type abortedNet struct{}

func (abortedNet) Rank() int { return 0 }
func (abortedNet) Size() int { return 4 }
func (abortedNet) Send(ctx context.Context, to int, h transport.Header, payload []byte) error {
	<-ctx.Done()
	return canceled.Cause(ctx)
}
func (abortedNet) Recv(ctx context.Context, from int) (transport.Frame, error) {
	return transport.Frame{}, transport.DecodeAbort(2, transport.EncodeAbort(canceled.Cause(canceledCtx())))
}

func canceledCtx() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// TestAbortBeatsOwnCancel: a call whose receive brings a peer's abort
// while its sends are still under way fails with that abort, though the
// abort carries a cancellation's code and the sends end cancelled by this
// rank (a loaded machine made the abort lose to them once).
func TestAbortBeatsOwnCancel(t *testing.T) {
	buf := make([]float32, 1<<16)
	fold := func(dst, src []float32) {}
	for name, run := range map[string]func() error{
		"ring": func() error {
			return AllReduce(context.Background(), abortedNet{}, buf, fold, Options{SegmentBytes: 1 << 12})
		},
		"direct": func() error {
			return Direct(context.Background(), abortedNet{}, buf, fold, Options{SegmentBytes: 1 << 12})
		},
		"alltoall": func() error {
			spans := Chunks(len(buf), 4)
			return AllToAllV(context.Background(), abortedNet{}, buf, spans, make([]float32, len(buf)), spans, Options{SegmentBytes: 1 << 12})
		},
	} {
		err := run()
		var re *transport.RemoteError
		if !errors.Is(err, transport.ErrAborted) || !errors.As(err, &re) || re.Rank != 2 {
			t.Errorf("%s: got %v, want rank 2's abort", name, err)
		}
	}
}

// TestExplains: which of a call's two errors explains its failure.
func TestExplains(t *testing.T) {
	own := canceled.Cause(canceledCtx())
	abort := transport.DecodeAbort(2, transport.EncodeAbort(own))
	lost := &transport.PeerLostError{Rank: 3, Reason: "gone"}
	for _, c := range []struct {
		name      string
		err, serr error
		want      error
	}{
		{"no failure", nil, nil, nil},
		{"a send failed alone", nil, lost, lost},
		{"a send's failure cancelled the receive", own, lost, lost},
		{"a peer's abort, the sends cancelled after it", abort, own, abort},
		{"a peer's abort, a send lost a peer", abort, lost, abort},
		{"this rank cancelled, its sends too", own, own, own},
		{"this rank cancelled, a send saw the peer's abort", own, abort, abort},
		{"a receive failed, no send did", lost, nil, lost},
	} {
		if got := explains(c.err, c.serr); got != c.want {
			t.Errorf("%s: explains(%v, %v) = %v, want %v", c.name, c.err, c.serr, got, c.want)
		}
	}
}
