package launcher

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gorun/gorun/internal/jobenv"
	"github.com/gorun/gorun/internal/jobsecret"
	"github.com/gorun/gorun/launcher/proto"
	"github.com/gorun/gorun/pmi"
)

// Run starts the job and waits for it. The error is for problems before
// any rank started; how ranks ended is in Result.
func Run(ctx context.Context, cfg Config) (Result, error) {
	t0 := time.Now()
	if err := cfg.validate(); err != nil {
		return Result{ExitCode: ExitLaunchFailed}, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	hosts := cfg.Hosts
	if len(hosts) == 0 {
		n := cfg.NP
		if n == 0 {
			n = 1
		}
		hosts = []Host{{Name: "localhost", Slots: n}}
	}
	np := cfg.NP
	if np == 0 {
		for _, h := range hosts {
			np += h.Slots
		}
	}
	if cfg.MinNP > np {
		return Result{ExitCode: ExitLaunchFailed}, fmt.Errorf("--min-np %d is more than the job's %d ranks", cfg.MinNP, np)
	}
	places, err := Place(hosts, np, cfg.MapBy, cfg.Oversubscribe)
	if err != nil {
		return Result{ExitCode: ExitLaunchFailed}, err
	}
	j := &job{cfg: cfg, hosts: hosts, places: places, t0: t0, stdin: newStdinFlow()}
	return j.run(ctx)
}

// agentProc is one host's agent, as the launcher started it.
type agentProc struct {
	index  int // in job.agents
	host   int // index into hosts
	name   string
	cmd    *exec.Cmd
	stream io.Closer // instead of cmd: the stream of an agent that dialed in (Attacher)
	conn   *proto.Conn
	stdin  io.WriteCloser
	out    *bufio.Reader
	stderr *tail
	ranks  []proto.RankSpec
	ready  *proto.Ready
	outbox *outbox // what the supervise loop sends it
}

// rankState is what the launcher shows of a rank (or a hub).
type rankState struct {
	host    string
	agent   int // index of its agent
	pid     int
	started bool
	exited  bool
	stderr  *tail
}

type job struct {
	stdin  *stdinFlow // rank 0's stdin bytes its agent has not acknowledged
	jobID  string
	np     int // ranks; hubs follow them in ranks
	cfg    Config
	hosts  []Host
	places []Placement
	t0     time.Time
	agents []*agentProc
	ranks  []rankState
	out    *output

	// Every agent has a reader goroutine for its whole life (see read),
	// which delivers on events until quit is closed, and a writer (see
	// write) for its outbox.
	events  chan agentEvent
	quit    chan struct{}
	streams sync.WaitGroup
	shut    bool
	// backlog: events of agents that were done with pre-flight while
	// others were not, for supervise.
	backlog []agentEvent
}

// agentEvent is one message from an agent, or (m nil) the end of its
// stream, with why it ended.
type agentEvent struct {
	agent int
	m     *proto.Message
	why   string
}

func newJobID() (id string, secret []byte, err error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", nil, err
	}
	secret, err = jobsecret.New()
	return hex.EncodeToString(b), secret, err
}

func (j *job) run(ctx context.Context) (Result, error) {
	jobID, secret, err := newJobID()
	if err != nil {
		return Result{ExitCode: ExitLaunchFailed}, err
	}
	j.jobID, j.np = jobID, len(j.places)
	j.out, err = newOutput(j.cfg, j.np, j.cfg.Hubs)
	if err != nil {
		return Result{ExitCode: ExitLaunchFailed}, err
	}
	defer j.out.Close()
	specs := j.plan(secret)
	j.events, j.quit = make(chan agentEvent, 64), make(chan struct{})
	for i, a := range j.agents {
		if err := j.startAgent(a, specs[i]); err != nil {
			j.shutdown(true)
			return Result{ExitCode: ExitLaunchFailed}, err
		}
	}
	if code, err := j.preflight(ctx); err != nil {
		j.shutdown(true)
		return Result{ExitCode: code}, err
	}
	res := j.supervise(ctx)
	res.JobID = jobID
	return res, nil
}

