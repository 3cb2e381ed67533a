package pmix

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestFlexRoundTrip: flex integers decode to what was encoded, at every
// width's edges and at random, signed and unsigned, and a value too wide
// for its type is an error, not a wrapped number.
func TestFlexRoundTrip(t *testing.T) {
	us := []uint64{0, 1, 127, 128, 255, 16383, 16384, math.MaxUint16, math.MaxUint32, 1 << 56, 1<<56 - 1, 1 << 63, math.MaxUint64}
	is := []int64{0, 1, -1, 63, -64, 64, -65, math.MaxInt32, math.MinInt32, math.MaxInt64, math.MinInt64}
	for range 1000 {
		us = append(us, rand.Uint64()>>rand.IntN(64))
		is = append(is, rand.Int64()>>rand.IntN(64)*int64(1-2*rand.IntN(2)))
	}
	for _, v := range us {
		var e encoder
		e.flex(v)
		if len(e.b) > 9 {
			t.Fatalf("%d took %d bytes", v, len(e.b))
		}
		d := decoder{b: e.b}
		got, err := d.uint(64)
		if err != nil || got != v || !d.empty() {
			t.Fatalf("uint %d: got %d, %v, %d bytes left", v, got, err, len(d.b)-d.off)
		}
		d = decoder{b: e.b}
		if _, err := d.uint(32); (err == nil) != (v <= math.MaxUint32) {
			t.Fatalf("uint %d as 32 bits: err %v", v, err)
		}
	}
	for _, v := range is {
		var e encoder
		e.int(v)
		d := decoder{b: e.b}
		got, err := d.int(64)
		if err != nil || got != v || !d.empty() {
			t.Fatalf("int %d: got %d, %v", v, got, err)
		}
		d = decoder{b: e.b}
		if _, err := d.int(32); (err == nil) != (v >= math.MinInt32 && v <= math.MaxInt32) {
			t.Fatalf("int %d as 32 bits: err %v", v, err)
		}
	}
	// The wire form of small numbers, as a PMIx client writes them: a
	// pack of one is the zigzag 2, the status -46 is 91.
	var e encoder
	e.count(1)
	e.int(-46)
	if string(e.b) != "\x02\x5b" {
		t.Fatalf("count 1, status -46: % x", e.b)
	}
}

// TestValueRoundTrip: values of every kind the server makes decode as
// what they are, and a value is measured exactly (what follows it is
// read next).
func TestValueRoundTrip(t *testing.T) {
	vals := []Value{String(""), String("gorun"), Uint32(7), Uint16(65535), Rank(RankWildcard), Bool(true), Bool(false),
		InfoArray(nil), InfoArray([]Info{{Key: "a", Value: String("x")}, {Key: "b", Value: InfoArray([]Info{{Key: "c", Value: Uint32(1)}})}})}
	var e encoder
	for i, v := range vals {
		e.kval("k"+strings.Repeat("x", i), v)
	}
	d := decoder{b: e.b}
	for i, v := range vals {
		if _, err := d.count(1); err != nil {
			t.Fatal(err)
		}
		kv, err := d.kval()
		if err != nil || kv.Key != "k"+strings.Repeat("x", i) || kv.Value.Type != v.Type || string(kv.Value.Raw) != string(v.Raw) {
			t.Fatalf("value %d: %+v %v, want %+v", i, kv, err, v)
		}
	}
	if !d.empty() {
		t.Fatalf("%d bytes left", len(d.b)-d.off)
	}
	if s, ok := String("abc").asString(); !ok || s != "abc" {
		t.Fatalf("asString %q %v", s, ok)
	}
	if x, ok := Uint16(9).asUint(); !ok || x != 9 {
		t.Fatalf("asUint %d %v", x, ok)
	}
}

// fakeClient speaks the client's side of the protocol over a pipe.
type fakeClient struct {
	t    *testing.T
	conn net.Conn
}

// hello is a handshake body as a PMIx client writes it.
func hello(psec string, cred []byte, flag byte, ns string, rank uint32, version, bfrops string, bufType byte, gds string) []byte {
	var b []byte
	b = append(append(b, psec...), 0)
	b = binary.BigEndian.AppendUint32(b, uint32(len(cred)))
	b = append(b, cred...)
	b = append(b, flag)
	if flag == flagSimpleClient {
		b = append(append(b, ns...), 0)
		b = binary.BigEndian.AppendUint32(b, rank)
	}
	b = append(append(b, version...), 0)
	b = append(append(b, bfrops...), 0)
	b = append(b, bufType)
	b = append(append(b, gds...), 0)
	return b
}

