package launcher

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

func meetConfig(nodes int) RendezvousConfig {
	cfg := DefaultRendezvousConfig()
	cfg.Secret, cfg.Nodes, cfg.Program = []byte("s3cret-of-16-bytes"), nodes, ProgramDigest("./train", []string{"--lr", "0.1"})
	cfg.Timeout, cfg.HandshakeTimeout, cfg.loopback = 10*time.Second, time.Second, true
	return cfg
}

func nodeConfig(addr string, node, nodes int) NodeConfig {
	cfg := DefaultNodeConfig()
	cfg.Launcher, cfg.Secret, cfg.Node, cfg.Nodes, cfg.Slots = addr, []byte("s3cret-of-16-bytes"), node, nodes, node+1
	cfg.Program, cfg.Hostname = ProgramDigest("./train", []string{"--lr", "0.1"}), fmt.Sprintf("h%d", node)
	cfg.Timeout, cfg.HandshakeTimeout, cfg.RetryPause = 10*time.Second, time.Second, 20*time.Millisecond
	cfg.from = fmt.Sprintf("127.0.0.%d", 10+node) // a node's own address
	return cfg
}

// meet runs Meet on a fresh listener while dial runs; it returns what
// Meet returned and the warnings it gave.
func meet(t *testing.T, cfg RendezvousConfig, dial func(addr string)) (*Rendezvous, []Node, []string, error) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var warns []string
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); dial(l.Addr().String()) }()
	r, nodes, err := Meet(context.Background(), l, cfg, func(s string) { mu.Lock(); warns = append(warns, s); mu.Unlock() })
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	return r, nodes, warns, err
}

// TestRendezvous: nodes 1 and 2 dial in (in either order) and prove the
// secret; Meet gives them in node order with their slots and hostnames,
// and each node's stream reaches the launcher's Attach for its address,
// both ways, once.
func TestRendezvous(t *testing.T) {
	streams := make([]io.ReadWriteCloser, 3)
	r, nodes, warns, err := meet(t, meetConfig(3), func(addr string) {
		var wg sync.WaitGroup
		for _, n := range []int{2, 1} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, _, err := DialLauncher(context.Background(), nodeConfig(addr, n, 3))
				if err != nil {
					t.Errorf("node %d: %v", n, err)
					return
				}
				streams[n] = s
			}()
		}
		wg.Wait()
	})
	if err != nil {
		t.Fatal(err, warns)
	}
	defer r.Close()
	if len(nodes) != 2 || nodes[0].Index != 1 || nodes[1].Index != 2 || nodes[0].Slots != 2 || nodes[1].Hostname != "h2" {
		t.Fatalf("nodes %+v", nodes)
	}
	if nodes[0].Addr != "127.0.0.11" || nodes[1].Addr != "127.0.0.12" {
		t.Fatalf("addresses %s, %s", nodes[0].Addr, nodes[1].Addr)
	}
	for i, n := range nodes {
		s, err := r.Attach(n.Addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Attach(n.Addr); err == nil {
			t.Fatal("a stream was attached twice")
		}
		node := streams[n.Index]
		msg := fmt.Sprintf("spec %d\n", i)
		go func() { _, _ = io.WriteString(s, msg) }()
		if line, err := bufio.NewReader(node).ReadString('\n'); line != msg {
			t.Fatalf("node %d read %q, %v; want %q", n.Index, line, err, msg)
		}
		go func() { _, _ = io.WriteString(node, "ready\n") }()
		if line, err := bufio.NewReader(s).ReadString('\n'); line != "ready\n" {
			t.Fatalf("the launcher read %q, %v from node %d", line, err, n.Index)
		}
		s.Close()
		node.Close()
	}
}

