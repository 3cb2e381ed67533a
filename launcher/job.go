package launcher

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gorun/gorun/internal/jobenv"
	"github.com/gorun/gorun/pmi"
)

// Config describes one job. Build it with DefaultConfig and change what
// you need.
type Config struct {
	NP            int    // number of ranks; 0 means one per slot
	Hosts         []Host // nil: every rank on this machine
	MapBy         MapBy
	Oversubscribe bool
	Program       string
	Args          []string
	Env           []string // extra "KEY=VALUE" for every rank (-x)
	Wdir          string   // working directory of the ranks ("" = the launcher's)
	// StatusLine: keep a live status line on Stderr (gorun sets it when
	// stderr is a terminal and --quiet is not given).
	StatusLine bool
	// Timeline, if set, is where gorun writes one Chrome trace (JSON) of
	// every rank's collectives and spans, on one clock, when the job ends.
	Timeline  string
	WdirSet   bool   // Wdir came from the user: failing to enter it is an error
	TagOutput bool   // prefix every line with "[rank] "
	OutputDir string // if set, also write DIR/rank.N/{stdout,stderr}
	Timeout   time.Duration
	// StallWarn: when ranks using gorun's collectives make no progress
	// for this long while one of them waits in a collective, print where
	// every rank is (again at growing intervals); 0 is off. StallAbort:
	// end such a job after this long stalled (exit 124); 0 is off.
	StallWarn, StallAbort time.Duration
	// DumpWait is how long Go ranks get to write their goroutine dumps
	// (SIGQUIT) before a timeout, a stall abort or a second Ctrl-C stops
	// them.
	DumpWait    time.Duration
	Grace       time.Duration // from SIGTERM to SIGKILL
	Preflight   time.Duration // how long every host's agent gets to report ready
	SSH         []string      // remote agent command, default ["ssh"]
	Gorun       string        // this gorun binary, started locally as the agent
	RemoteGorun string        // gorun's path on remote hosts ("" = Gorun)
	Strategy    string        // GORUN_STRATEGY for the ranks ("" = leave unset)
	// Hubs starts this many dedicated ParamHub processes (gorun __hub) on
	// the job's hosts, round-robin in host order, and gives every rank
	// their addresses in GORUN_HUBS. They stop when the ranks are done.
	Hubs       int
	HubElastic bool // hubs finish BSP rounds without a lost rank
	// PMI is PMIOn ("pmi1", also ""): every rank gets a PMI-1 socket
	// (PMI_FD), so MPICH programs find their peers; or PMIOff ("none").
	PMI string

	Stdin          io.Reader // forwarded to rank 0; nil = none
	Stdout, Stderr io.Writer
	Signals        <-chan os.Signal // signals to forward to the ranks
	Logger         *slog.Logger

	// Local and Remote start agents; nil picks LocalSpawner / SSHSpawner.
	Local, Remote Spawner
}

// DefaultConfig returns a Config with mpirun-like defaults.
func DefaultConfig() Config {
	return Config{
		TagOutput: true,
		StallWarn: 30 * time.Second,
		DumpWait:  2 * time.Second,
		Grace:     5 * time.Second,
		Preflight: 30 * time.Second,
		SSH:       []string{"ssh"},
		Stdout:    os.Stdout,
		Stderr:    os.Stderr,
	}
}

func (c *Config) validate() error {
	if c.Program == "" {
		return errors.New("no program given: usage gorun [flags] PROGRAM [ARGS...]")
	}
	if c.NP < 0 {
		return fmt.Errorf("-np must be positive, got %d", c.NP)
	}
	if c.Hubs < 0 || c.Hubs > 1024 {
		return fmt.Errorf("--hubs %d: want 0 to 1024", c.Hubs)
	}
	if c.Grace < 0 || c.Timeout < 0 || c.StallWarn < 0 || c.StallAbort < 0 || c.DumpWait < 0 {
		return errors.New("durations must not be negative")
	}
	if c.PMI != "" && c.PMI != PMIOn && c.PMI != PMIOff {
		return fmt.Errorf("--pmi %q: want %s or %s", c.PMI, PMIOn, PMIOff)
	}
	if len(c.SSH) == 0 || c.SSH[0] == "" {
		return errors.New("--ssh: empty command")
	}
	if c.Gorun == "" {
		return errors.New("launcher: Config.Gorun (path of the gorun binary) is not set")
	}
	if c.Stdout == nil || c.Stderr == nil {
		return errors.New("launcher: Stdout and Stderr must be set")
	}
	return nil
}

