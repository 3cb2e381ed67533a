package tcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/transport"
	"github.com/gorun/gorun/transport/liveness"
	"github.com/gorun/gorun/transport/mem"
	"github.com/gorun/gorun/transport/wire"
)

// TestLosses: a subscriber to losses gets Lost as it was, then each loss
// once, on TCP (a peer whose connection ends without a goodbye) and in
// memory (Kill); cancel and Close end the subscription.
func TestLosses(t *testing.T) {
	ts := mesh(t, 3, func(r int, c *Config) { c.Elastic, c.ExplainWait = true, 10*time.Millisecond })
	lost, news, cancel := ts[0].Losses()
	defer cancel()
	if len(lost) != 0 {
		t.Fatalf("Lost before any loss: %v", lost)
	}
	for _, pc := range ts[1].peers() {
		_ = pc.c.Close()
	}
	select {
	case l := <-news:
		if l.Rank != 1 || !strings.Contains(l.Reason, "connection lost") {
			t.Fatalf("got %+v, want rank 1's connection lost", l)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no news of rank 1's loss")
	}
	late, news2, cancel2 := ts[0].Losses()
	if _, ok := late[1]; !ok || len(late) != 1 {
		t.Fatalf("a later subscriber's Lost = %v, want rank 1 alone", late)
	}
	cancel2()
	if _, ok := <-news2; ok {
		t.Fatal("a cancelled subscription's channel is open")
	}
	ts[0].Close()
	select {
	case l, ok := <-news:
		if ok {
			t.Fatalf("news after the loss: %+v", l)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the subscription")
	}

	nw := mem.NewNetwork(3)
	lost, news, cancel = nw.Transport(0).Losses()
	defer cancel()
	nw.Kill(2)
	if l := <-news; l.Rank != 2 || l.Reason != "killed" || len(lost) != 0 {
		t.Fatalf("in memory: Lost %v, then %+v; want nothing, then rank 2 killed", lost, l)
	}
	if lost, _, cancel := nw.Transport(1).Losses(); len(lost) != 1 {
		t.Fatalf("in memory, after the kill: Lost %v", lost)
	} else {
		cancel()
	}
	nw.Transport(0).Close()
	if _, ok := <-news; ok {
		t.Fatal("in memory: Close did not end the subscription")
	}
}

// TestWriteWaitsWithContext: a write behind one that cannot finish (a
// ping, with no deadline, to a peer that reads nothing) gives up with its
// context: an abort or a goodbye is bounded, whatever holds the
// connection.
func TestWriteWaitsWithContext(t *testing.T) {
	a, b := net.Pipe() // unbuffered: a write waits for a read that never comes
	defer a.Close()
	defer b.Close()
	tr := &Mesh{}
	pc := &peerConn{peer: 1, c: a, wmu: make(chan struct{}, 1)}
	held := make(chan error, 1)
	go func() { held <- tr.write(context.Background(), pc, transport.Header{Type: transport.TypePing}, nil) }()
	time.Sleep(20 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := tr.write(ctx, pc, transport.Header{Type: transport.TypeAbort}, []byte{0}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a write behind a stuck one: %v, want its context's deadline", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("it gave up after %v", d)
	}
	b.Close()
	if err := <-held; err == nil {
		t.Fatal("the stuck write succeeded with no reader")
	}
}

// TestDialKind: how a failed dial's error is sorted for liveness.
func TestDialKind(t *testing.T) {
	cases := []struct {
		err  error
		want liveness.DialKind
	}{
		{errors.New("dial tcp: connection refused"), liveness.DialOther},
		{fmt.Errorf("handshake with rank 2: reading reply: %w", os.ErrDeadlineExceeded), liveness.DialOther},
		{fmt.Errorf("handshake with rank 2: reading status: %w", wire.ErrAnswered), liveness.DialAnswered},
		{fmt.Errorf("refused: %w: %w", wire.ErrDuplicate, transport.ErrAuth), liveness.DialDuplicate},
		{fmt.Errorf("its proof does not match: %w", transport.ErrAuth), liveness.DialAuth},
		{fmt.Errorf("rank 2: %w: timed out", errShmTimeout), liveness.DialShmTimeout},
	}
	for _, c := range cases {
		if got := dialKind(c.err); got != c.want {
			t.Errorf("dialKind(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