// TestRendezvousRefusals: a wrong secret, a node index twice, a node
// started for another size, another program, and a connection that says
// nothing are refused with errors that say so, on the node and in the
// launcher's warnings, while the real node still gets in.
func TestRendezvousRefusals(t *testing.T) {
	var nodeErrs []error
	var mu sync.Mutex
	cfg := meetConfig(2)
	cfg.HandshakeTimeout = 200 * time.Millisecond
	_, nodes, warns, err := meet(t, cfg, func(addr string) {
		silent, err := net.Dial("tcp", addr)
		if err == nil {
			defer silent.Close()
		}
		try := func(c NodeConfig) {
			_, _, err := DialLauncher(context.Background(), c)
			mu.Lock()
			nodeErrs = append(nodeErrs, err)
			mu.Unlock()
		}
		bad := nodeConfig(addr, 1, 2)
		bad.Secret = []byte("guessed-16-bytes-or-more")
		try(bad)
		bad = nodeConfig(addr, 1, 2)
		bad.Nodes = 3
		try(bad)
		bad = nodeConfig(addr, 1, 2)
		bad.Program = ProgramDigest("./train", []string{"--lr", "0.2"})
		try(bad)
		time.Sleep(400 * time.Millisecond) // the silent one's handshake times out
		try(nodeConfig(addr, 1, 2))        // the real one
		late := nodeConfig(addr, 1, 2)     // again: Meet is over, nobody listens
		late.Timeout = 300 * time.Millisecond
		try(late)
	})
	if err != nil {
		t.Fatal(err, warns)
	}
	if len(nodes) != 1 || nodes[0].Index != 1 {
		t.Fatalf("nodes %+v", nodes)
	}
	wantNode := []string{"does not know this job's secret", "started for 3 nodes, the launcher for 2", "another program or other arguments", "", "no launcher at"}
	for i, want := range wantNode {
		got := nodeErrs[i]
		if want == "" {
			if got != nil {
				t.Errorf("the real node: %v", got)
			}
			continue
		}
		if got == nil || !strings.Contains(got.Error(), want) {
			t.Errorf("node attempt %d: %v, want an error saying %q", i, got, want)
		}
	}
	all := strings.Join(warns, "\n")
	for _, want := range []string{"no answer to the challenge", "started for 3 nodes", "another program", "no handshake"} {
		if !strings.Contains(all, want) {
			t.Errorf("the launcher did not warn %q:\n%s", want, all)
		}
	}
}

// TestRendezvousDuplicateAndReplay: a second node 1 is refused while the
// first holds the place, and a recorded handshake replayed on a new
// connection fails (the launcher's nonce is new).
func TestRendezvousDuplicateAndReplay(t *testing.T) {
	var dupErr, replayErr error
	_, nodes, warns, err := meet(t, meetConfig(3), func(addr string) {
		first, _, err := DialLauncher(context.Background(), nodeConfig(addr, 1, 3))
		if err != nil {
			t.Error(err)
			return
		}
		defer first.Close()
		_, _, dupErr = DialLauncher(context.Background(), nodeConfig(addr, 1, 3))
		// Record node 2's handshake through a proxy, then replay it.
		var rec []string
		cfg := nodeConfig(addr, 2, 3)
		c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.20")}}).Dial("tcp", addr)
		if err != nil {
			t.Error(err)
			return
		}
		line := fmt.Sprintf("gorun-node 2 2 3 3 h2 %s %s", cfg.Program, strings.Repeat("ab", 16))
		fmt.Fprintln(c, line)
		br := bufio.NewReader(c)
		challenge, _ := br.ReadString('\n')
		f := strings.Fields(challenge)
		answer := mac([]byte("s3cret-of-16-bytes"), "node", line, f[2])
		rec = append(rec, line, answer)
		c.Close() // never finished: the launcher warns
		replay, err := net.Dial("tcp", addr)
		if err != nil {
			t.Error(err)
			return
		}
		for _, l := range rec {
			fmt.Fprintln(replay, l)
		}
		rb := bufio.NewReader(replay)
		_, _ = rb.ReadString('\n') // the new challenge
		verdict, _ := rb.ReadString('\n')
		if !strings.HasPrefix(verdict, "refused: wrong job secret") {
			replayErr = errors.New("replay: " + verdict)
		}
		replay.Close()
		s, _, err := DialLauncher(context.Background(), cfg)
		if err != nil {
			t.Error(err)
			return
		}
		s.Close()
	})
	if err != nil {
		t.Fatal(err, warns)
	}
	if len(nodes) != 2 {
		t.Fatalf("nodes %+v", nodes)
	}
	if !errors.Is(dupErr, ErrRefused) || !strings.Contains(dupErr.Error(), "node 1 is here already") {
		t.Errorf("second node 1: %v", dupErr)
	}
	if replayErr != nil {
		t.Error(replayErr)
	}
}

