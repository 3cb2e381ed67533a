package transport_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gorun/gorun/transport"
	"github.com/gorun/gorun/transport/mem"
	"github.com/gorun/gorun/transport/tcp"
)

// muxStreams sends msgs[k] (per key, in order) from rank 1 interleaved at
// random, and receives every key in its own goroutine on rank 0 through a
// Mux: each key's frames must arrive complete and in order.
func muxStreams(t *testing.T, from, to transport.Transport, keys []transport.Key, msgs [][][]byte, seed uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rng := rand.New(rand.NewPCG(seed, 0))
	next := make([]int, len(keys))
	sendErr := make(chan error, 1)
	go func() {
		left := 0
		for _, m := range msgs {
			left += len(m)
		}
		for left > 0 {
			k := rng.IntN(len(keys))
			if next[k] == len(msgs[k]) {
				continue
			}
			h := transport.Header{Type: transport.TypeData, Comm: keys[k].Comm, Seq: keys[k].Seq, Step: uint32(next[k])}
			if err := from.Send(ctx, to.Rank(), h, msgs[k][next[k]]); err != nil {
				sendErr <- err
				return
			}
			next[k]++
			left--
		}
		sendErr <- nil
	}()
	mux := transport.NewMux(to, to.Size())
	errs := make([]error, len(keys))
	var wg sync.WaitGroup
	for k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i, want := range msgs[k] {
				f, err := mux.Recv(ctx, from.Rank(), keys[k])
				if err != nil {
					errs[k] = err
					return
				}
				if transport.KeyOf(f.Header) != keys[k] || f.Step != uint32(i) || !bytes.Equal(f.Payload, want) {
					errs[k] = fmt.Errorf("key %v message %d: got key %v step %d, %d bytes", keys[k], i, transport.KeyOf(f.Header), f.Step, len(f.Payload))
				}
				f.Release()
				if errs[k] != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(append(errs, <-sendErr)...); err != nil {
		t.Fatal(err)
	}
	if q := mux.Queued(); q != 0 {
		t.Fatalf("%d frames left queued", q)
	}
}

func muxMessages(rng *rand.Rand, keys, per, maxLen int) ([]transport.Key, [][][]byte) {
	ks := make([]transport.Key, keys)
	msgs := make([][][]byte, keys)
	for k := range ks {
		ks[k] = transport.Key{Comm: uint32(k % 3), Seq: uint32(k)}
		if k%4 == 3 {
			ks[k].Comm |= transport.ChanP2P
		}
		for range per {
			p := make([]byte, rng.IntN(maxLen))
			for i := range p {
				p[i] = byte(rng.Uint32())
			}
			msgs[k] = append(msgs[k], p)
		}
	}
	return ks, msgs
}

// TestMuxStreams: several streams from one peer, received at once, over
// memory, TCP and shared memory (whose frames must be released in the
// order they arrived: the Mux copies those it queues), with payloads up to
// larger than a shared-memory ring's piece.
func TestMuxStreams(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	keys, msgs := muxMessages(rng, 7, 30, 3000)
	t.Run("mem", func(t *testing.T) {
		nw := mem.NewNetwork(2)
		muxStreams(t, nw.Transport(1), nw.Transport(0), keys, msgs, 1)
	})
	for _, shm := range []bool{false, true} {
		t.Run(fmt.Sprint("shm=", shm), func(t *testing.T) {
			ts := mesh(t, 2, func(r int, c *tcp.Config) { c.Shm, c.HostKey = shm, "h" })
			defer ts[0].Close()
			defer ts[1].Close()
			muxStreams(t, ts[1], ts[0], keys, msgs, 2)
			big, bigMsgs := muxMessages(rng, 3, 3, 9<<20)
			muxStreams(t, ts[1], ts[0], big, bigMsgs, 3)
		})
	}
}

// TestMuxWakes: a Recv waiting behind another key's reader wakes when its
// context ends and when the transport fails; Drop discards queued frames.
// On synctest's clock the waiter's 50 ms end only once every goroutine
// waits: by then the reader has queued key 9's frame.
func TestMuxWakes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := mem.NewNetwork(2)
		to, from := nw.Transport(0), nw.Transport(1)
		mux := transport.NewMux(to, 2)
		ctx := context.Background()
		if err := from.Send(ctx, 0, transport.Header{Type: transport.TypeData, Seq: 9}, []byte("x")); err != nil {
			t.Fatal(err)
		}
		// Key 1 reads and queues key 9's frame, then waits for its own.
		done := make(chan error, 1)
		go func() { _, err := mux.Recv(ctx, 1, transport.Key{Seq: 1}); done <- err }()
		wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if _, err := mux.Recv(wctx, 1, transport.Key{Seq: 2}); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("waiter with an ended context: %v", err)
		}
		if n := mux.Queued(); n != 1 {
			t.Fatalf("%d frames queued, want key 9's", n)
		}
		mux.Drop(func(k transport.Key) bool { return k.Seq != 9 })
		if mux.Queued() != 0 {
			t.Fatal("Drop kept the frame")
		}
		nw.Kill(1)
		if err := <-done; !errors.Is(err, transport.ErrPeerLost) {
			t.Fatalf("reader after the peer died: %v", err)
		}
		if _, err := mux.Recv(ctx, 1, transport.Key{Seq: 3}); !errors.Is(err, transport.ErrPeerLost) {
			t.Fatalf("a later reader: %v", err)
		}
	})
}