// plan lays the ranks and hubs out on the hosts, and makes every host's
// agent (not started yet) and its spec.
func (j *job) plan(secret []byte) []*proto.HostSpec {
	cfg := j.cfg
	j.ranks = make([]rankState, j.np+cfg.Hubs)
	byHost := map[int][]proto.RankSpec{}
	var order []int
	for _, p := range j.places {
		if _, ok := byHost[p.Host]; !ok {
			order = append(order, p.Host)
		}
		byHost[p.Host] = append(byHost[p.Host], proto.RankSpec{Rank: p.Rank, LocalRank: p.LocalRank, LocalSize: p.LocalSize, NodeRank: p.NodeRank})
	}
	for h := range cfg.Hubs {
		host := order[h%len(order)]
		nodeRank := byHost[host][0].NodeRank
		byHost[host] = append(byHost[host], proto.RankSpec{Rank: j.np + h, NodeRank: nodeRank, Hub: h + 1})
	}
	base := j.baseSpec(secret)
	// Local ranks in a job with remote hosts must advertise an address the
	// remote ranks can reach, not loopback.
	remote := ""
	for _, h := range order {
		if !isLocal(j.hosts[h].Name) {
			remote = j.hosts[h].Name
		}
	}
	var specs []*proto.HostSpec
	for i, h := range order {
		name := j.hosts[h].Name
		spec := *base
		spec.Host, spec.Ranks = name, byHost[h]
		if isLocal(name) && remote != "" {
			spec.Advertise = routeTo(remote)
		}
		j.agents = append(j.agents, &agentProc{index: i, host: h, name: name, ranks: byHost[h], stderr: newTail(20)})
		for _, rs := range byHost[h] {
			j.ranks[rs.Rank] = rankState{host: name, agent: i, stderr: newTail(10)}
		}
		specs = append(specs, &spec)
	}
	return specs
}

// baseSpec is what every host's spec has in common.
func (j *job) baseSpec(secret []byte) *proto.HostSpec {
	cfg := j.cfg
	wdir := cfg.Wdir
	if wdir == "" {
		wdir, _ = os.Getwd()
	} else if abs, err := filepath.Abs(wdir); err == nil {
		wdir = abs
	}
	var pmiSpec *proto.PMISpec
	if cfg.PMI != PMIOff {
		nodes := make([]int, j.np)
		var names []string
		for _, p := range j.places {
			nodes[p.Rank] = p.NodeRank
			for len(names) <= p.NodeRank {
				names = append(names, "")
			}
			names[p.NodeRank] = j.hosts[p.Host].Name
		}
		pmiSpec = &proto.PMISpec{KVS: "kvs_gorun_" + j.jobID, Size: j.np, Mapping: pmi.ProcessMapping(nodes), Nodes: nodes, NodeNames: names}
	}
	return &proto.HostSpec{
		Version: proto.Version, JobID: j.jobID, Program: cfg.Program, Args: cfg.Args,
		Wdir: wdir, WdirSet: cfg.WdirSet, Env: jobEnv(cfg, j.jobID, secret, j.np), Grace: cfg.Grace, PMI: pmiSpec, Timeline: cfg.Timeline != "", Timing: cfg.Metrics != nil,
		Elastic: cfg.elasticity() == ringElastic, MaxRestarts: cfg.MaxRestarts,
	}
}

// jobEnv is what every process of the job is told, before the ports are
// known; the user's -x variables come last and win.
func jobEnv(cfg Config, jobID string, secret []byte, np int) []string {
	e := cfg.elasticity()
	job := jobenv.Job{ID: jobID, Secret: secret, Size: np, Strategy: cfg.Strategy, HubElastic: cfg.HubElastic || e == hubElastic, Elastic: e == ringElastic}
	return append(job.Env(), cfg.Env...)
}

