package pmi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestParseLine(t *testing.T) {
	r, err := ParseLine("cmd=put kvsname=k key=a  value=")
	if err != nil || r.Cmd != "put" || r.Multi || r.Args["kvsname"] != "k" || r.Args["key"] != "a" || r.Args["value"] != "" || len(r.Args) != 3 {
		t.Fatalf("%+v %v", r, err)
	}
	if r, err := ParseLine("mcmd=spawn"); err != nil || !r.Multi || r.Cmd != "spawn" {
		t.Fatalf("%+v %v", r, err)
	}
	for _, bad := range []string{"", "   ", "put key=a", "cmd=", "cmd=put key", "cmd=put =v", "cmd=put a=1 a=2", "cmd=put cmd=x",
		"cmd=get\x00", "key=a cmd=get", strings.Repeat("a", MaxLine+1)} {
		if _, err := ParseLine(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("%q: %v, want ErrMalformed", clip(bad), err)
		}
	}
	if got := string(Format("get_result", "rc", "0", "value", "v")); got != "cmd=get_result rc=0 value=v\n" {
		t.Fatalf("Format: %q", got)
	}
}

func FuzzParseLine(f *testing.F) {
	for _, s := range []string{"cmd=init pmi_version=1 pmi_subversion=1", "cmd=put kvsname=k key=a value=b", "mcmd=spawn", "cmd=", "x=y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseLine(s)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("%q: error %v does not wrap ErrMalformed", s, err)
			}
			return
		}
		// What parses formats back to something that parses the same.
		// A value that runs to the end of the line goes last.
		var kv, last []string
		for k, v := range r.Args {
			if restOfLine(r, k) {
				last = []string{k, v}
			} else {
				kv = append(kv, k, v)
			}
		}
		kv = append(kv, last...)
		line := strings.TrimSuffix(string(Format(r.Cmd, kv...)), "\n")
		if r.Multi {
			line = "m" + line
		}
		r2, err := ParseLine(line)
		if err != nil || r2.Cmd != r.Cmd || r2.Multi != r.Multi || len(r2.Args) != len(r.Args) {
			t.Fatalf("%q -> %q: %+v %v", s, line, r2, err)
		}
		for k, v := range r.Args {
			if r2.Args[k] != v {
				t.Fatalf("%q: key %q: %q then %q", s, k, v, r2.Args[k])
			}
		}
	})
}

// expand is what MPICH does with a mapping: it repeats the triples until
// size ranks have a node.
func expand(t *testing.T, m string, size int) []int {
	t.Helper()
	inner, ok := strings.CutPrefix(m, "(vector,")
	if !ok || !strings.HasSuffix(inner, ")") {
		t.Fatalf("mapping %q", m)
	}
	var ts [][3]int
	for _, tr := range strings.Split(strings.TrimSuffix(inner, ")"), "),(") {
		var x [3]int
		if _, err := fmt.Sscanf(strings.Trim(tr, "()"), "%d,%d,%d", &x[0], &x[1], &x[2]); err != nil {
			t.Fatalf("mapping %q: %v", m, err)
		}
		ts = append(ts, x)
	}
	var out []int
	for len(out) < size {
		for _, x := range ts {
			for n := x[0]; n < x[0]+x[1]; n++ {
				for range x[2] {
					out = append(out, n)
				}
			}
		}
	}
	return out[:size]
}

func TestProcessMapping(t *testing.T) {
	for _, tc := range []struct {
		node []int
		want string
	}{
		{[]int{0, 0, 0, 0, 1, 1, 1, 1}, "(vector,(0,2,4))"},
		{[]int{0, 1, 0, 1}, "(vector,(0,2,1))"},
		{[]int{0}, "(vector,(0,1,1))"},
		{[]int{0, 0, 1}, "(vector,(0,1,2),(1,1,1))"},
		{[]int{0, 1, 2, 0, 1}, "(vector,(0,3,1))"},
		{[]int{0, 1, 0, 1, 0}, "(vector,(0,2,1))"},
	} {
		if got := ProcessMapping(tc.node); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.node, got, tc.want)
		}
	}
	// Any placement expands back to itself.
	for seed := range 200 {
		nodes := 1 + seed%5
		var node []int
		for i := range 1 + seed%23 {
			node = append(node, (i*7+seed*i/3)%nodes)
		}
		m := ProcessMapping(node)
		if m == "" {
			continue
		}
		if got := expand(t, m, len(node)); fmt.Sprint(got) != fmt.Sprint(node) {
			t.Fatalf("%v -> %q -> %v", node, m, got)
		}
	}
	if ProcessMapping(nil) != "" {
		t.Fatal("no ranks")
	}
	long := make([]int, 2000)
	for i := range long {
		long[i] = i * 7919 % 1999
	}
	if m := ProcessMapping(long); m != "" {
		t.Fatalf("a mapping of %d bytes was not dropped", len(m))
	}
}