// Exit codes of the launcher itself.
const (
	ExitLaunchFailed = 1   // bad input, or a host failed its pre-flight
	ExitTimeout      = 124 // --timeout ran out (like timeout(1))
	ExitAgentLost    = 255 // a host's agent or SSH session died
)

// Result is how a job ended.
type Result struct {
	JobID      string // the job's id (GORUN_JOB_ID), "" if it never started
	ExitCode   int
	LaunchTime time.Duration // from Run to the last rank started
	Failure    string        // one summary of what ended the job, "" on success
}

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
	places, err := Place(hosts, np, cfg.MapBy, cfg.Oversubscribe)
	if err != nil {
		return Result{ExitCode: ExitLaunchFailed}, err
	}
	j := &job{cfg: cfg, hosts: hosts, places: places, t0: t0}
	return j.run(ctx)
}

type agentProc struct {
	host   int // index into hosts
	name   string
	cmd    *exec.Cmd
	conn   *conn
	stdin  io.WriteCloser
	out    *bufio.Reader
	stderr *tail
	ranks  []rankSpec
	ready  *readyInfo
	done   bool
}

type rankState struct {
	host    string
	pid     int
	started bool
	exited  bool
	stderr  *tail
}

type job struct {
	jobID  string
	np     int // ranks; hubs follow them in ranks
	cfg    Config
	hosts  []Host
	places []Placement
	t0     time.Time
	agents []*agentProc
	ranks  []rankState
	out    *output
}

type event struct {
	agent *agentProc
	m     *msg
	err   error
}

func newJobID() (id, secret string, err error) {
	b := make([]byte, 40)
	if _, err := rand.Read(b); err != nil {
		return "", "", err
	}
	return hex.EncodeToString(b[:8]), hex.EncodeToString(b[8:]), nil
}

func (j *job) run(ctx context.Context) (Result, error) {
	cfg := j.cfg
	jobID, secret, err := newJobID()
	if err != nil {
		return Result{ExitCode: ExitLaunchFailed}, err
	}
	np := len(j.places)
	j.jobID = jobID
	j.out, err = newOutput(cfg, np, cfg.Hubs)
	if err != nil {
		return Result{ExitCode: ExitLaunchFailed}, err
	}
	defer j.out.Close()
	j.np = np
	j.ranks = make([]rankState, np+cfg.Hubs)
	byHost := map[int][]rankSpec{}
	var order []int
	for _, p := range j.places {
		if _, ok := byHost[p.Host]; !ok {
			order = append(order, p.Host)
		}
		byHost[p.Host] = append(byHost[p.Host], rankSpec{Rank: p.Rank, LocalRank: p.LocalRank, LocalSize: p.LocalSize, NodeRank: p.NodeRank})
		j.ranks[p.Rank] = rankState{host: j.hosts[p.Host].Name, stderr: newTail(10)}
	}
	for h := range cfg.Hubs {
		host := order[h%len(order)]
		nodeRank := byHost[host][0].NodeRank
		byHost[host] = append(byHost[host], rankSpec{Rank: np + h, NodeRank: nodeRank, Hub: h + 1})
		j.ranks[np+h] = rankState{host: j.hosts[host].Name, stderr: newTail(10)}
	}
	wdir := cfg.Wdir
	if wdir == "" {
		wdir, _ = os.Getwd()
	} else if abs, err := filepath.Abs(wdir); err == nil {
		wdir = abs
	}
	env := jobEnv(cfg, jobID, secret, np)
	var pmiInfo *pmiSpec
	if cfg.PMI != PMIOff {
		nodes := make([]int, np)
		for _, p := range j.places {
			nodes[p.Rank] = p.NodeRank
		}
		pmiInfo = &pmiSpec{KVS: "kvs_gorun_" + jobID, Size: np, Mapping: pmi.ProcessMapping(nodes)}
	}
	// Local ranks in a job with remote hosts must advertise an address the
	// remote ranks can reach, not loopback.
	remote := ""
	for _, h := range order {
		if !isLocal(j.hosts[h].Name) {
			remote = j.hosts[h].Name
		}
	}
	for _, h := range order {
		name := j.hosts[h].Name
		spec := &hostSpec{
			Version: protoVersion, JobID: jobID, Host: name, Program: cfg.Program, Args: cfg.Args,
			Wdir: wdir, WdirSet: cfg.WdirSet, Env: env, Ranks: byHost[h], Grace: cfg.Grace, PMI: pmiInfo, Timeline: cfg.Timeline != "",
		}
		if isLocal(name) && remote != "" {
			spec.Advertise = routeTo(remote)
		}
		a := &agentProc{host: h, name: name, ranks: byHost[h], stderr: newTail(20)}
		j.agents = append(j.agents, a)
		if err := j.startAgent(a, spec); err != nil {
			j.abortAgents()
			return Result{ExitCode: ExitLaunchFailed}, err
		}
	}
	if code, err := j.preflight(ctx); err != nil {
		j.abortAgents()
		return Result{ExitCode: code}, err
	}
	res := j.supervise(ctx)
	res.JobID = jobID
	return res, nil
}

