package launcher

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gorun/gorun/internal/inspect"
	"github.com/gorun/gorun/internal/jobenv"
	"github.com/gorun/gorun/pmi"
	"github.com/gorun/gorun/transport"
)

// AgentConfig is what the per-host agent needs from its process.
type AgentConfig struct {
	In      io.Reader // messages from the launcher (the agent's stdin)
	Out     io.Writer // messages to the launcher (the agent's stdout)
	Environ []string  // the agent's own environment, the base for every rank
	Logger  *slog.Logger
}

// RunAgent is the body of `gorun __agent`: it starts, watches and signals
// one host's ranks for the launcher. It returns when every rank is gone.
// If the launcher goes away (its stream ends) or ctx is cancelled, the
// ranks are terminated first: no rank outlives its agent.
func RunAgent(ctx context.Context, cfg AgentConfig) error {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if _, err := io.WriteString(cfg.Out, agentMagic+"\n"); err != nil {
		return err
	}
	c := newConn(cfg.In, cfg.Out)
	first, err := c.Recv()
	if err != nil {
		return fmt.Errorf("agent: reading job spec: %w", err)
	}
	if first.Kind != msgSpec || first.Spec == nil {
		return fail(c, fmt.Errorf("agent: expected a job spec, got message %d", first.Kind))
	}
	spec := first.Spec
	if spec.Version != protoVersion {
		return fail(c, fmt.Errorf("agent protocol %d, launcher speaks %d: use the same gorun version on every host", protoVersion, spec.Version))
	}
	a := &agent{conn: c, spec: spec, log: log, environ: cfg.Environ, done: make(chan struct{})}
	ready, err := a.preflight()
	if err != nil {
		return fail(c, err)
	}
	if a.pmi, err = a.pmiNode(); err != nil {
		return fail(c, err)
	}
	if a.pmi != nil {
		defer a.pmi.Close()
	}
	if err := c.Send(&msg{Kind: msgReady, Ready: ready}); err != nil {
		return err
	}
	a.ports = ready.Ports
	a.addr = ready.Addr

	// Everything else the launcher says arrives here; the stream ending
	// means the launcher (or its SSH session) is gone.
	inbox := make(chan *msg, 16)
	go func() {
		defer close(inbox)
		for {
			m, err := c.Recv()
			if err != nil {
				return
			}
			inbox <- m
		}
	}()
	started := false
	var graceTimer <-chan time.Time
	terminate := func(sig syscall.Signal) {
		a.signalAll(sig)
		if graceTimer == nil && sig != syscall.SIGKILL {
			graceTimer = time.After(spec.Grace)
		}
	}
	orphaned := false
	for {
		if started && a.running() == 0 {
			a.wg.Wait()
			a.removeSegments()
			if !orphaned {
				return c.Send(&msg{Kind: msgDone})
			}
			return errors.New("agent: launcher went away; ranks terminated")
		}
		if !started && orphaned {
			return errors.New("agent: launcher went away before the start")
		}
		select {
		case m, ok := <-inbox:
			if !ok {
				inbox = nil
				orphaned = true
				terminate(syscall.SIGTERM)
				continue
			}
			switch m.Kind {
			case msgStart:
				if !started {
					started = true
					a.start(m.Env)
					stop := make(chan struct{})
					defer close(stop)
					go a.watchPages(stop)
				}
			case msgDump:
				a.dumpRanks()
			case msgClock:
				_ = c.Send(&msg{Kind: msgClock, Clock: time.Now().UnixNano()})
			case msgStdin:
				a.writeStdin(m.Data)
			case msgStdinEOF:
				a.closeStdin()
			case msgPMIRelease:
				if a.pmi == nil {
					break
				}
				if err := a.pmi.Release(m.Epoch, m.Puts); err != nil {
					_ = c.Send(&msg{Kind: msgError, Err: err.Error()})
				}
			case msgTerminate:
				sig := syscall.Signal(m.Signal)
				if sig == 0 {
					sig = syscall.SIGTERM
				}
				if !started {
					return nil
				}
				terminate(sig)
			}
		case <-a.exited():
		case <-graceTimer:
			a.signalAll(syscall.SIGKILL)
		case <-ctx.Done():
			ctx = context.Background()
			orphaned = true
			terminate(syscall.SIGTERM)
		}
	}
}