// client is a scripted rank on one end of a pipe.
type client struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func (c *client) ask(line string) string {
	c.t.Helper()
	if _, err := c.c.Write([]byte(line + "\n")); err != nil {
		c.t.Fatalf("%q: %v", line, err)
	}
	_ = c.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	s, err := c.r.ReadString('\n')
	if err != nil {
		c.t.Fatalf("%q: %v", line, err)
	}
	return strings.TrimSuffix(s, "\n")
}

type served struct {
	res Result
	err error
}

// job is hosts Nodes of local ranks each, joined by one Fence through
// goroutines standing in for the launcher.
type job struct {
	nodes []*Node
	done  []chan served
	cl    []*client
}

func newJob(t *testing.T, hosts, local int, ctx context.Context) *job {
	t.Helper()
	fcfg := DefaultFenceConfig()
	fcfg.Hosts, fcfg.MaxBytes = hosts, 1<<16
	f, err := NewFence(fcfg)
	if err != nil {
		t.Fatal(err)
	}
	j := &job{}
	var mu sync.Mutex
	for h := range hosts {
		cfg := DefaultNodeConfig()
		cfg.KVS, cfg.Size, cfg.Local = "kvs_test", hosts*local, local
		cfg.Mapping = "(vector,(0,2,1))"
		cfg.Relay = func(epoch int, puts []KV) error {
			mu.Lock()
			rel, complete, err := f.Enter(h, epoch, puts)
			mu.Unlock()
			if err != nil {
				return err
			}
			if complete {
				for _, n := range j.nodes {
					go func() { _ = n.Release(epoch, rel) }()
				}
			}
			return nil
		}
		n, err := NewNode(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		j.nodes = append(j.nodes, n)
	}
	for h, n := range j.nodes {
		for l := range local {
			rank := h*local + l
			a, b := net.Pipe()
			t.Cleanup(func() { a.Close(); b.Close() })
			ch := make(chan served, 1)
			go func() {
				res, err := n.Serve(ctx, rank, b)
				b.Close()
				ch <- served{res, err}
			}()
			j.done = append(j.done, ch)
			j.cl = append(j.cl, &client{t: t, c: a, r: bufio.NewReader(a)})
		}
	}
	return j
}

func (j *job) wait(t *testing.T, rank int) served {
	t.Helper()
	select {
	case s := <-j.done[rank]:
		return s
	case <-time.After(10 * time.Second):
		t.Fatalf("rank %d: Serve did not return", rank)
	}
	return served{}
}

// TestSession walks every command of a two-host job: puts are visible to
// every rank on every host after a barrier, missing keys answer rc=-1,
// finalize ends the session.
func TestSession(t *testing.T) {
	ctx := context.Background()
	j := newJob(t, 2, 2, ctx)
	for r, c := range j.cl {
		want := map[string]string{
			"cmd=init pmi_version=1 pmi_subversion=1": "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0",
			"cmd=get_maxes":         "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024",
			"cmd=get_appnum":        "cmd=appnum appnum=0",
			"cmd=get_my_kvsname":    "cmd=my_kvsname kvsname=kvs_test",
			"cmd=get_universe_size": "cmd=universe_size size=4",
			"cmd=get kvsname=kvs_test key=PMI_process_mapping":                  "cmd=get_result rc=0 msg=success value=(vector,(0,2,1))",
			"cmd=get kvsname=kvs_test key=nope":                                 "cmd=get_result rc=-1 msg=key_not_found",
			fmt.Sprintf("cmd=put kvsname=kvs_test key=card-%d value=v%d", r, r): "cmd=put_result rc=0 msg=success",
			"cmd=put kvsname=other key=a value=b":                               "cmd=put_result rc=-1 msg=unknown_kvsname",
			"cmd=put kvsname=kvs_test key=PMI_process_mapping value=x":          "cmd=put_result rc=-1 msg=reserved_key",
			"cmd=publish_name service=s port=p":                                 "cmd=publish_result rc=-1 msg=name_service_not_supported",
			"cmd=lookup_name service=s":                                         "cmd=lookup_result rc=-1 msg=name_service_not_supported",
			"cmd=getbyidx kvsname=kvs_test idx=0":                               "cmd=getbyidx_results rc=-1 reason=kvs_iteration_not_supported",
		}
		for q, a := range want {
			if got := c.ask(q); got != a {
				t.Fatalf("rank %d: %q -> %q, want %q", r, q, got, a)
			}
		}
		if got := c.ask("cmd=put kvsname=kvs_test key=" + strings.Repeat("k", MaxKey+1) + " value=v"); !strings.HasPrefix(got, "cmd=put_result rc=-1 ") {
			t.Fatalf("long key: %q", got)
		}
		if got := c.ask("cmd=put kvsname=kvs_test key=k value=" + strings.Repeat("v", MaxValue+1)); !strings.HasPrefix(got, "cmd=put_result rc=-1 ") {
			t.Fatalf("long value: %q", got)
		}
		if _, err := c.c.Write([]byte("mcmd=spawn\nnprocs=2\nexecname=x\nendcmd\n")); err != nil {
			t.Fatal(err)
		}
		if s, _ := c.r.ReadString('\n'); !strings.HasPrefix(s, "cmd=spawn_result rc=-1 ") {
			t.Fatalf("spawn: %q", s)
		}
	}
	// Each host's puts are visible there before the barrier; the others' after it.
	if got := j.cl[1].ask("cmd=get kvsname=kvs_test key=card-0"); got != "cmd=get_result rc=0 msg=success value=v0" {
		t.Fatalf("same host before the barrier: %q", got)
	}
	for round := range 3 {
		outs := make(chan string, len(j.cl))
		for _, c := range j.cl {
			go func() {
				_, _ = c.c.Write([]byte("cmd=barrier_in\n"))
				s, _ := c.r.ReadString('\n')
				outs <- s
			}()
		}
		for range j.cl {
			select {
			case s := <-outs:
				if s != "cmd=barrier_out\n" {
					t.Fatalf("round %d: %q", round, s)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("round %d: barrier not released", round)
			}
		}
	}
	for r, c := range j.cl {
		for o := range j.cl {
			if got, want := c.ask(fmt.Sprintf("cmd=get kvsname=kvs_test key=card-%d", o)), fmt.Sprintf("cmd=get_result rc=0 msg=success value=v%d", o); got != want {
				t.Fatalf("rank %d reads rank %d's card: %q", r, o, got)
			}
		}
		if got := c.ask("cmd=finalize"); got != "cmd=finalize_ack" {
			t.Fatalf("finalize: %q", got)
		}
		if s := j.wait(t, r); s.err != nil || !s.res.Init || !s.res.Finalized || s.res.Aborted {
			t.Fatalf("rank %d: %+v %v", r, s.res, s.err)
		}
	}
}

// TestBarrierWaitsForEveryHost: with one rank of the other host missing,
// nobody leaves the barrier; closing the node wakes its ranks.
func TestBarrierWaitsForEveryHost(t *testing.T) {
	j := newJob(t, 2, 1, context.Background())
	_, _ = j.cl[0].c.Write([]byte("cmd=barrier_in\n"))
	got := make(chan string, 1)
	go func() { s, _ := j.cl[0].r.ReadString('\n'); got <- s }()
	select {
	case s := <-got:
		t.Fatalf("left the barrier alone: %q", s)
	case <-time.After(200 * time.Millisecond):
	}
	j.nodes[0].Close()
	if s := j.wait(t, 0); !errors.Is(s.err, ErrClosed) {
		t.Fatalf("after Close: %v", s.err)
	}
}

// TestBadRequests: garbage, an unknown command, an over-long line and a
// line cut off by the end of the stream end the session with an error
// that names the rank; abort reports its code and ends it quietly.
func TestBadRequests(t *testing.T) {
	for _, tc := range []struct{ send, want string }{
		{"hello world\n", "does not start with cmd="},
		{"cmd=frobnicate\n", `unknown command "frobnicate"`},
		{"cmd=get key=" + strings.Repeat("x", MaxLine) + "\n", "line longer than"},
		{"cmd=get_maxes", "ends without a newline"},
		{"cmd=put\x01 key=a\n", "control character"},
	} {
		n, _ := NewNode(DefaultNodeConfig())
		a, b := net.Pipe()
		ch := make(chan error, 1)
		go func() { _, err := n.Serve(context.Background(), 7, b); ch <- err }()
		go func() { _, _ = a.Write([]byte(tc.send)); a.Close() }()
		err := <-ch
		if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "rank 7") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want ErrMalformed naming rank 7 and %q", clip(tc.send), err, tc.want)
		}
	}
	cfg := DefaultNodeConfig()
	var code int
	cfg.Abort = func(rank, c int, msg string) { code = c }
	n, _ := NewNode(cfg)
	a, b := net.Pipe()
	defer a.Close()
	go func() { _, _ = a.Write([]byte("cmd=abort exitcode=3\n")) }()
	res, err := n.Serve(context.Background(), 0, b)
	if err != nil || !res.Aborted || res.Code != 3 || code != 3 {
		t.Fatalf("abort: %+v %v (callback %d)", res, err, code)
	}
}

