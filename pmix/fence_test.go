package pmix

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"net"
	"sync"
	"testing"
	"time"
)

func commitMsg(scope byte, kv ...Info) []byte {
	return cmdMsg(cmdCommit, func(e *encoder) {
		var inner encoder
		for _, in := range kv {
			inner.kval(in.Key, in.Value)
		}
		e.packedByte(scope)
		e.count(1)
		e.b = append(e.b, 1)
		e.flex(uint64(len(inner.b)))
		e.b = append(e.b, inner.b...)
	})
}

func fenceMsg() []byte {
	return cmdMsg(cmdFence, func(e *encoder) {
		e.count(1)
		e.flex(1)
		e.count(1)
		e.proc(Proc{"gorun", RankWildcard})
		e.count(1)
		e.flex(0)
	})
}

func getMsg(rank uint32, key string) []byte {
	return cmdMsg(cmdGet, func(e *encoder) {
		e.packedString("gorun")
		e.count(1)
		e.flex(uint64(rank))
		e.count(1)
		e.flex(0)
		e.packedString(key)
	})
}

// send writes one command without waiting for its reply.
func (c *fakeClient) send(tag uint32, body []byte) {
	hdr := make([]byte, hdrLen)
	binary.BigEndian.PutUint32(hdr[4:8], tag)
	binary.BigEndian.PutUint32(hdr[8:12], uint32(len(body)))
	if _, err := c.conn.Write(append(hdr, body...)); err != nil {
		c.t.Error(err)
	}
}

// relays records a Server's Relay calls.
type relays struct {
	mu    sync.Mutex
	calls []map[int][]byte
	in    chan struct{}
}

func (r *relays) relay(epoch int, data map[int][]byte) error {
	r.mu.Lock()
	r.calls = append(r.calls, data)
	r.mu.Unlock()
	r.in <- struct{}{}
	return nil
}

func (r *relays) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

// kvals decodes packed kvals.
func kvals(t *testing.T, b []byte) map[string]string {
	t.Helper()
	out := map[string]string{}
	d := decoder{b: b}
	for !d.empty() {
		if _, err := d.count(1); err != nil {
			t.Fatal(err)
		}
		kv, err := d.kval()
		if err != nil {
			t.Fatal(err)
		}
		out[kv.Key], _ = kv.Value.asString()
	}
	return out
}