// removeSegments deletes this job's shared memory files on this host once
// its ranks are gone. Ranks remove each segment as soon as its pair has
// mapped it, so only a rank killed in between leaves one behind.
func (a *agent) removeSegments() {
	left, _ := filepath.Glob(transport.ShmSegmentPattern(transport.DefaultShmDir, a.spec.JobID))
	for _, f := range left {
		if err := os.Remove(f); err == nil {
			a.log.Info("removed a shared memory segment the job left", "file", f)
		}
	}
}

func fail(c *conn, err error) error {
	_ = c.Send(&msg{Kind: msgError, Err: err.Error()})
	return err
}

type rankProc struct {
	spec    rankSpec
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	alive   bool
	pmi     *pmiSession // nil: no PMI
	failure string      // set by failRank
	page    string      // its status page ("" none)
	// declared is the pid that declared the page (the rank itself, if it
	// uses gorun's collectives); dumping: its stderr is a goroutine dump.
	declared int
	dumping  atomic.Bool
	killed   bool   // the agent sent it SIGKILL
	ooms     int    // the cgroup's OOM kills when it started
	timeline string // where it writes its timeline ("" none)
}

type agent struct {
	conn    *conn
	spec    *hostSpec
	log     *slog.Logger
	environ []string
	ports   []int
	addr    string
	dir     string
	prog    string
	pmi     *pmi.Node // nil: no PMI

	mu     sync.Mutex
	procs  []*rankProc
	live   int
	notify chan struct{} // closed and replaced whenever a rank exits
	wg     sync.WaitGroup
	done   chan struct{}

	stdinCond *sync.Cond
	stdinQ    [][]byte
	stdinEOF  bool
}

// preflight checks the working directory and the program, and reserves the
// ports the ranks will gossip on.
func (a *agent) preflight() (*readyInfo, error) {
	s := a.spec
	host, _ := os.Hostname()
	dir := s.Wdir
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		if s.WdirSet || dir == "" {
			return nil, fmt.Errorf("wdir %s: no such directory", dir)
		}
		if dir, err = os.UserHomeDir(); err != nil {
			dir = "/"
		}
	}
	a.dir = dir
	prog, err := resolveProgram(s.Program, dir, envValue(a.environ, "PATH"))
	if err != nil {
		return nil, err
	}
	a.prog = prog
	ports := make([]int, 0, len(s.Ranks)+1)
	for range len(s.Ranks) + 1 {
		p, err := FreePort(ports)
		if err != nil {
			return nil, fmt.Errorf("reserving a port: %w", err)
		}
		ports = append(ports, p)
	}
	addr := s.Advertise
	if addr == "" {
		addr = "127.0.0.1"
		if f := strings.Fields(envValue(a.environ, "SSH_CONNECTION")); len(f) == 4 {
			addr = f[2]
		}
	}
	return &readyInfo{Hostname: host, Addr: addr, Ports: ports[:len(s.Ranks)], MasterPort: ports[len(s.Ranks)]}, nil
}

// resolveProgram finds prog the way a shell would: a name with a slash is a
// path (relative to dir), anything else is looked up in path.
func resolveProgram(prog, dir, path string) (string, error) {
	if prog == "" {
		return "", errors.New("no program given")
	}
	check := func(p string) error {
		st, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("%s: no such file", prog)
		}
		if st.IsDir() {
			return fmt.Errorf("%s: is a directory", prog)
		}
		if st.Mode()&0o111 == 0 {
			return fmt.Errorf("%s: permission denied (not executable)", prog)
		}
		return nil
	}
	if strings.Contains(prog, "/") {
		p := prog
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		return p, check(p)
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, prog)
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if check(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: command not found in PATH", prog)
}

func envValue(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val
		}
	}
	return v
}

// rankEnv is the per-rank part of the environment.
func (a *agent) rankEnv(i int) []string {
	r := a.spec.Ranks[i]
	return jobenv.Rank{Rank: r.Rank, LocalRank: r.LocalRank, LocalSize: r.LocalSize, NodeRank: r.NodeRank, Addr: a.addr, GossipPort: a.ports[i]}.Env()
}