// TestFence: out-of-step and duplicate entries and an over-full store are
// errors; a complete barrier returns every host's puts.
func TestFence(t *testing.T) {
	f, _ := NewFence(FenceConfig{Hosts: 2, MaxBytes: 10})
	if _, _, err := f.Enter(0, 2, nil); err == nil {
		t.Fatal("barrier 2 before 1")
	}
	if _, done, err := f.Enter(0, 1, []KV{{"a", "1"}}); err != nil || done {
		t.Fatal(done, err)
	}
	if _, _, err := f.Enter(0, 1, nil); err == nil {
		t.Fatal("twice")
	}
	if _, _, err := f.Enter(2, 1, nil); err == nil {
		t.Fatal("host 2 of 2")
	}
	rel, done, err := f.Enter(1, 1, []KV{{"b", "2"}})
	if err != nil || !done || len(rel) != 2 {
		t.Fatal(rel, done, err)
	}
	if _, _, err := f.Enter(0, 2, []KV{{"long", "12345678"}}); err == nil || !strings.Contains(err.Error(), "more than the 10") {
		t.Fatalf("over the cap: %v", err)
	}
}

// TestParseLineRestOfLine: a put's value and an abort's message run to the
// end of the line, spaces included (Open MPI's encoded values hold them);
// elsewhere a space still separates fields.
func TestParseLineRestOfLine(t *testing.T) {
	for _, tc := range []struct{ line, key, want string }{
		{"cmd=put kvsname=k key=a value=x  y -", "value", "x  y -"},
		{"cmd=put kvsname=k key=a value=", "value", ""},
		{"cmd=put kvsname=k key=a value=key=b", "value", "key=b"},
		{"cmd=abort exitcode=3 msg=it went wrong ", "msg", "it went wrong "},
		{"cmd=abort exitcode=3 message=application called MPI_Abort(MPI_COMM_WORLD, 3) - process 1", "message", "application called MPI_Abort(MPI_COMM_WORLD, 3) - process 1"}, // MPICH 4.2
	} {
		r, err := ParseLine(tc.line)
		if err != nil || r.Args[tc.key] != tc.want {
			t.Fatalf("%q: %q, %v; want %s=%q", tc.line, r.Args[tc.key], err, tc.key, tc.want)
		}
	}
	if _, err := ParseLine("cmd=get kvsname=k key=a b"); err == nil {
		t.Fatal("a get with a stray word parsed")
	}
}
