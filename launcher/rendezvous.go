package launcher

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorun/gorun/internal/jobsecret"
)

// Agents that dial back. Where no launcher may reach the nodes (no SSH: a
// Kubernetes Job's pods, a container per host, a resource manager that
// starts one process per node), every node starts gorun itself, and all
// but node 0 dial node 0's launcher at a rendezvous address and run their
// agent over that connection: the same protocol as over SSH (placement,
// PMI, output, signals, exit codes, restarts, elastic views).
//
// Both ends prove that they know the job's secret (GORUN_JOB_SECRET, the
// same on every node, never on a command line) without sending it:
//
//	node:     gorun-node 2 NODE NNODES SLOTS HOSTNAME PROGRAM NONCE
//	launcher: gorun-launcher 2 NONCE MAC       (MAC over the node's line and both nonces)
//	node:     MAC                               (another MAC over the same)
//	launcher: ok | refused: WHY
//
// with the MACs keyed by the secret's rendezvous key (package jobsecret),
// then the agent's stream begins. Each nonce is fresh, so a recorded
// handshake cannot be replayed; PROGRAM is a digest of the program and
// its arguments, so nodes started with different commands are refused.

// RendezvousConfig is a launcher's side of the nodes' rendezvous.
type RendezvousConfig struct {
	Secret []byte // the job's secret (GORUN_JOB_SECRET)
	Nodes  int    // nodes in the job, this one (node 0) included
	// Program is the digest (ProgramDigest) of the command every node
	// must have been started with.
	Program string
	// Timeout bounds the wait for every node; HandshakeTimeout a single
	// node's handshake.
	Timeout, HandshakeTimeout time.Duration
	// allDial: every node, 0 included, dials in (an srun step's agents;
	// the launcher runs no agent of its own), and nodes are known by the
	// hostname they send (their Slurm node names), not their address.
	allDial  bool
	names    []string // the nodes' names by index, for errors ("" : none)
	loopback bool     // tests: nodes may dial from this machine
}

// first is the lowest index of a node that dials in.
func (cfg RendezvousConfig) first() int {
	if cfg.allDial {
		return 0
	}
	return 1
}

// DefaultRendezvousConfig waits 5 minutes for the nodes (pods may be
// scheduled one by one), 10 s for a handshake.
func DefaultRendezvousConfig() RendezvousConfig {
	return RendezvousConfig{Timeout: 5 * time.Minute, HandshakeTimeout: 10 * time.Second}
}

// Node is one node that dialed in.
type Node struct {
	Index    int
	Slots    int
	Hostname string
	Addr     string // the address it dialed from: its ranks advertise it
	stream   io.ReadWriteCloser
}

// Rendezvous holds the nodes that dialed in, and hands each one's stream
// to the launcher as its agent (it is the launcher's Remote spawner).
type Rendezvous struct {
	mu    sync.Mutex
	nodes map[string]*Node // by Addr (by Hostname when every node dialed in)
}

// ProgramDigest is what a node's handshake says of the command it was
// started with.
func ProgramDigest(program string, args []string) string {
	h := sha256.New()
	for _, s := range append([]string{program}, args...) {
		fmt.Fprintf(h, "%d:%s", len(s), s)
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// Meet accepts nodes on l until nodes 1..Nodes-1 have each dialed in and
// proved the secret, and returns them in node order. If ctx ends first,
// the error names the nodes missing and ctx's cause. Connections that
// fail the handshake are refused and logged through warn (nil: dropped);
// the wait ends with an error naming the nodes that never came.
func Meet(ctx context.Context, l net.Listener, cfg RendezvousConfig, warn func(string)) (*Rendezvous, []Node, error) {
	if err := jobsecret.Check(cfg.Secret); err != nil {
		return nil, nil, fmt.Errorf("rendezvous: %w: set GORUN_JOB_SECRET to the same value on every node", err)
	}
	if cfg.Nodes < 1 {
		return nil, nil, fmt.Errorf("rendezvous: %d nodes: want at least 1", cfg.Nodes)
	}
	if warn == nil {
		warn = func(string) {}
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	var wg sync.WaitGroup // the handshakes under way
	defer func() { cancel(); wg.Wait() }()
	stop := context.AfterFunc(ctx, func() { _ = l.Close() })
	defer stop()
	arrivals := cfg.accept(ctx, l, &wg)
	got := map[int]Node{}
	for len(got) < cfg.Nodes-cfg.first() {
		select {
		case a := <-arrivals:
			admit(got, a, warn)
		case <-ctx.Done():
			closeStreams(got)
			why := fmt.Sprintf("within %v", cfg.Timeout)
			if cause := context.Cause(ctx); !errors.Is(cause, context.DeadlineExceeded) {
				why = "(" + cause.Error() + ")"
			}
			return nil, nil, fmt.Errorf("rendezvous at %s: nodes %v never dialed in %s", l.Addr(), cfg.missing(got), why)
		}
	}
	stop()
	_ = l.Close()
	return cfg.rendezvous(got)
}

// arrival is a connection to l and how its handshake went.
type arrival struct {
	n   Node
	err error
	c   net.Conn
}

// accept accepts connections on l until it is closed, and hands each
// one's handshake to arrivals, or closes it once ctx ends. wg counts the
// handshakes under way.
func (cfg RendezvousConfig) accept(ctx context.Context, l net.Listener, wg *sync.WaitGroup) <-chan arrival {
	arrivals := make(chan arrival)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				n, err := cfg.handshake(c)
				select {
				case arrivals <- arrival{n, err, c}:
				case <-ctx.Done():
					c.Close()
				}
			}()
		}
	}()
	return arrivals
}

