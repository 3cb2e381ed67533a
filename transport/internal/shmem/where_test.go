package shmem

import (
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/gorun/gorun/transport"
)

// TestWhereApart: Where.Apart publishes the CPU the thread runs on, and
// moves off it only when the peer last waited there; after a move it
// publishes where it went, and a thread that cannot move (bound to that
// CPU alone) stays and publishes where it is.
func TestWhereApart(t *testing.T) {
	defer func(c func() (int, bool), m func(int) bool) { currentCPU, moveOff = c, m }(currentCPU, moveOff)
	for _, tc := range []struct {
		name      string
		on        int    // the CPU the thread runs on
		known     bool   // whether it can be read
		peer      uint32 // the peer's word
		movable   bool   // whether the thread may run elsewhere
		to        int    // where a move takes it
		published uint32 // want: this rank's word
		moves     int    // want: moves
	}{
		{name: "peer not known", on: 1, known: true, peer: 0, movable: true, to: 0, published: 2},
		{name: "peer elsewhere", on: 1, known: true, peer: 1, movable: true, to: 0, published: 2},
		{name: "peer here", on: 1, known: true, peer: 2, movable: true, to: 0, published: 1, moves: 1},
		{name: "peer here, CPU 0", on: 0, known: true, peer: 1, movable: true, to: 3, published: 4, moves: 1},
		{name: "peer here, bound here", on: 1, known: true, peer: 2, movable: false, published: 2},
		{name: "CPU not known", on: 1, known: false, peer: 2, movable: true, published: 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			on, moves := tc.on, 0
			currentCPU = func() (int, bool) { return on, tc.known }
			moveOff = func(c int) bool {
				if c != on {
					t.Errorf("moveOff(%d) while on %d", c, on)
				}
				if !tc.movable {
					return false
				}
				moves++
				on = tc.to
				return true
			}
			var mine, peer atomic.Uint32
			mine.Store(7) // a stale word from an earlier wait
			peer.Store(tc.peer)
			Where{Mine: &mine, Peer: &peer}.Apart()
			if got := mine.Load(); got != tc.published || moves != tc.moves {
				t.Errorf("published %d after %d moves, want %d after %d", got, moves, tc.published, tc.moves)
			}
			if peer.Load() != tc.peer {
				t.Errorf("the peer's word changed to %d", peer.Load())
			}
		})
	}
	Where{}.Apart() // no words: nothing to read or move
}

// TestPeerWhere: a Recv's wait begins away from the peer's CPU (its
// Where names both rings' words) before any frame and after a frame of at
// most SmallFrame bytes, and anywhere (the zero Where) after a larger one,
// whose further pieces do not change it: over a random run of whole
// frames and pieces of long ones, against the last frame begun.
func TestPeerWhere(t *testing.T) {
	rng := rand.New(rand.NewPCG(47, 2))
	const capacity = 1 << 20
	in, err := NewRing(make([]byte, RingSize(capacity)), capacity)
	if err != nil {
		t.Fatal(err)
	}
	out, err := NewRing(make([]byte, RingSize(capacity)), capacity)
	if err != nil {
		t.Fatal(err)
	}
	sp := &Peer{In: in, Out: out}
	sp.Init(1 << 30)
	check := func(step int, small bool) {
		t.Helper()
		w := sp.Where()
		if small != (w.Mine == in.WCPU && w.Peer == out.WCPU && w.Mine != nil && w.Peer != nil) || !small && (w.Mine != nil || w.Peer != nil) {
			t.Fatalf("step %d: Where %+v after a frame small=%v", step, w, small)
		}
	}
	small := true // the model: before any frame
	check(-1, small)
	payload := make([]byte, in.MaxPiece())
	for step := 0; step < 400; step++ {
		var kind uint32
		var n, length int
		switch rng.IntN(3) {
		case 0: // a whole frame, around SmallFrame
			kind, length = RecFrame, SmallFrame-2+rng.IntN(5)
			if rng.IntN(2) == 0 {
				length = rng.IntN(64)
			}
			length = min(length, in.MaxPiece())
			n = length
		case 1: // the start of a long frame
			kind, length = RecStart, SmallFrame-2+rng.IntN(1<<20)
			n = min(length, in.MaxPiece(), 1+rng.IntN(4096))
		default: // a further piece
			kind, length, n = RecMore, rng.IntN(1<<20), 1+rng.IntN(4096)
		}
		if !in.Fits(n) {
			t.Fatalf("step %d: %d bytes do not fit", step, n)
		}
		in.Put(kind, transport.Header{Type: transport.TypeData, Len: uint32(length)}, payload[:n])
		ok, err := sp.NextRec()
		if !ok || err != nil {
			t.Fatalf("step %d: NextRec %v %v", step, ok, err)
		}
		in.Hold(sp.Rec.End)
		in.Release()
		if kind != RecMore { // a further piece changes nothing
			small = length <= SmallFrame
		}
		check(step, small)
	}
}