func nativeCred(uid, gid uint32) []byte {
	return binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, uid), gid)
}

func (c *fakeClient) handshake(body []byte) Status {
	hdr := make([]byte, hdrLen)
	binary.LittleEndian.PutUint32(hdr[0:4], math.MaxUint32)
	binary.LittleEndian.PutUint32(hdr[8:12], uint32(len(body)))
	if _, err := c.conn.Write(append(hdr, body...)); err != nil {
		c.t.Fatal(err)
	}
	var st [4]byte
	if _, err := io.ReadFull(c.conn, st[:]); err != nil {
		c.t.Fatalf("handshake reply: %v", err)
	}
	s := Status(int32(binary.BigEndian.Uint32(st[:])))
	if s == StatusSuccess {
		if _, err := io.ReadFull(c.conn, st[:]); err != nil {
			c.t.Fatal(err)
		}
	}
	return s
}

// call sends one command and returns the reply's body.
func (c *fakeClient) call(tag uint32, body []byte) []byte {
	hdr := make([]byte, hdrLen)
	binary.BigEndian.PutUint32(hdr[4:8], tag)
	binary.BigEndian.PutUint32(hdr[8:12], uint32(len(body)))
	if _, err := c.conn.Write(append(hdr, body...)); err != nil {
		c.t.Fatal(err)
	}
	if _, err := io.ReadFull(c.conn, hdr); err != nil {
		c.t.Fatalf("reply: %v", err)
	}
	if got := binary.BigEndian.Uint32(hdr[4:8]); got != tag {
		c.t.Fatalf("reply with tag %d to tag %d", got, tag)
	}
	out := make([]byte, binary.BigEndian.Uint32(hdr[8:12]))
	if _, err := io.ReadFull(c.conn, out); err != nil {
		c.t.Fatal(err)
	}
	return out
}

func replyStatus(t *testing.T, b []byte) Status {
	t.Helper()
	d := decoder{b: b}
	st, err := d.packedInt32()
	if err != nil {
		t.Fatalf("reply % x: %v", b, err)
	}
	return Status(st)
}

func testServer(t *testing.T, ranks int) (*Server, *[]string) {
	cfg := DefaultConfig()
	cfg.Hosts = []Host{{Name: "h", Ranks: nil}}
	for r := range ranks {
		cfg.Hosts[0].Ranks = append(cfg.Hosts[0].Ranks, r)
	}
	cfg.UID, cfg.GID = 1000, 1000
	var mu sync.Mutex
	var refused []string
	cfg.Refused = func(r Refusal) {
		mu.Lock()
		refused = append(refused, r.What+" "+strconv.FormatBool(r.Strands))
		mu.Unlock()
	}
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, &refused
}

// serve runs a session for rank on a pipe and returns the client's end
// and the session's outcome.
func serve(t *testing.T, s *Server, rank int) (*fakeClient, <-chan error) {
	a, b := net.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := s.Serve(context.Background(), rank, a)
		done <- err
	}()
	t.Cleanup(func() { b.Close() })
	return &fakeClient{t, b}, done
}