// jobEnv is what every process of the job is told, before the ports are
// known; the user's -x variables come last and win.
func jobEnv(cfg Config, jobID, secret string, np int) []string {
	return append(jobenv.Job{ID: jobID, Secret: secret, Size: np, Strategy: cfg.Strategy, HubElastic: cfg.HubElastic}.Env(), cfg.Env...)
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

func (j *job) startAgent(a *agentProc, spec *hostSpec) error {
	cmd := j.spawner(a.name).AgentCommand(a.name)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = a.stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: starting agent: %w", a.name, err)
	}
	a.cmd, a.stdin = cmd, stdin
	// The banner and the gob stream are read from the same buffer.
	a.out = bufio.NewReader(stdout)
	a.conn = newConn(a.out, stdin)
	// The spec goes out at once; the greeting is read in preflight.
	go func() { _ = a.conn.Send(&msg{Kind: msgSpec, Spec: spec}) }()
	return nil
}

// asSignal is the signal gorun received, as one it can forward (SIGTERM
// for anything that is not a syscall.Signal).
func asSignal(sig os.Signal) syscall.Signal {
	if s, ok := sig.(syscall.Signal); ok && s != 0 {
		return s
	}
	return syscall.SIGTERM
}

type preflightResult struct {
	a   *agentProc
	err error
}