// TestFenceCountsRanks: a host's fence counts ranks, not connections. A
// second client of rank 0 (a child that called PMIx_Init as the rank)
// can neither enter the fence for it nor overwrite its data, and rank 0
// entering twice is counted once: the host relays only when rank 1
// enters too, with rank 0's own data.
func TestFenceCountsRanks(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Hosts = []Host{{Name: "h", Ranks: []int{0, 1}}}
	cfg.UID, cfg.GID = 1000, 1000
	r := &relays{in: make(chan struct{}, 4)}
	cfg.Relay = r.relay
	var refused []Refusal
	var mu sync.Mutex
	cfg.Refused = func(f Refusal) { mu.Lock(); refused = append(refused, f); mu.Unlock() }
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	parent, _ := serve(t, s, 0)
	if st := parent.handshake(okHello(0)); st != StatusSuccess {
		t.Fatal(st)
	}
	child, _ := serve(t, s, 0)
	if st := child.handshake(okHello(0)); st != StatusSuccess {
		t.Fatal(st)
	}
	if st := replyStatus(t, parent.call(1, commitMsg(ScopeGlobal, Info{Key: "k", Value: String("parent")}))); st != StatusSuccess {
		t.Fatalf("parent's commit: %v", st)
	}
	if st := replyStatus(t, child.call(1, commitMsg(ScopeGlobal, Info{Key: "k", Value: String("child")}))); st != StatusNotSupported {
		t.Fatalf("child's commit: %v", st)
	}
	if st := replyStatus(t, child.call(2, fenceMsg())); st != StatusNotSupported {
		t.Fatalf("child's fence: %v", st)
	}
	// Rank 0 enters twice (two nonblocking fences).
	parent.send(2, fenceMsg())
	parent.send(3, fenceMsg())
	time.Sleep(50 * time.Millisecond)
	if n := r.count(); n != 0 {
		t.Fatalf("relayed %d times before rank 1 entered", n)
	}
	one, _ := serve(t, s, 1)
	if st := one.handshake(okHello(1)); st != StatusSuccess {
		t.Fatal(st)
	}
	one.send(1, fenceMsg())
	select {
	case <-r.in:
	case <-time.After(10 * time.Second):
		t.Fatal("no relay once both ranks entered")
	}
	if got := kvals(t, r.calls[0][0])["k"]; got != "parent" || len(r.calls[0]) != 1 {
		t.Fatalf("relayed %q for rank 0 (%d ranks), want the parent's", got, len(r.calls[0]))
	}
	if err := s.Release(1, map[int][]byte{}); err != nil {
		t.Fatal(err)
	}
	if st := replyStatus(t, one.read(1)); st != StatusSuccess {
		t.Fatalf("rank 1's fence: %v", st)
	}
	for range 2 { // the two fences' replies, in either order
		if st := replyStatus(t, parent.read(0)); st != StatusSuccess {
			t.Fatalf("rank 0's fence: %v", st)
		}
	}
	if r.count() != 1 {
		t.Fatalf("%d relays for one fence", r.count())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(refused) != 2 || refused[0].Rank != 0 || refused[0].Strands {
		t.Fatalf("refusals %+v", refused)
	}
}

// read reads the reply to tag (any tag: 0), which must come next.
func (c *fakeClient) read(tag uint32) []byte {
	c.t.Helper()
	_ = c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer c.conn.SetReadDeadline(time.Time{})
	hdr := make([]byte, hdrLen)
	if _, err := readFull(c.conn, hdr); err != nil {
		c.t.Fatalf("reply: %v", err)
	}
	if got := binary.BigEndian.Uint32(hdr[4:8]); tag != 0 && got != tag {
		c.t.Fatalf("reply with tag %d, want %d", got, tag)
	}
	out := make([]byte, binary.BigEndian.Uint32(hdr[8:12]))
	if _, err := readFull(c.conn, out); err != nil {
		c.t.Fatal(err)
	}
	return out
}

func readFull(c net.Conn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := c.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// TestServeReturnsWhenClientDies: a client that goes away with a fence
// or a get pending ends its session: Serve returns, with no error.
func TestServeReturnsWhenClientDies(t *testing.T) {
	for _, tc := range []struct {
		name string
		msg  []byte
	}{
		{"fence", fenceMsg()},
		{"get", getMsg(1, "k")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := testServer(t, 2)
			c, done := serve(t, s, 0)
			if st := c.handshake(okHello(0)); st != StatusSuccess {
				t.Fatal(st)
			}
			c.send(1, tc.msg)
			time.Sleep(50 * time.Millisecond)
			c.conn.Close()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("Serve: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Serve did not return after its client went away")
			}
		})
	}
}

// TestServeForeignRank: a rank of another host is not served.
func TestServeForeignRank(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Hosts = []Host{{Name: "a", Ranks: []int{0}}, {Name: "b", Ranks: []int{1}}}
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a, b := net.Pipe()
	defer b.Close()
	_, err = s.Serve(context.Background(), 1, a)
	var re *RankError
	if !errors.As(err, &re) || re.Rank != 1 {
		t.Fatalf("Serve of another host's rank: %v", err)
	}
}

// TestFenceAfterFail: once the job's fence failed, a fence in progress
// and every later one end with an error at once, and Release is refused.
func TestFenceAfterFail(t *testing.T) {
	s, _ := testServer(t, 2)
	c0, _ := serve(t, s, 0)
	if st := c0.handshake(okHello(0)); st != StatusSuccess {
		t.Fatal(st)
	}
	c0.send(1, fenceMsg())
	time.Sleep(50 * time.Millisecond)
	s.Fail(errors.New("a host failed"))
	if st := replyStatus(t, c0.read(1)); st != StatusError {
		t.Fatalf("fence in progress: %v", st)
	}
	c1, _ := serve(t, s, 1)
	if st := c1.handshake(okHello(1)); st != StatusSuccess {
		t.Fatal(st)
	}
	c1.send(1, fenceMsg())
	if st := replyStatus(t, c1.read(1)); st != StatusError {
		t.Fatalf("fence after Fail: %v", st)
	}
	if err := s.Release(1, nil); err == nil {
		t.Fatal("Release after Fail")
	}
}