// TestHandshakeRefusals: a client the server does not serve is refused at
// the handshake with a status and an error that says why, naming both
// sides' versions where the version is why.
func TestHandshakeRefusals(t *testing.T) {
	s, _ := testServer(t, 2)
	cred := nativeCred(1000, 1000)
	for _, tc := range []struct {
		name string
		body []byte
		st   Status
		want []string
	}{
		{"PMIx 3", hello("native", cred, 0, "gorun", 0, "3.2.3", "v3", 1, "hash"), StatusNotSupported, []string{"PMIx 3.2.3", `bfrops "v3"`, "PMIx 4.1 to 5.x"}},
		{"PMIx 6", hello("native", cred, 0, "gorun", 0, "6.0.0", "v41", 1, "hash"), StatusNotSupported, []string{"PMIx 6.0.0", "PMIx 4.1 to 5.x"}},
		{"PMIx 4.0", hello("native", cred, 0, "gorun", 0, "4.0.0", "v4", 1, "hash"), StatusNotSupported, []string{"PMIx 4.0.0", "PMIx 4.1 to 5.x"}},
		{"fully described", hello("native", cred, 0, "gorun", 0, "5.0.7", "v41", 2, "hash"), StatusNotSupported, []string{"NON_DESC"}},
		{"shmem", hello("native", cred, 0, "gorun", 0, "5.0.7", "v41", 1, "shmem2"), StatusNotSupported, []string{`gds "shmem2"`}},
		{"other user", hello("native", nativeCred(0, 0), 0, "gorun", 0, "5.0.7", "v41", 1, "hash"), StatusInvalidCred, []string{"uid 0", "uid 1000"}},
		{"short credential", hello("native", []byte{1}, 0, "gorun", 0, "5.0.7", "v41", 1, "hash"), StatusInvalidCred, []string{"native credential of 1 bytes"}},
		{"munge", hello("munge", nil, 0, "gorun", 0, "5.0.7", "v41", 1, "hash"), StatusNotSupported, []string{`"munge"`}},
		{"wrong rank", hello("native", cred, 0, "gorun", 1, "5.0.7", "v41", 1, "hash"), StatusNotFound, []string{"rank 0 connected as \"gorun\" rank 1"}},
		{"wrong namespace", hello("native", cred, 0, "other", 0, "5.0.7", "v41", 1, "hash"), StatusNotFound, []string{`"other"`}},
		{"tool", hello("native", cred, 5, "", 0, "5.0.7", "v41", 1, "hash"), StatusNotSupported, []string{"tool"}},
		{"singleton", hello("native", cred, 9, "", 0, "5.0.7", "v41", 1, "hash"), StatusNotSupported, []string{"singleton"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, done := serve(t, s, 0)
			if st := c.handshake(tc.body); st != tc.st {
				t.Fatalf("status %v, want %v", st, tc.st)
			}
			err := <-done
			for _, w := range tc.want {
				if err == nil || !strings.Contains(err.Error(), w) || !strings.Contains(err.Error(), "rank 0") {
					t.Fatalf("error %v, want it to name rank 0 and say %q", err, w)
				}
			}
		})
	}
	// A handshake header announcing more than the cap ends the session
	// before anything is allocated.
	c, done := serve(t, s, 1)
	hdr := make([]byte, hdrLen)
	binary.LittleEndian.PutUint32(hdr[8:12], MaxHello+1)
	go c.conn.Write(hdr)
	if err := <-done; err == nil || !strings.Contains(err.Error(), "more than the") {
		t.Fatalf("oversized handshake: %v", err)
	}
}

func okHello(rank uint32) []byte {
	return hello("native", nativeCred(1000, 1000), 0, "gorun", rank, "5.0.7", "v41", 1, "hash")
}

func cmdMsg(cmd byte, rest ...func(e *encoder)) []byte {
	var e encoder
	e.packedByte(cmd)
	for _, f := range rest {
		f(&e)
	}
	return e.b
}

// TestUnservedCommands: what the server does not serve is answered with
// PMIX_ERR_NOT_SUPPORTED and reported, and the session goes on; a message
// that does not decode ends the session with an error naming the rank.
func TestUnservedCommands(t *testing.T) {
	s, refused := testServer(t, 1)
	c, done := serve(t, s, 0)
	if st := c.handshake(okHello(0)); st != StatusSuccess {
		t.Fatalf("handshake: %v", st)
	}
	for i, cmd := range []byte{9, 6, 7, 10, 24, 15, 99} {
		if st := replyStatus(t, c.call(uint32(100+i), cmdMsg(cmd))); st != StatusNotSupported {
			t.Fatalf("command %d: %v", cmd, st)
		}
	}
	// Job control other than cleanup registration is refused too.
	jc := cmdMsg(cmdJobControl, func(e *encoder) {
		e.count(1)
		e.flex(0) // no targets
		e.count(1)
		e.flex(1)
		e.count(1)
		e.info(Info{Key: "pmix.jctrl.kill", Value: Bool(true)})
	})
	if st := replyStatus(t, c.call(200, jc)); st != StatusNotSupported {
		t.Fatalf("job control: %v", st)
	}
	if st := replyStatus(t, c.call(201, cmdMsg(cmdLog))); st != StatusNotSupported {
		t.Fatalf("log: %v", st)
	}
	// The session still serves.
	d := decoder{b: c.call(202, cmdMsg(cmdReq))}
	if ns, err := d.packedString(); err != nil || ns != "gorun" {
		t.Fatalf("job data after refusals: %q %v", ns, err)
	}
	// Those one rank makes for others (spawn, connect and the name service
	// they use) strand the others: the agent ends the job for them.
	want := []string{"PMIx spawn true", "PMIx publish true", "PMIx lookup true", "PMIx connect true", "PMIx group construct false",
		"PMIx query false", "PMIx command 99 false", "PMIx job control other than registering files for cleanup false"}
	if strings.Join(*refused, "|") != strings.Join(want, "|") {
		t.Fatalf("refused %q, want %q", *refused, want)
	}
	// Garbage ends it.
	hdr := make([]byte, hdrLen)
	binary.BigEndian.PutUint32(hdr[8:12], 3)
	c.conn.Write(append(hdr, 0x02, 0x04, 0xff))
	if err := <-done; err == nil || !strings.Contains(err.Error(), "rank 0") {
		t.Fatalf("garbage: %v", err)
	}
}