// TestMuxRecvAny: three peers each send rank 0 their frames of key a
// interleaved with frames of key b, all at once; rank 0 takes key a from
// any peer while another goroutine takes each peer's key b. Every frame
// arrives once, whole, and each peer's in the order sent, over memory,
// TCP and shared memory (where a frame two waiters brought at once is
// copied back into its queue).
func TestMuxRecvAny(t *testing.T) {
	const peers, per = 3, 40
	a, b := transport.Key{Comm: 1 | transport.ChanP2P, Seq: 4}, transport.Key{Comm: 1 | transport.ChanP2P, Seq: 5}
	payload := func(from, i int, k transport.Key) []byte {
		p := make([]byte, 1+(from*7919+i*104729)%5000)
		for j := range p {
			p[j] = byte(from*31 + i*7 + int(k.Seq) + j)
		}
		return p
	}
	run := func(t *testing.T, ts []transport.Transport) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		errs := make(chan error, 2*peers+1)
		for from := 1; from <= peers; from++ {
			go func() {
				for i := range per {
					for _, k := range []transport.Key{a, b} {
						h := transport.Header{Type: transport.TypeData, Comm: k.Comm, Seq: k.Seq, Step: uint32(i)}
						if err := ts[from].Send(ctx, 0, h, payload(from, i, k)); err != nil {
							errs <- err
							return
						}
					}
				}
				errs <- nil
			}()
		}
		mux := transport.NewMux(ts[0], peers+1)
		for from := 1; from <= peers; from++ {
			go func() {
				for i := range per {
					f, err := mux.Recv(ctx, from, b)
					if err != nil {
						errs <- err
						return
					}
					ok := f.Step == uint32(i) && bytes.Equal(f.Payload, payload(from, i, b))
					f.Release()
					if !ok {
						errs <- fmt.Errorf("key b from %d: frame %d differs", from, i)
						return
					}
				}
				errs <- nil
			}()
		}
		next := make([]int, peers+1)
		for range peers * per {
			from, f, err := mux.RecvAny(ctx, []int{1, 2, 3}, a)
			if err != nil {
				t.Fatal(err)
			}
			ok := from >= 1 && from <= peers && next[from] < per && f.Step == uint32(next[from]) &&
				bytes.Equal(f.Payload, payload(from, next[from], a))
			f.Release()
			if !ok {
				t.Fatalf("key a: frame from %d (step %d), next %v", from, f.Step, next)
			}
			next[from]++
		}
		for range 2 * peers {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		if q := mux.Queued(); q != 0 {
			t.Fatalf("%d frames left queued", q)
		}
	}
	t.Run("mem", func(t *testing.T) {
		nw := mem.NewNetwork(peers + 1)
		ts := make([]transport.Transport, peers+1)
		for i := range ts {
			ts[i] = nw.Transport(i)
		}
		run(t, ts)
	})
	for _, shm := range []bool{false, true} {
		t.Run(fmt.Sprint("shm=", shm), func(t *testing.T) {
			ms := mesh(t, peers+1, func(r int, c *tcp.Config) { c.Shm, c.HostKey = shm, "h" })
			ts := make([]transport.Transport, len(ms))
			for i, m := range ms {
				defer m.Close()
				ts[i] = m
			}
			run(t, ts)
		})
	}
	if _, _, err := transport.NewMux(mem.NewNetwork(1).Transport(0), 1).RecvAny(context.Background(), nil, a); err == nil {
		t.Fatal("receive from any of no peers did not fail")
	}
}

var testSecret = []byte("0123456789abcdef0123456789abcdef")

// mesh starts n TCP transports on loopback, connected, closed at the
// test's end.
func mesh(t *testing.T, n int, tweak func(r int, c *tcp.Config)) []*tcp.Mesh {
	t.Helper()
	ts := make([]*tcp.Mesh, n)
	addrs := make([]string, n)
	for r := range n {
		cfg := tcp.DefaultConfig()
		cfg.Rank, cfg.Size, cfg.JobID, cfg.Secret, cfg.ListenAddr = r, n, "mux-test", testSecret, "127.0.0.1:0"
		if tweak != nil {
			tweak(r, &cfg)
		}
		tr, err := tcp.Listen(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		ts[r], addrs[r] = tr, tr.Addr().String()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() { defer wg.Done(); errs[r] = ts[r].Connect(ctx, addrs) }()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return ts
}