// preflight waits until every agent has checked its host and reserved ports,
// and reports every host that failed, each on its own line, with the exit
// code for the job. A signal (Ctrl-C) or the end of ctx ends the wait at
// once: nothing has started yet, so the agents are simply killed.
func (j *job) preflight(ctx context.Context) (int, error) {
	ch := make(chan preflightResult, len(j.agents))
	for _, a := range j.agents {
		go func() {
			ch <- preflightResult{a, j.awaitReady(a)}
		}()
	}
	timer := time.NewTimer(j.cfg.Preflight)
	defer timer.Stop()
	var errs []error
	pending := map[*agentProc]bool{}
	for _, a := range j.agents {
		pending[a] = true
	}
	for len(pending) > 0 {
		select {
		case r := <-ch:
			delete(pending, r.a)
			if r.err != nil {
				errs = append(errs, r.err)
			}
		case <-timer.C:
			for a := range pending {
				errs = append(errs, fmt.Errorf("%s: no answer from the agent within %v%s", a.name, j.cfg.Preflight, a.stderr.suffix()))
				_ = a.cmd.Process.Kill()
			}
			pending = nil
		case sig := <-j.cfg.Signals:
			s := asSignal(sig)
			j.stopPending(pending, ch)
			return 128 + int(s), fmt.Errorf("gorun received %v during pre-flight (%d host(s) still checking); no rank was started", s, len(pending))
		case <-ctx.Done():
			j.stopPending(pending, ch)
			return ExitTimeout, fmt.Errorf("cancelled during pre-flight (%d host(s) still checking): %w", len(pending), context.Cause(ctx))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return ExitLaunchFailed, err
	}
	return 0, nil
}

// stopPending kills the agents still in pre-flight and waits (at most 5 s)
// for their readers, which reap them, so that nothing else waits on them.
func (j *job) stopPending(pending map[*agentProc]bool, done <-chan preflightResult) {
	for a := range pending {
		_ = a.cmd.Process.Kill()
	}
	limit := time.After(5 * time.Second)
	for range pending {
		select {
		case <-done:
		case <-limit:
			return
		}
	}
}

func (j *job) awaitReady(a *agentProc) error {
	noise, err := skipBanner(a.out)
	if err != nil {
		werr := a.cmd.Wait()
		return fmt.Errorf("%s: %s", a.name, a.describeFailure(werr, noise))
	}
	m, err := a.conn.Recv()
	if err != nil {
		werr := a.cmd.Wait()
		return fmt.Errorf("%s: %s", a.name, a.describeFailure(werr, nil))
	}
	switch {
	case m.Kind == msgError:
		return fmt.Errorf("%s: %s", a.name, m.Err)
	case m.Kind != msgReady || m.Ready == nil || len(m.Ready.Ports) != len(a.ranks):
		return fmt.Errorf("%s: agent sent message %d instead of ready", a.name, m.Kind)
	}
	a.ready = m.Ready
	return nil
}

// describeFailure explains why an agent never greeted: ssh's own message,
// or the agent's exit status.
func (a *agentProc) describeFailure(waitErr error, noise []string) string {
	lines := a.stderr.lines()
	if len(lines) == 0 {
		lines = noise
	}
	msg := strings.TrimSpace(strings.Join(lines, "; "))
	if msg == "" {
		msg = "agent exited before greeting"
		if waitErr != nil {
			msg += " (" + waitErr.Error() + ")"
		}
	}
	return msg
}

func (j *job) abortAgents() {
	for _, a := range j.agents {
		if a.cmd != nil && a.cmd.Process != nil {
			_ = a.stdin.Close()
			_ = a.cmd.Process.Kill()
			_ = a.cmd.Wait()
		}
	}
}

// supervise starts the ranks and runs the job to its end.
func (j *job) supervise(ctx context.Context) Result {
	cfg := j.cfg
	peerOf := make([]string, len(j.ranks))
	masterAddr, masterPort := "", 0
	for _, a := range j.agents {
		for i, rs := range a.ranks {
			peerOf[rs.Rank] = net.JoinHostPort(a.ready.Addr, strconv.Itoa(a.ready.Ports[i]))
			if rs.Rank == 0 {
				masterAddr, masterPort = a.ready.Addr, a.ready.MasterPort
			}
		}
	}
	startEnv := jobenv.Peers(peerOf[:j.np], peerOf[j.np:], masterAddr, masterPort)
	relay, err := newPMIRelay(j.agents, cfg.PMI != PMIOff)
	if err != nil {
		// Not reachable: every job has a host with ranks.
		return Result{ExitCode: ExitLaunchFailed, Failure: err.Error()}
	}
	events := make(chan event, 64)
	var readers sync.WaitGroup
	clocks := map[*agentProc]*clockProbe{}
	timelines := map[int][]byte{}
	for _, a := range j.agents {
		if err := a.conn.Send(&msg{Kind: msgStart, Env: startEnv}); err != nil {
			events <- event{agent: a, err: err}
		}
		if cfg.Timeline != "" {
			clocks[a] = &clockProbe{sent: time.Now()}
			_ = a.conn.Send(&msg{Kind: msgClock})
		}
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				m, err := a.conn.Recv()
				if err != nil {
					events <- event{agent: a, err: err}
					return
				}
				events <- event{agent: a, m: m}
			}
		}()
	}
	if cfg.Stdin != nil {
		go j.forwardStdin()
	}
	var timeout <-chan time.Time
	if cfg.Timeout > 0 {
		t := time.NewTimer(cfg.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	res := Result{}
	pol := newPolicy(j.np, cfg.Hubs, cfg.HubElastic)
	var hardStop <-chan time.Time
	apply := func(d decision) {
		if d.Note != "" {
			fmt.Fprintf(cfg.Stderr, "gorun: %s\n", d.Note)
		}
		if d.Signal != 0 {
			for _, a := range j.agents {
				if !a.done {
					_ = a.conn.Send(&msg{Kind: msgTerminate, Signal: int(d.Signal)})
				}
			}
		}
		if d.HardStop && hardStop == nil {
			hardStop = time.After(cfg.Grace + 10*time.Second)
		}
	}
	started := 0
	remaining := len(j.agents)
	ins := newInspector(j, cfg)
	defer ins.stop()
	// dump asks the agents for the Go ranks' goroutine dumps; when
	// dumpTimer fires, the ranks get dumpSig.
	var dumpTimer <-chan time.Time
	var dumpSig syscall.Signal
	dump := func(code int, text string, sig syscall.Signal) bool {
		if ins.dumped || !ins.dumpable() {
			return false
		}
		ins.dumped = true
		if code != 0 {
			apply(pol.beginDump(code, text))
		} else {
			pol.dumping = true
		}
		for _, a := range j.agents {
			if !a.done {
				_ = a.conn.Send(&msg{Kind: msgDump})
			}
		}
		dumpTimer, dumpSig = time.After(cfg.DumpWait), sig
		return true
	}
	var status *statusLine
	var statusTick <-chan time.Time
	if cfg.StatusLine {
		status = &statusLine{w: cfg.Stderr, start: time.Now()}
		t := time.NewTicker(time.Second)
		defer t.Stop()
		statusTick = t.C
		defer status.clear()
	}
	for remaining > 0 {
		select {
		case now := <-statusTick:
			if now.Sub(status.start) >= statusAfter {
				status.draw(statusText(j.ranks, ins.views, status, now))
			}
			continue
		case now := <-ins.tick:
			status.clear()
			if text, abort := ins.check(now); abort {
				if !dump(ExitTimeout, text, syscall.SIGTERM) {
					apply(pol.timedOut(text))
				}
			}
		case <-dumpTimer:
			dumpTimer = nil
			apply(pol.endDump(dumpSig))
		case ev := <-events:
			if ev.m == nil || ev.m.Kind != msgStatus && ev.m.Kind != msgClock && ev.m.Kind != msgStarted && ev.m.Kind != msgTimeline {
				status.clear()
			}
			a := ev.agent
			if ev.err != nil {
				if !a.done {
					a.done = true
					remaining--
					werr := a.cmd.Wait()
					apply(pol.agentLost(j.allExited(a), fmt.Sprintf("lost the agent on %s: %s", a.name, a.describeFailure(werr, nil))))
				}
				continue
			}
			switch ev.m.Kind {
			case msgStarted:
				rs := &j.ranks[ev.m.Rank]
				rs.pid, rs.started = ev.m.Pid, true
				started++
				if started == len(j.ranks) {
					res.LaunchTime = time.Since(j.t0)
					cfg.Logger.Info("all ranks started", "ranks", started, "elapsed", res.LaunchTime)
				}
			case msgClock:
				if cp := clocks[a]; cp != nil && cp.reply(ev.m.Clock, time.Now()) {
					cp.sent = time.Now()
					_ = a.conn.Send(&msg{Kind: msgClock})
				}
			case msgTimeline:
				timelines[ev.m.Rank] = ev.m.Data
			case msgStatus:
				if ev.m.Status != nil {
					ins.update(ev.m.Rank, ev.m.Status, time.Now())
				}
			case msgOutput:
				if ev.m.Stream == streamDump {
					ins.dumpLine(ev.m.Rank, ev.m.Data)
					continue
				}
				if ev.m.Stream == 2 {
					j.ranks[ev.m.Rank].stderr.add(string(ev.m.Data))
				}
				j.out.line(ev.m.Rank, ev.m.Stream, ev.m.Data)
			case msgExit:
				j.ranks[ev.m.Rank].exited = true
				ins.exited(ev.m.Rank)
				ex := ev.m.Exit
				code := ex.Code
				if ex.Signal != 0 {
					code = 128 + ex.Signal
				}
				if ex.Failure != "" && (code == 0 || ex.Signal == int(syscall.SIGKILL)) {
					code = 1
				}
				apply(pol.rankExited(ev.m.Rank, code, j.describeExit(ev.m.Rank, ex)))
			case msgDone:
				a.done = true
				remaining--
				_ = a.stdin.Close()
			case msgError:
				apply(pol.agentError(fmt.Sprintf("%s: agent: %s", a.name, ev.m.Err)))
			case msgPMIFence:
				if err := relay.enter(a, ev.m); err != nil {
					apply(pol.jobFailed(ExitLaunchFailed, err.Error()))
				}
			case msgPMIAbort:
				text := fmt.Sprintf("%s on %s called MPI_Abort with exit code %d", j.name(ev.m.Rank), a.name, ev.m.Code)
				if ev.m.Err != "" {
					text += ": " + ev.m.Err
				}
				apply(pol.jobFailed(ev.m.Code, text))
			}
		case sig := <-cfg.Signals:
			status.clear()
			// A second signal kills; the Go ranks first write their dumps.
			if pol.stopping == 0 || !dump(0, "", syscall.SIGKILL) {
				apply(pol.signal(asSignal(sig)))
			}
		case <-timeout:
			status.clear()
			timeout = nil
			text := fmt.Sprintf("job timed out after %v; terminated every rank", cfg.Timeout)
			if !dump(ExitTimeout, text, syscall.SIGTERM) {
				apply(pol.timedOut(text))
			}
		case <-ctx.Done():
			apply(pol.timedOut("cancelled: " + ctx.Err().Error()))
			ctx = context.Background()
		case <-hardStop:
			// Agents that do not finish after the grace period plus a
			// margin are killed; their ranks die with them.
			for _, a := range j.agents {
				if !a.done {
					_ = a.cmd.Process.Kill()
				}
			}
			hardStop = nil
		}
	}
	status.clear()
	for _, a := range j.agents {
		_ = a.stdin.Close()
		_ = a.cmd.Wait()
	}
	go func() { readers.Wait(); close(events) }()
	for range events {
	}
	var note string
	res.ExitCode, res.Failure, note = pol.result()
	if note != "" {
		fmt.Fprintf(cfg.Stderr, "gorun: %s\n", note)
	}
	if res.Failure != "" {
		fmt.Fprintf(cfg.Stderr, "gorun: %s\n", res.Failure)
	}
	if d := ins.writeDumps(j.jobID); d != "" {
		fmt.Fprintf(cfg.Stderr, "gorun: %s\n", d)
	}
	if cfg.Timeline != "" {
		if note, err := j.writeTimeline(cfg.Timeline, timelines, clocks); err != nil {
			fmt.Fprintf(cfg.Stderr, "gorun: --timeline: %v\n", err)
		} else {
			fmt.Fprintf(cfg.Stderr, "gorun: %s\n", note)
		}
	}
	return res
}

// name is how messages call a rank or a hub.
func (j *job) name(rank int) string {
	if rank >= j.np {
		return fmt.Sprintf("hub %d", rank-j.np)
	}
	return fmt.Sprintf("rank %d", rank)
}

func (j *job) allExited(a *agentProc) bool {
	for _, rs := range a.ranks {
		if !j.ranks[rs.Rank].exited {
			return false
		}
	}
	return true
}

func (j *job) describeExit(rank int, ex *exitInfo) string {
	rs := j.ranks[rank]
	var b strings.Builder
	how := fmt.Sprintf("exited with code %d", ex.Code)
	if ex.Signal != 0 {
		how = fmt.Sprintf("was killed by signal %d (%v)", ex.Signal, syscall.Signal(ex.Signal))
	}
	switch {
	case ex.OOM:
		how += " (by the kernel's OOM killer: the memory cgroup counted an oom_kill)"
	case ex.ForeignKill:
		how += " (not by gorun; out of memory?)"
	}
	switch {
	case ex.Failure != "" && ex.Signal == int(syscall.SIGKILL):
		how = "was failed by gorun (killed): " + ex.Failure
	case ex.Failure != "":
		how += " " + ex.Failure
	}
	fmt.Fprintf(&b, "%s on %s (pid %d) %s", j.name(rank), rs.host, ex.Pid, how)
	if lines := rs.stderr.lines(); len(lines) > 0 {
		fmt.Fprintf(&b, "; its last stderr lines:")
		for _, l := range lines {
			fmt.Fprintf(&b, "\n    %s", l)
		}
	}
	return b.String()
}

func (j *job) forwardStdin() {
	var target *agentProc
	for _, a := range j.agents {
		for _, rs := range a.ranks {
			if rs.Rank == 0 {
				target = a
			}
		}
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := j.cfg.Stdin.Read(buf)
		if n > 0 {
			if target.conn.Send(&msg{Kind: msgStdin, Data: append([]byte(nil), buf[:n]...)}) != nil {
				return
			}
		}
		if err != nil {
			_ = target.conn.Send(&msg{Kind: msgStdinEOF})
			return
		}
	}
}