// admit adds an arrival to got and tells it "ok", or refuses it (a failed
// handshake, or a node already here), telling it why and warning.
func admit(got map[int]Node, a arrival, warn func(string)) {
	if a.err == nil {
		if prev, dup := got[a.n.Index]; dup {
			a.err = fmt.Errorf("node %d is here already (from %s)", a.n.Index, prev.Addr)
		}
	}
	if a.err != nil {
		warn(fmt.Sprintf("rendezvous: refused %s: %v", a.c.RemoteAddr(), a.err))
		_, _ = io.WriteString(a.c, "refused: "+a.err.Error()+"\n")
		a.c.Close()
		return
	}
	if _, err := io.WriteString(a.n.stream, "ok\n"); err != nil {
		warn(fmt.Sprintf("rendezvous: node %d (%s) left during its handshake", a.n.Index, a.n.Addr))
		a.n.stream.Close()
		return
	}
	got[a.n.Index] = a.n
}

// closeStreams closes the streams of the nodes admitted.
func closeStreams(got map[int]Node) {
	for _, n := range got {
		n.stream.Close()
	}
}

// missing names the nodes not in got, by name where the launcher knows
// it, else by index.
func (cfg RendezvousConfig) missing(got map[int]Node) []string {
	var missing []string
	for i := cfg.first(); i < cfg.Nodes; i++ {
		if _, ok := got[i]; !ok {
			if i < len(cfg.names) {
				missing = append(missing, cfg.names[i])
			} else {
				missing = append(missing, strconv.Itoa(i))
			}
		}
	}
	return missing
}

// rendezvous is the Rendezvous of every node admitted, and the nodes in
// order; two nodes from one address (or of one name, when every node
// dialed in) are an error, and close every stream.
func (cfg RendezvousConfig) rendezvous(got map[int]Node) (*Rendezvous, []Node, error) {
	r := &Rendezvous{nodes: map[string]*Node{}}
	nodes := make([]Node, 0, len(got))
	for i := cfg.first(); i < cfg.Nodes; i++ {
		n := got[i]
		key, what := n.Addr, "dialed from the same address"
		if cfg.allDial {
			key, what = n.Hostname, "have the same name"
		}
		if _, same := r.nodes[key]; same {
			closeStreams(got)
			return nil, nil, fmt.Errorf("rendezvous: nodes %d and %d %s %s: one gorun per node", r.nodes[key].Index, n.Index, what, key)
		}
		r.nodes[key] = &n
		nodes = append(nodes, n)
	}
	return r, nodes, nil
}