// threadEnv gives Go ranks an equal share of this host's CPUs, as torchrun
// sets OMP_NUM_THREADS: one thread per rank when they share few cores makes
// a rank's network reader hand frames to its collective on one hot thread.
// The user's own GOMAXPROCS (exported, or given with -x) wins.
func (a *agent) threadEnv() []string {
	if envValue(a.environ, "GOMAXPROCS") != "" || envValue(a.spec.Env, "GOMAXPROCS") != "" || len(a.spec.Ranks) == 0 {
		return nil
	}
	return []string{"GOMAXPROCS=" + strconv.Itoa(max(1, runtime.NumCPU()/a.spec.Ranks[0].LocalSize))}
}

func (a *agent) start(jobEnv []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.notify = make(chan struct{})
	for i, rs := range a.spec.Ranks {
		p := &rankProc{spec: rs}
		a.procs = append(a.procs, p)
		env := append(append(append(append(append([]string{}, a.environ...), a.threadEnv()...), a.spec.Env...), jobEnv...), a.rankEnv(i)...)
		prog, args := a.prog, a.spec.Args
		if rs.Hub > 0 {
			// A hub is this very binary, started as `gorun __hub`.
			var err error
			if prog, err = os.Executable(); err != nil {
				prog = "/proc/self/exe"
			}
			args = []string{HubCommandName}
			env = append(append([]string{}, a.environ...), jobEnv...)
			env = append(env, a.spec.Env...)
			env = append(env, jobenv.Hub(rs.Hub-1, a.ports[i], rs.NodeRank)...)
		}
		if rs.Hub == 0 {
			if path := pagePath(a.spec.JobID, rs.Rank); inspect.CreatePage(path) == nil {
				p.page = path
				env = append(env, jobenv.StatusFileVar+"="+path)
			}
		}
		if rs.Hub == 0 && a.spec.Timeline {
			p.timeline = timelinePath(a.spec.JobID, rs.Rank)
			env = append(env, jobenv.TimelineFileVar+"="+p.timeline)
		}
		p.ooms, _ = oomKills()
		var conn net.Conn
		var theirs *os.File
		if a.pmi != nil && rs.Hub == 0 {
			var err error
			if conn, theirs, err = pmiSocket(); err == nil {
				env = append(env, pmi.Env(pmiFD, rs.Rank, a.spec.PMI.Size, rs.LocalRank, rs.LocalSize)...)
			} else {
				a.log.Warn("no PMI for this rank", "rank", rs.Rank, "err", err)
			}
		}
		if conn != nil {
			p.pmi = &pmiSession{conn: conn, done: make(chan struct{})}
		}
		err := a.startOne(p, prog, args, env, theirs)
		if theirs != nil {
			_ = theirs.Close()
		}
		if conn != nil {
			if err != nil {
				_ = conn.Close()
				p.pmi = nil
			} else {
				a.servePMI(p)
			}
		}
		if err != nil {
			_ = a.conn.Send(&msg{Kind: msgOutput, Rank: rs.Rank, Stream: 2, Data: []byte("gorun: " + err.Error())})
			_ = a.conn.Send(&msg{Kind: msgExit, Rank: rs.Rank, Exit: &exitInfo{Code: 127}})
		}
	}
}