// routeTo returns the local address the kernel would use to reach host, so
// that local ranks in a job with remote hosts advertise a reachable address.
func routeTo(host string) string {
	c, err := net.Dial("udp", net.JoinHostPort(host, "9"))
	if err != nil {
		return ""
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String()
}

func (j *job) spawner(host string) Spawner {
	if isLocal(host) {
		if j.cfg.Local != nil {
			return j.cfg.Local
		}
		return LocalSpawner{Gorun: j.cfg.Gorun}
	}
	if j.cfg.Remote != nil {
		return j.cfg.Remote
	}
	remote := j.cfg.RemoteGorun
	if remote == "" {
		remote = j.cfg.Gorun
	}
	return SSHSpawner{SSH: j.cfg.SSH, Gorun: remote, ConnectTimeout: 10}
}

// agentWaitDelay bounds how long reaping an agent waits for its stderr
// once the process is gone (a child of ssh may hold the pipe).
const agentWaitDelay = 2 * time.Second

// startAgent starts a's process, its reader (which sends spec first) and
// its writer.
func (j *job) startAgent(a *agentProc, spec *proto.HostSpec) error {
	sp := j.spawner(a.name)
	if at, ok := sp.(Attacher); ok {
		stream, err := at.Attach(a.name)
		if err != nil {
			return err
		}
		a.stream, a.stdin = stream, halfCloser{stream}
		j.serve(a, spec, stream, stream)
		return nil
	}
	cmd := sp.AgentCommand(a.name)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = a.stderr
	if cmd.WaitDelay == 0 {
		cmd.WaitDelay = agentWaitDelay
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: starting agent: %w", a.name, err)
	}
	a.cmd, a.stdin = cmd, stdin
	j.serve(a, spec, stdout, stdin)
	return nil
}

// serve starts a's reader and writer on its stream (from the agent, to
// it).
func (j *job) serve(a *agentProc, spec *proto.HostSpec, from io.Reader, to io.Writer) {
	// The banner and the gob stream are read from the same buffer.
	a.out = bufio.NewReader(from)
	a.conn = proto.NewConn(a.out, to)
	a.outbox = newOutbox()
	j.streams.Add(2)
	go j.read(a, spec)
	go j.write(a)
}

// read is a's reader for the agent's whole life: it sends the spec, skips
// the banner, delivers every message, and at the end of the stream reaps
// the process and delivers why the stream ended.
func (j *job) read(a *agentProc, spec *proto.HostSpec) {
	defer j.streams.Done()
	// If the agent is gone already, reading says why.
	_ = a.conn.Send(&proto.Message{Kind: proto.MsgSpec, Spec: spec})
	noise, err := proto.SkipBanner(a.out)
	greeted := err == nil
	if greeted {
		noise = nil // a remote shell's chatter, not an error message
	}
	for err == nil {
		var m *proto.Message
		if m, err = a.conn.Recv(); err == nil {
			j.deliver(agentEvent{agent: a.index, m: m})
		}
	}
	var werr error
	if a.cmd != nil {
		werr = a.cmd.Wait()
	} else {
		_ = a.stream.Close()
	}
	j.deliver(agentEvent{agent: a.index, why: a.describeFailure(werr, noise, greeted)})
}

// deliver passes ev on, or drops it once the job is shutting down.
func (j *job) deliver(ev agentEvent) {
	select {
	case j.events <- ev:
	case <-j.quit:
	}
}

// write sends a's outbox to it until the outbox is closed, then closes
// the stream. A send that fails (the agent is gone) drops the rest.
func (j *job) write(a *agentProc) {
	defer j.streams.Done()
	defer a.stdin.Close()
	for {
		m, ok := a.outbox.next()
		if !ok {
			return
		}
		if a.conn.Send(m) != nil {
			a.outbox.close()
			a.outbox.drop()
		}
	}
}

// shutdown ends the job's agents: it closes their streams (an agent that
// is done then exits), kills them too if kill is set, and waits for their
// readers, which reap them, and their writers. It does its work once.
func (j *job) shutdown(kill bool) {
	if j.shut {
		return
	}
	j.shut = true
	for _, a := range j.agents {
		if a.stream == nil && (a.cmd == nil || a.cmd.Process == nil) {
			continue
		}
		a.outbox.close()
		if kill {
			_ = a.stdin.Close() // a writer stuck on a stalled stream ends too
			a.kill()
		}
	}
	close(j.quit)
	j.streams.Wait()
}

// outbox is an agent's queue of messages: the supervise loop (and the
// stdin copier) put, the agent's writer sends, in order, so the loop never
// blocks on a host whose session has stalled.
type outbox struct {
	mu     sync.Mutex
	cond   *sync.Cond
	q      []*proto.Message
	closed bool // no more puts; the stream closes once q is sent
}

func newOutbox() *outbox {
	o := &outbox{}
	o.cond = sync.NewCond(&o.mu)
	return o
}

// put queues m, unless the outbox is closed.
func (o *outbox) put(m *proto.Message) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.closed {
		o.q = append(o.q, m)
		o.cond.Broadcast()
	}
}

