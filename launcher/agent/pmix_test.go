package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/launcher/proto"
	"github.com/gorun/gorun/pmix"
)

// fakeListener returns its errors and connections in turn, then blocks
// until closed.
type fakeListener struct {
	net.Listener
	next   []any // net.Conn or error
	closed chan struct{}
}

func (l *fakeListener) Accept() (net.Conn, error) {
	if len(l.next) == 0 {
		<-l.closed
		return nil, net.ErrClosed
	}
	x := l.next[0]
	l.next = l.next[1:]
	if err, ok := x.(error); ok {
		return nil, err
	}
	return x.(net.Conn), nil
}

// TestAcceptLoop: errors that may pass are retried, and the connections
// after them served; another error ends the loop with it; closing the
// listener ends it quietly.
func TestAcceptLoop(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	emfile := &net.OpError{Op: "accept", Err: fmt.Errorf("accept4: %w", syscall.EMFILE)}
	l := &fakeListener{next: []any{emfile, emfile, syscall.ECONNABORTED, a, syscall.EBADF}, closed: make(chan struct{})}
	served := 0
	err := acceptLoop(l, make(chan struct{}), func(net.Conn) { served++ })
	if !errors.Is(err, syscall.EBADF) || served != 1 {
		t.Fatalf("acceptLoop: %v, %d served", err, served)
	}
	l = &fakeListener{closed: make(chan struct{})}
	close(l.closed)
	if err := acceptLoop(l, make(chan struct{}), func(net.Conn) {}); err != nil {
		t.Fatalf("closed listener: %v", err)
	}
	if acceptBackoff(1) != 5*time.Millisecond || acceptBackoff(100) != time.Second {
		t.Fatalf("backoff %v, %v", acceptBackoff(1), acceptBackoff(100))
	}
}

// TestLiveRank: a rank is failed by its number only; one that exited
// takes no other with it.
func TestLiveRank(t *testing.T) {
	procs := []*rankProc{
		{spec: proto.RankSpec{Rank: 0}, alive: false},
		{spec: proto.RankSpec{Rank: 1, Hub: 1}, alive: true},
		{spec: proto.RankSpec{Rank: 1}, alive: true},
	}
	if p := liveRank(procs, 0); p != nil {
		t.Fatalf("rank 0 exited, but rank %d would be failed", p.spec.Rank)
	}
	if p := liveRank(procs, 1); p != procs[2] {
		t.Fatalf("rank 1: %+v", p)
	}
	if p := liveRank(procs, -1); p != procs[2] {
		t.Fatalf("any rank: %+v", p)
	}
}

// TestFindInode: the loopback socket is found by its ports, whatever the
// machine's byte order (the table is written as this machine's kernel
// writes it).
func TestFindInode(t *testing.T) {
	word := func(ip [4]byte) string {
		return fmt.Sprintf("%08X", binary.NativeEndian.Uint32(ip[:]))
	}
	lo, other := word([4]byte{127, 0, 0, 1}), word([4]byte{10, 0, 0, 1})
	table := strings.Join([]string{
		"  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode",
		fmt.Sprintf("   0: %s:1F90 %s:A000 01 00000000:00000000 00:00000000 00000000  1000        0 111 1", other, lo),
		fmt.Sprintf("   1: %s:1F90 %s:A000 01 00000000:00000000 00:00000000 00000000  1000        0 222 1", lo, lo),
	}, "\n")
	if got := findInode(table, 0x1F90, 0xA000); got != "222" {
		t.Fatalf("inode %q, want 222", got)
	}
	if got := findInode(table, 0xA000, 0x1F90); got != "" {
		t.Fatalf("ports swapped: inode %q", got)
	}
}

// TestChildFinalizeHidesNothing: a rank whose own client initialized and
// did not finalize fails, even though its child's client finalized.
func TestChildFinalizeHidesNothing(t *testing.T) {
	h := &pmixHost{ranks: map[int]*pmixRank{}}
	parent, child := h.begin(0), h.begin(0)
	h.end(child, pmix.Result{Init: true, Finalized: true})
	h.end(parent, pmix.Result{Init: true})
	a := &agent{pmix: h}
	if why := a.endPMIx(0, 0); why == "" {
		t.Fatal("a rank that did not finalize passed")
	}
	h.ranks = map[int]*pmixRank{}
	pr := h.begin(1)
	h.end(pr, pmix.Result{Init: true, Finalized: true})
	if why := a.endPMIx(1, 0); why != "" {
		t.Fatalf("a finalized rank failed: %s", why)
	}
}

// TestPMIxFailure: the rank is named once, by whoever reports the
// failure, and "pmix:" not at all.
func TestPMIxFailure(t *testing.T) {
	err := &pmix.RankError{Rank: 3, Err: errors.New("pmix: commit: bad")}
	if got := pmixFailure(err); got != "PMIx: commit: bad" {
		t.Fatalf("%q", got)
	}
}