// startOne starts one rank in a process group of its own. Its output goes
// through pipes the agent owns, so that waiting for the process and reading
// its output are independent.
func (a *agent) startOne(p *rankProc, prog string, args, env []string, pmiFile *os.File) error {
	cmd := exec.Command(prog, args...)
	if pmiFile != nil {
		cmd.ExtraFiles = []*os.File{pmiFile} // descriptor pmiFD
	}
	if p.spec.Hub == 0 {
		cmd.Args[0] = a.spec.Program
	}
	cmd.Dir = a.dir
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	outR, outW, err := os.Pipe()
	if err != nil {
		return err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return err
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	if p.spec.Rank == 0 {
		if p.stdin, err = cmd.StdinPipe(); err != nil {
			return err
		}
	}
	err = cmd.Start()
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return fmt.Errorf("starting %s: %w", prog, err)
	}
	p.cmd, p.alive = cmd, true
	a.live++
	_ = a.conn.Send(&msg{Kind: msgStarted, Rank: p.spec.Rank, Pid: cmd.Process.Pid})
	var pumps sync.WaitGroup
	pumps.Add(2)
	go a.pump(&pumps, p, 1, outR)
	go a.pump(&pumps, p, 2, errR)
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		werr := cmd.Wait()
		pid := cmd.Process.Pid
		// Whatever the rank left behind in its group goes with it.
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		pumps.Wait()
		ex := &exitInfo{Pid: pid, Code: cmd.ProcessState.ExitCode()}
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			ex.Code, ex.Signal = -1, int(ws.Signal())
		} else if ex.Code < 0 && werr != nil {
			ex.Code = 1
		}
		ex.Failure = a.endPMI(p, ex.Code)
		a.mu.Lock()
		if p.failure != "" {
			ex.Failure = p.failure
		}
		ex.ForeignKill = ex.Signal == int(syscall.SIGKILL) && !p.killed && p.failure == ""
		a.mu.Unlock()
		if n, ok := oomKills(); ok && n > p.ooms {
			ex.OOM = true
		}
		if p.page != "" {
			_ = os.Remove(p.page)
		}
		a.sendTimeline(p)
		_ = a.conn.Send(&msg{Kind: msgExit, Rank: p.spec.Rank, Exit: ex})
		a.mu.Lock()
		p.alive = false
		a.live--
		close(a.notify)
		a.notify = make(chan struct{})
		a.mu.Unlock()
	}()
	return nil
}

const maxLine = 64 << 10

// pump forwards whole lines; a line longer than maxLine is sent in pieces.
func (a *agent) pump(wg *sync.WaitGroup, p *rankProc, stream int, r *os.File) {
	defer wg.Done()
	defer r.Close()
	br := bufio.NewReaderSize(r, maxLine)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			line = trimNewline(line)
			data := append([]byte(nil), line...)
			s := stream
			if s == 2 && p.dumping.Load() {
				s = streamDump
			}
			_ = a.conn.Send(&msg{Kind: msgOutput, Rank: p.spec.Rank, Stream: s, Data: data})
		}
		if err != nil && err != bufio.ErrBufferFull {
			return
		}
	}
}

func trimNewline(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
		if n := len(b); n > 0 && b[n-1] == '\r' {
			b = b[:n-1]
		}
	}
	return b
}

func (a *agent) running() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.live
}

func (a *agent) exited() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.notify
}

func (a *agent) signalAll(sig syscall.Signal) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range a.procs {
		if p.alive {
			p.killed = p.killed || sig == syscall.SIGKILL
			_ = syscall.Kill(-p.cmd.Process.Pid, sig)
		}
	}
}

// writeStdin queues bytes for rank 0's stdin; a writer goroutine feeds the
// pipe, so a rank that never reads its stdin cannot stall the agent.
func (a *agent) writeStdin(b []byte) { a.queueStdin(b, false) }

func (a *agent) closeStdin() { a.queueStdin(nil, true) }

func (a *agent) queueStdin(b []byte, eof bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stdinCond == nil {
		a.stdinCond = sync.NewCond(&a.mu)
		go a.feedStdin()
	}
	if b != nil {
		a.stdinQ = append(a.stdinQ, b)
	}
	a.stdinEOF = a.stdinEOF || eof
	a.stdinCond.Signal()
}

func (a *agent) feedStdin() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for {
		for len(a.stdinQ) == 0 && !a.stdinEOF {
			a.stdinCond.Wait()
		}
		var w io.WriteCloser
		for _, p := range a.procs {
			if p.stdin != nil {
				w = p.stdin
			}
		}
		if len(a.stdinQ) == 0 {
			if w != nil {
				_ = w.Close()
			}
			return
		}
		b := a.stdinQ[0]
		a.stdinQ = a.stdinQ[1:]
		if w != nil {
			a.mu.Unlock()
			_, err := w.Write(b)
			a.mu.Lock()
			if err != nil {
				a.stdinQ, a.stdinEOF = nil, true
			}
		}
	}
}