// handshake is the launcher's side of one node's handshake.
func (cfg RendezvousConfig) handshake(c net.Conn) (Node, error) {
	_ = c.SetDeadline(time.Now().Add(cfg.HandshakeTimeout))
	br := bufio.NewReaderSize(c, 1024)
	line, err := readLine(br)
	if err != nil {
		return Node{}, fmt.Errorf("no handshake: %w", err)
	}
	f := strings.Fields(line)
	if len(f) != 8 || f[0] != "gorun-node" {
		return Node{}, fmt.Errorf("not a gorun node (%.40q)", line)
	}
	if f[1] != rendezvousVersion {
		return Node{}, fmt.Errorf("rendezvous protocol %s, this launcher speaks %s: use the same gorun on every node", f[1], rendezvousVersion)
	}
	idx, err1 := strconv.Atoi(f[2])
	nodes, err2 := strconv.Atoi(f[3])
	slots, err3 := strconv.Atoi(f[4])
	if err := errors.Join(err1, err2, err3); err != nil || idx < cfg.first() || slots < 1 {
		return Node{}, fmt.Errorf("bad handshake %.80q", line)
	}
	nonceL, err := nonce()
	if err != nil {
		return Node{}, err
	}
	if _, err := fmt.Fprintf(c, "gorun-launcher %s %s %s\n", rendezvousVersion, nonceL, mac(cfg.Secret, "launcher", line, nonceL)); err != nil {
		return Node{}, err
	}
	reply, err := readLine(br)
	if err != nil {
		return Node{}, fmt.Errorf("no answer to the challenge: %w", err)
	}
	if !hmac.Equal([]byte(reply), []byte(mac(cfg.Secret, "node", line, nonceL))) {
		return Node{}, errors.New("wrong job secret (GORUN_JOB_SECRET differs from the launcher's)")
	}
	switch {
	case nodes != cfg.Nodes:
		return Node{}, fmt.Errorf("node %d was started for %d nodes, the launcher for %d", idx, nodes, cfg.Nodes)
	case idx >= cfg.Nodes:
		return Node{}, fmt.Errorf("node %d in a job of %d nodes (0 to %d)", idx, cfg.Nodes, cfg.Nodes-1)
	case f[6] != cfg.Program && cfg.allDial:
		return Node{}, fmt.Errorf("agent %d is from another srun step (another gorun's job)", idx)
	case f[6] != cfg.Program:
		return Node{}, fmt.Errorf("node %d was started with another program or other arguments than node 0", idx)
	}
	_ = c.SetDeadline(time.Time{})
	host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() && !cfg.loopback {
		return Node{}, fmt.Errorf("node %d dialed from this machine (%s): one gorun per node; on one machine run node 0 alone with all the slots", idx, host)
	}
	return Node{Index: idx, Slots: slots, Hostname: f[5], Addr: host, stream: bufferedConn{br, c}}, nil
}

// NodeConfig is a node's side of the rendezvous.
type NodeConfig struct {
	// Launcher is the rendezvous address, HOST:PORT, or several separated
	// by commas (one per interface of the launcher's machine: each is
	// tried in turn, 3 s at most each, until one answers).
	Launcher string
	Secret   []byte
	Node     int // this node's index, 1..Nodes-1
	Nodes    int
	Slots    int
	Program  string // ProgramDigest of its command
	Hostname string
	// Timeout bounds the whole dial (node 0 may not be up yet: it is
	// retried after 100 ms, then after pauses that double up to
	// RetryPause); HandshakeTimeout one handshake.
	Timeout, HandshakeTimeout, RetryPause time.Duration
	from                                  string // tests: the local address to dial from
}

// DefaultNodeConfig retries for 5 minutes, at most a second apart.
func DefaultNodeConfig() NodeConfig {
	return NodeConfig{Timeout: 5 * time.Minute, HandshakeTimeout: 10 * time.Second, RetryPause: time.Second}
}

// ErrRefused wraps the launcher's refusal of a node.
var ErrRefused = errors.New("refused by the launcher")

// rendezvousVersion is the version of the rendezvous lines above.
const rendezvousVersion = "2"

// DialLauncher dials node 0's launcher, retrying until it answers or
// cfg.Timeout passes, and returns the agent's stream once both sides
// proved the secret. A refusal or a launcher that does not know the
// secret is final; a launcher not listening yet is retried.
func DialLauncher(ctx context.Context, cfg NodeConfig) (io.ReadWriteCloser, string, error) {
	if err := jobsecret.Check(cfg.Secret); err != nil {
		return nil, "", fmt.Errorf("%w: set GORUN_JOB_SECRET to the same value on every node", err)
	}
	if strings.ContainsAny(cfg.Hostname, " \t\n") || cfg.Hostname == "" {
		cfg.Hostname = "node" + strconv.Itoa(cfg.Node)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	var last error
	pause := min(100*time.Millisecond, cfg.RetryPause) // doubling up to RetryPause
	addrs := strings.Split(cfg.Launcher, ",")
	for {
		for _, addr := range addrs {
			var d net.Dialer
			if len(addrs) > 1 {
				d.Timeout = 3 * time.Second
			}
			if cfg.from != "" {
				d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(cfg.from)}
			}
			c, err := d.DialContext(ctx, "tcp", addr)
			if err == nil {
				s, err := cfg.handshake(c)
				if err == nil {
					local, _, _ := net.SplitHostPort(c.LocalAddr().String())
					return s, local, nil
				}
				c.Close()
				if errors.Is(err, ErrRefused) || errors.Is(err, errWrongSecret) {
					return nil, "", err
				}
			}
			last = err
		}
		select {
		case <-time.After(pause):
			pause = min(2*pause, cfg.RetryPause)
		case <-ctx.Done():
			return nil, "", fmt.Errorf("node %d: no launcher at %s within %v: %w", cfg.Node, cfg.Launcher, cfg.Timeout, last)
		}
	}
}

var errWrongSecret = errors.New("the launcher does not know this job's secret (GORUN_JOB_SECRET differs, or another job listens there)")