// TestGetWithoutData: a get of another host's rank before any fence
// brought its data answers PMIX_ERR_NOT_FOUND at once (no hang); a get of
// a local rank's data waits for its commit; a get with a timeout ends
// with PMIX_ERR_TIMEOUT.
func TestGetWithoutData(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Hosts = []Host{{Name: "a", Ranks: []int{0, 1}}, {Name: "b", Ranks: []int{2}}}
	cfg.UID, cfg.GID = 1000, 1000
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	get := func(rank uint32, infos ...Info) []byte {
		return cmdMsg(cmdGet, func(e *encoder) {
			e.packedString("gorun")
			e.count(1)
			e.flex(uint64(rank))
			e.count(1)
			e.flex(uint64(len(infos)))
			if len(infos) > 0 {
				e.count(len(infos))
				for _, in := range infos {
					e.info(in)
				}
			}
			e.packedString("btl.tcp.5.0")
		})
	}
	c0, _ := serve(t, s, 0)
	if st := c0.handshake(okHello(0)); st != StatusSuccess {
		t.Fatal(st)
	}
	if st := replyStatus(t, c0.call(1, get(2))); st != StatusNotFound {
		t.Fatalf("remote rank without a fence: %v", st)
	}
	if st := replyStatus(t, c0.call(2, get(1, Info{Key: "pmix.timeout", Value: Uint32(1)}))); st != StatusTimeout {
		t.Fatalf("local rank with a timeout: %v", st)
	}
	// Rank 1 commits while rank 0 waits for its data.
	got := make(chan []byte, 1)
	go func() { got <- c0.call(3, get(1)) }()
	time.Sleep(50 * time.Millisecond)
	c1, _ := serve(t, s, 1)
	if st := c1.handshake(okHello(1)); st != StatusSuccess {
		t.Fatal(st)
	}
	commit := cmdMsg(cmdCommit, func(e *encoder) {
		var inner encoder
		inner.kval("btl.sm.5.0", String("rank1-local"))
		e.packedByte(ScopeLocal)
		e.count(1)
		e.b = append(e.b, 1)
		e.flex(uint64(len(inner.b)))
		e.b = append(e.b, inner.b...)
	})
	if st := replyStatus(t, c1.call(4, commit)); st != StatusSuccess {
		t.Fatalf("commit: %v", st)
	}
	var reply []byte
	select {
	case reply = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the get never saw the commit")
	}
	d := decoder{b: reply}
	if st, err := d.packedInt32(); err != nil || Status(st) != StatusSuccess {
		t.Fatalf("get after commit: %v %v", st, err)
	}
	if _, err := d.count(1); err != nil {
		t.Fatal(err)
	}
	n, _ := d.size()
	bo, _ := d.bytes(n)
	in := decoder{b: bo}
	if _, err := in.count(1); err != nil {
		t.Fatal(err)
	}
	p, _ := in.proc()
	in.count(1)
	kv, err := in.kval()
	if v, _ := kv.Value.asString(); err != nil || p != (Proc{"gorun", 1}) || kv.Key != "btl.sm.5.0" || v != "rank1-local" {
		t.Fatalf("get returned %+v %+v %v", p, kv, err)
	}
}