// TestGetTimeoutCapped: a PMIX_TIMEOUT of more seconds than a Duration
// holds is a long timeout, not one in the past.
func TestGetTimeoutCapped(t *testing.T) {
	for _, sec := range []uint64{1, 1 << 33, 1 << 40, math.MaxInt64, math.MaxUint64} {
		if d := timeoutSeconds(sec); d < time.Second || (sec > 1 && d < time.Hour) {
			t.Errorf("timeout of %d s: %v", sec, d)
		}
	}
	s, _ := testServer(t, 2)
	c, _ := serve(t, s, 0)
	if st := c.handshake(okHello(0)); st != StatusSuccess {
		t.Fatal(st)
	}
	get := cmdMsg(cmdGet, func(e *encoder) {
		e.packedString("gorun")
		e.count(1)
		e.flex(1)
		e.count(1)
		e.flex(1)
		e.count(1)
		e.info(Info{Key: "pmix.timeout", Value: Uint32(math.MaxUint32)})
		e.packedString("k")
	})
	c.send(1, get)
	_ = c.conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	var hdr [hdrLen]byte
	if _, err := readFull(c.conn, hdr[:]); err == nil {
		t.Fatal("get with a long timeout answered at once")
	}
}

// TestFenceSendsNewPuts: a rank's second fence sends only what it put
// since the first, and another host's get sees both.
func TestFenceSendsNewPuts(t *testing.T) {
	mk := func(host int, relay func(int, map[int][]byte) error) *Server {
		cfg := DefaultConfig()
		cfg.Hosts = []Host{{Name: "a", Ranks: []int{0}}, {Name: "b", Ranks: []int{1}}}
		cfg.Host = host
		cfg.UID, cfg.GID = 1000, 1000
		cfg.Relay = relay
		s, err := NewServer(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	var sent []map[int][]byte
	var b *Server
	a := mk(0, func(epoch int, data map[int][]byte) error {
		sent = append(sent, data)
		go func() {
			// Host b's rank never fences in this test: release both.
			b.mu.Lock()
			b.in[1] = true
			b.mu.Unlock()
			if err := b.Release(epoch, data); err != nil {
				t.Error(err)
			}
			if err := a0(epoch, data); err != nil {
				t.Error(err)
			}
		}()
		return nil
	})
	b = mk(1, nil)
	a0 = a.Release
	c, _ := serve(t, a, 0)
	if st := c.handshake(okHello(0)); st != StatusSuccess {
		t.Fatal(st)
	}
	for i, k := range []string{"first", "second"} {
		if st := replyStatus(t, c.call(uint32(2*i+1), commitMsg(ScopeRemote, Info{Key: k, Value: String(k)}))); st != StatusSuccess {
			t.Fatal(st)
		}
		if st := replyStatus(t, c.call(uint32(2*i+2), fenceMsg())); st != StatusSuccess {
			t.Fatalf("fence %d: %v", i+1, st)
		}
	}
	if len(sent) != 2 {
		t.Fatalf("%d relays", len(sent))
	}
	if got := kvals(t, sent[1][0]); len(got) != 1 || got["second"] != "second" {
		t.Fatalf("second fence sent %v", got)
	}
	b.mu.Lock()
	got := kvals(t, b.remote[0])
	b.mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("host b holds %v of rank 0", got)
	}
}

var a0 func(int, map[int][]byte) error

// pidArray is a PMIX_DATA_ARRAY of pids as OpenPMIx packs it (bfrops
// base pack_pid): the array's type and size, then pid_t's width
// (PMIX_UINT32) once for the whole pack, then the pids.
func pidArray(pids ...uint64) Value {
	var e encoder
	e.flex(uint64(TypePID))
	e.flex(uint64(len(pids)))
	e.flex(uint64(TypeUint32))
	for _, p := range pids {
		e.flex(p)
	}
	return Value{TypeDataArray, e.b}
}

// TestPIDArray: a data array of several pids decodes, and what follows
// it is read next.
func TestPIDArray(t *testing.T) {
	for _, n := range []int{1, 2, 3, 7} {
		var pids []uint64
		for i := range n {
			pids = append(pids, uint64(1000+i*70000))
		}
		var e encoder
		e.kval("pids", pidArray(pids...))
		e.kval("next", String("x"))
		d := decoder{b: e.b}
		for _, want := range []string{"pids", "next"} {
			if _, err := d.count(1); err != nil {
				t.Fatal(err)
			}
			kv, err := d.kval()
			if err != nil || kv.Key != want {
				t.Fatalf("%d pids: got %q, %v; want %q", n, kv.Key, err, want)
			}
		}
		if !d.empty() {
			t.Fatalf("%d pids: %d bytes left", n, len(d.b)-d.off)
		}
	}
}