// handshake is a node's side of the handshake.
func (cfg NodeConfig) handshake(c net.Conn) (io.ReadWriteCloser, error) {
	_ = c.SetDeadline(time.Now().Add(cfg.HandshakeTimeout))
	nonceN, err := nonce()
	if err != nil {
		return nil, err
	}
	line := fmt.Sprintf("gorun-node %s %d %d %d %s %s %s", rendezvousVersion, cfg.Node, cfg.Nodes, cfg.Slots, cfg.Hostname, cfg.Program, nonceN)
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return nil, err
	}
	br := bufio.NewReaderSize(c, 1024)
	answer, err := readLine(br)
	if err != nil {
		return nil, fmt.Errorf("no answer from the launcher: %w", err)
	}
	if why, ok := strings.CutPrefix(answer, "refused: "); ok {
		return nil, fmt.Errorf("%w: %s", ErrRefused, why)
	}
	f := strings.Fields(answer)
	if len(f) != 4 || f[0] != "gorun-launcher" || f[1] != rendezvousVersion {
		return nil, fmt.Errorf("not a gorun launcher (%.40q)", answer)
	}
	if !hmac.Equal([]byte(f[3]), []byte(mac(cfg.Secret, "launcher", line, f[2]))) {
		return nil, errWrongSecret
	}
	if _, err := io.WriteString(c, mac(cfg.Secret, "node", line, f[2])+"\n"); err != nil {
		return nil, err
	}
	verdict, err := readLine(br)
	if err != nil {
		return nil, fmt.Errorf("no verdict from the launcher: %w", err)
	}
	if why, ok := strings.CutPrefix(verdict, "refused: "); ok {
		return nil, fmt.Errorf("%w: %s", ErrRefused, why)
	}
	if verdict != "ok" {
		return nil, fmt.Errorf("not a gorun launcher (%.40q)", verdict)
	}
	_ = c.SetDeadline(time.Time{})
	return bufferedConn{br, c}, nil
}

// mac is the hex HMAC-SHA256 of who, the node's line and the launcher's
// nonce under the job's secret.
// mac is one side's proof of the secret: an HMAC, under the secret's
// rendezvous key, of the side, the node's line and the launcher's nonce.
func mac(secret []byte, who, line, nonceL string) string {
	h := hmac.New(sha256.New, jobsecret.Key(secret, jobsecret.Rendezvous))
	fmt.Fprintf(h, "%s\x00%s\x00%s", who, line, nonceL)
	return hex.EncodeToString(h.Sum(nil))
}

func nonce() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// readLine reads one line of at most 512 bytes.
func readLine(br *bufio.Reader) (string, error) {
	var b []byte
	for {
		chunk, err := br.ReadSlice('\n')
		b = append(b, chunk...)
		if len(b) > 512 {
			return "", errors.New("line too long")
		}
		if err == nil {
			return strings.TrimSuffix(string(b), "\n"), nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return "", err
		}
	}
}

// bufferedConn reads through the handshake's buffer.
type bufferedConn struct {
	r *bufio.Reader
	net.Conn
}

func (b bufferedConn) Read(p []byte) (int, error) { return b.r.Read(p) }

// CloseWrite half-closes the connection: the agent reads the end of the
// launcher's stream and finishes, as it does when SSH's stdin closes.
func (b bufferedConn) CloseWrite() error {
	if cw, ok := b.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return b.Conn.Close()
}

// AgentCommand implements Spawner; a Rendezvous has no commands, only
// streams (Attach), and the launcher asks it for those.
func (r *Rendezvous) AgentCommand(host string) *exec.Cmd { return nil }

// Attach implements Attacher: the stream of the node that dialed from
// host (or, in an srun step, of the node named host). Each is handed out
// once.
func (r *Rendezvous) Attach(host string) (io.ReadWriteCloser, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n, ok := r.nodes[host]
	if !ok || n.stream == nil {
		return nil, fmt.Errorf("%s: no node dialed in from there", host)
	}
	s := n.stream
	n.stream = nil
	return s, nil
}

// Close closes the streams no launcher took.
func (r *Rendezvous) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.nodes {
		if n.stream != nil {
			n.stream.Close()
			n.stream = nil
		}
	}
	return nil
}

// Hosts are the nodes as hosts of a hostfile, node 0 (this machine, with
// slots0) first.
func Hosts(slots0 int, nodes []Node) []Host {
	hosts := []Host{{Name: "localhost", Slots: slots0}}
	byIndex := slices.Clone(nodes)
	slices.SortFunc(byIndex, func(a, b Node) int { return a.Index - b.Index })
	for _, n := range byIndex {
		hosts = append(hosts, Host{Name: n.Addr, Slots: n.Slots})
	}
	return hosts
}