// TestCloseWakesWaiters: Close ends a session waiting in a fence with an
// error status, and Serve returns ErrClosed.
func TestCloseWakesWaiters(t *testing.T) {
	s, _ := testServer(t, 2)
	c, done := serve(t, s, 0)
	if st := c.handshake(okHello(0)); st != StatusSuccess {
		t.Fatal(st)
	}
	fence := cmdMsg(cmdFence, func(e *encoder) {
		e.count(1)
		e.flex(1)
		e.count(1)
		e.proc(Proc{"gorun", RankWildcard})
		e.count(1)
		e.flex(0)
	})
	hdr := make([]byte, hdrLen)
	binary.BigEndian.PutUint32(hdr[8:12], uint32(len(fence)))
	if _, err := c.conn.Write(append(hdr, fence...)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	s.Close()
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("Serve after Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end the session")
	}
}

// jobKeys decodes a job-data reply: the namespace, then every kval.
func jobKeys(t *testing.T, b []byte) map[string]Value {
	t.Helper()
	d := decoder{b: b}
	if _, err := d.packedString(); err != nil {
		t.Fatalf("job data: namespace: %v", err)
	}
	keys := map[string]Value{}
	for !d.empty() {
		if _, err := d.count(1); err != nil {
			t.Fatalf("job data: %v", err)
		}
		kv, err := d.kval()
		if err != nil {
			t.Fatalf("job data: %v", err)
		}
		if _, dup := keys[kv.Key]; dup && kv.Key != keyNodeArray && kv.Key != keyProcData {
			t.Fatalf("job data: %s twice", kv.Key)
		}
		keys[kv.Key] = kv.Value
	}
	return keys
}

// TestTopologyServed: Config.Topology's XML is in every rank's job data
// as PMIX_HWLOC_XML_V2, asked for once however many ranks ask at once;
// none is served when there is no Topology, when it gives "" or when
// its XML is over MaxTopology.
func TestTopologyServed(t *testing.T) {
	const xml = `<?xml version="1.0" encoding="UTF-8"?>` + "\n<topology version=\"2.0\"/>\n"
	for _, tc := range []struct {
		name string
		topo func() string
		want string
	}{
		{"served", func() string { return xml }, xml},
		{"none", nil, ""},
		{"empty", func() string { return "" }, ""},
		{"too large", func() string { return strings.Repeat("x", MaxTopology+1) }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Hosts = []Host{{Name: "h", Ranks: []int{0, 1, 2}}}
			cfg.UID, cfg.GID = 1000, 1000
			var mu sync.Mutex
			n := 0
			if tc.topo != nil {
				cfg.Topology = func() string {
					mu.Lock()
					n++
					mu.Unlock()
					return tc.topo()
				}
			}
			s, err := NewServer(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			// Every rank's request is in before any reply is read: the
			// three sessions ask at once.
			var clients []*fakeClient
			body := cmdMsg(cmdReq)
			for r := range 3 {
				c, _ := serve(t, s, r)
				if st := c.handshake(okHello(uint32(r))); st != StatusSuccess {
					t.Fatalf("rank %d: handshake %v", r, st)
				}
				hdr := make([]byte, hdrLen)
				binary.BigEndian.PutUint32(hdr[4:8], 1)
				binary.BigEndian.PutUint32(hdr[8:12], uint32(len(body)))
				if _, err := c.conn.Write(append(hdr, body...)); err != nil {
					t.Fatal(err)
				}
				clients = append(clients, c)
			}
			for r, c := range clients {
				hdr := make([]byte, hdrLen)
				if _, err := io.ReadFull(c.conn, hdr); err != nil {
					t.Fatalf("rank %d: reply: %v", r, err)
				}
				b := make([]byte, binary.BigEndian.Uint32(hdr[8:12]))
				if _, err := io.ReadFull(c.conn, b); err != nil {
					t.Fatalf("rank %d: reply: %v", r, err)
				}
				keys := jobKeys(t, b)
				v, ok := keys[keyHwlocXML2]
				got, _ := v.asString()
				if ok != (tc.want != "") || got != tc.want {
					t.Fatalf("rank %d: %s present %v, %d bytes, want %d", r, keyHwlocXML2, ok, len(got), len(tc.want))
				}
				if _, ok := keys[keyJobSize]; !ok {
					t.Fatalf("rank %d: no job size", r)
				}
			}
			if want := map[bool]int{true: 1, false: 0}[tc.topo != nil]; n != want {
				t.Fatalf("Topology called %d times, want %d", n, want)
			}
		})
	}
}