// putWait queues m once fewer than limit messages are queued; it reports
// false if the outbox is closed first. Rank 0's stdin goes this way, so a
// stalled host slows the copy down instead of filling memory.
func (o *outbox) putWait(m *proto.Message, limit int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for len(o.q) >= limit && !o.closed {
		o.cond.Wait()
	}
	if o.closed {
		return false
	}
	o.q = append(o.q, m)
	o.cond.Broadcast()
	return true
}

// close lets the writer close the stream once the queue is sent.
func (o *outbox) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closed = true
	o.cond.Broadcast()
}

// drop forgets whatever is queued.
func (o *outbox) drop() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.q = nil
}

// next waits for the next message; ok is false once the outbox is closed
// and empty.
func (o *outbox) next() (m *proto.Message, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for len(o.q) == 0 && !o.closed {
		o.cond.Wait()
	}
	if len(o.q) == 0 {
		return nil, false
	}
	m = o.q[0]
	o.q = o.q[1:]
	o.cond.Broadcast() // room for putWait
	return m, true
}

// kill kills a's process (an ssh client, or the local agent, whose ranks
// die with it); its stream then ends.
func (a *agentProc) kill() {
	if a.cmd != nil && a.cmd.Process != nil {
		_ = a.cmd.Process.Kill()
	}
	if a.stream != nil {
		_ = a.stream.Close() // the node's agent sees the launcher gone
	}
}

// halfCloser is an attached stream's writing end: closing it half-closes
// the connection, as closing an SSH session's stdin does, so that the
// agent reads the end of the launcher's stream while its own goes on.
type halfCloser struct{ io.ReadWriteCloser }

func (h halfCloser) Close() error {
	if cw, ok := h.ReadWriteCloser.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return h.ReadWriteCloser.Close()
}

// describeFailure explains why an agent's stream ended: ssh's own
// message, or the agent's exit status, and whether the agent had begun.
func (a *agentProc) describeFailure(waitErr error, noise []string, greeted bool) string {
	lines := a.stderr.lines()
	if len(lines) == 0 {
		lines = noise
	}
	msg := strings.TrimSpace(strings.Join(lines, "; "))
	if msg == "" {
		msg = "agent exited before greeting"
		if greeted {
			msg = "agent ended while running the job (killed, or its session dropped)"
		}
		if waitErr != nil {
			msg += " (" + waitErr.Error() + ")"
		}
	}
	return msg
}

// asSignal is the signal gorun received, as one it can forward (SIGTERM
// for anything that is not a syscall.Signal).
func asSignal(sig os.Signal) syscall.Signal {
	if s, ok := sig.(syscall.Signal); ok && s != 0 {
		return s
	}
	return syscall.SIGTERM
}