// TestRendezvousTimeout: Meet names the nodes that never came; a node
// that dials before the launcher listens keeps trying until it does.
func TestRendezvousTimeout(t *testing.T) {
	cfg := meetConfig(4)
	cfg.Timeout = 500 * time.Millisecond
	_, _, _, err := meet(t, cfg, func(addr string) {
		s, _, err := DialLauncher(context.Background(), nodeConfig(addr, 2, 4))
		if err == nil {
			s.Close()
		}
	})
	if err == nil || !strings.Contains(err.Error(), "nodes [1 3] never dialed in") {
		t.Fatalf("Meet: %v", err)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nobody listens yet
	done := make(chan error, 1)
	go func() {
		s, _, err := DialLauncher(context.Background(), nodeConfig(addr, 1, 2))
		if err == nil {
			s.Close()
		}
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	l, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("port taken meanwhile: %v", err)
	}
	if _, _, err := Meet(context.Background(), l, meetConfig(2), nil); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the early node: %v", err)
	}
}

// TestRendezvousNoSecret: neither side runs without a secret of at least 16 bytes.
func TestRendezvousNoSecret(t *testing.T) {
	cfg := meetConfig(2)
	cfg.Secret = nil
	if _, _, err := Meet(context.Background(), nil, cfg, nil); err == nil || !strings.Contains(err.Error(), "GORUN_JOB_SECRET") {
		t.Errorf("Meet: %v", err)
	}
	nc := nodeConfig("127.0.0.1:1", 1, 2)
	nc.Secret = []byte("short")
	if _, _, err := DialLauncher(context.Background(), nc); err == nil || !strings.Contains(err.Error(), "GORUN_JOB_SECRET") {
		t.Errorf("DialLauncher: %v", err)
	}
}

// FuzzRendezvousHandshake: whatever a connection sends, the launcher's
// handshake ends with an error (no input knows the nonce it has not seen
// yet) and never panics; so does a node's, reading it as the launcher's
// answers.
func FuzzRendezvousHandshake(f *testing.F) {
	cfg := meetConfig(3)
	f.Add([]byte("gorun-node 2 1 3 2 h1 " + cfg.Program + " 00\nffff\n"))
	f.Add([]byte("gorun-node 2 -1 3 2 h1 x y\n"))
	f.Add([]byte(strings.Repeat("x", 2000)))
	f.Fuzz(func(t *testing.T, in []byte) {
		if n, err := cfg.handshake(&scriptConn{r: bytes.NewReader(in)}); err == nil {
			t.Fatalf("%q: accepted as node %+v", in, n)
		}
		// The node's side, reading the same as the launcher's answers.
		if _, err := nodeConfig("x:1", 1, 3).handshake(&scriptConn{r: bytes.NewReader(in)}); err == nil {
			t.Fatalf("%q: taken for the launcher", in)
		}
	})
}

// scriptConn is a connection that reads a fixed input and drops what is
// written to it.
type scriptConn struct {
	net.Conn
	r *bytes.Reader
}

func (c *scriptConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c *scriptConn) Write(p []byte) (int, error) { return len(p), nil }
func (c *scriptConn) SetDeadline(time.Time) error { return nil }
func (c *scriptConn) RemoteAddr() net.Addr        { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }
func (c *scriptConn) Close() error                { return nil }
