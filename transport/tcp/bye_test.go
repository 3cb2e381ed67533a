package tcp

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun/gorun/transport"
	"github.com/gorun/gorun/transport/internal/world"
)

// TestGoodbyeBehindDataAfterGossip: a rank sends frames, says goodbye and
// closes while this rank, behind in its own work, has not read them (its
// reader waits on a full inbox, the goodbye behind the data), and gossip
// then declares the closed rank dead. It has left, not been lost: every
// frame arrives in order, this rank's transport stays healthy, and the
// Recv after the last frame says the peer is gone.
func TestGoodbyeBehindDataAfterGossip(t *testing.T) {
	ts := mesh(t, 2, func(r int, c *Config) {
		c.ConfirmTimeout, c.Shm = 200*time.Millisecond, false
		if r == 1 {
			c.LingerTimeout = 100 * time.Millisecond // it gives up on rank 0 reading its goodbye
		}
	})
	const frames = world.InboxDepth + 8
	if err := sendNumbered(ts[1], 0, frames, 64<<10); err != nil {
		t.Fatal(err)
	}
	if err := ts[1].Close(); err != nil {
		t.Fatal(err)
	}
	ts[0].PeerLost(1, "declared dead by gossip")
	time.Sleep(1500 * time.Millisecond) // several confirmation windows
	if err := ts[0].Err(); err != nil {
		t.Fatalf("a rank that said goodbye was lost: %v", err)
	}
	recvNumbered(t, ts[0], 1, frames)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := ts[0].Recv(ctx, 1); !errors.Is(err, transport.ErrPeerLost) {
		t.Fatalf("after the last frame: %v, want ErrPeerLost (it left)", err)
	}
	if err := ts[0].Err(); err != nil {
		t.Fatalf("the transport failed: %v", err)
	}
}

// TestLingerNamesSlowPeer: a rank whose Close gave up waiting for a peer
// to read its goodbye says at level Info which peer kept it waiting (rank
// 0 here, its reader held up by a full inbox).
func TestLingerNamesSlowPeer(t *testing.T) {
	var logged strings.Builder
	var mu sync.Mutex
	ts := mesh(t, 2, func(r int, c *Config) {
		c.Shm = false
		if r == 1 {
			c.LingerTimeout = 100 * time.Millisecond
			c.Logger = slog.New(slog.NewTextHandler(lockedWriter{&mu, &logged}, &slog.HandlerOptions{Level: slog.LevelInfo}))
		}
	})
	big := make([]byte, 64<<10)
	for range world.InboxDepth + 8 {
		if err := ts[1].Send(context.Background(), 0, transport.Header{}, big); err != nil {
			t.Fatal(err)
		}
	}
	if err := ts[1].Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logged.String(), "peers had not read the goodbye within the linger") || !strings.Contains(logged.String(), "ranks=[0]") {
		t.Fatalf("rank 1's log does not name rank 0 as the peer it waited for:\n%s", logged.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
