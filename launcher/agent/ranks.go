package agent

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/gorun/gorun/internal/control"
	"github.com/gorun/gorun/internal/inspect"
	"github.com/gorun/gorun/internal/jobenv"
	"github.com/gorun/gorun/launcher/proto"
	"github.com/gorun/gorun/pmi"
)

type rankProc struct {
	spec    proto.RankSpec
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	alive   bool
	pmi     *pmiSession     // nil: no PMI
	control *controlSession // nil: no control channel (not gorun --elastic)
	failure string          // set by failRank
	page    string          // its status page ("" none)
	// declared is the pid that declared the page (the rank itself, if it
	// uses gorun's collectives); dumping: its stderr is a goroutine dump.
	declared int
	dumping  atomic.Bool
	killed   bool   // the agent sent it SIGKILL
	ooms     int    // the cgroup's OOM kills when it started
	timeline string // where it writes its timeline ("" none)
	// restart is which start of the rank this is: 0 the first, k the
	// k-th restart (gorun --max-restarts). pending: it failed with
	// restarts left, and the launcher's MsgRestart (or MsgTerminate) is
	// awaited.
	restart int
	pending bool
}

// RankEnv is the per-rank part of a rank's environment, as the agent sets
// it: r's numbers, the address the host's ranks advertise, and the rank's
// gossip port. The job-wide part comes from the launcher (the spec's Env
// and MsgStart's).
func RankEnv(r proto.RankSpec, addr string, port int) []string {
	return jobenv.Rank{Rank: r.Rank, LocalRank: r.LocalRank, LocalSize: r.LocalSize, NodeRank: r.NodeRank, Addr: addr, GossipPort: port}.Env()
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

// command is what to run for the i'th process of the host: the program
// with the job's and the rank's environment, or, for a hub, this very
// binary as `gorun __hub`.
func (a *agent) command(i int, p *rankProc, jobEnv []string) (prog string, args, env []string) {
	rs := p.spec
	if rs.Hub > 0 {
		var err error
		if prog, err = os.Executable(); err != nil {
			prog = "/proc/self/exe"
		}
		env = append(append([]string{}, a.environ...), jobEnv...)
		env = append(env, a.spec.Env...)
		env = append(env, jobenv.Hub(rs.Hub-1, a.ports[i], rs.NodeRank)...)
		return prog, []string{proto.HubCommandName}, env
	}
	env = append(append(append(append(append([]string{}, a.environ...), a.threadEnv()...), a.spec.Env...), jobEnv...), RankEnv(rs, a.addr, a.ports[i])...)
	if path := pagePath(a.spec.JobID, rs.Rank, p.restart); inspect.CreatePage(path) == nil {
		p.page = path
		env = append(env, jobenv.StatusFileVar+"="+path)
		if a.spec.Timing {
			env = append(env, jobenv.TimingVar+"=1")
		}
	}
	if a.spec.Timeline {
		p.timeline = timelinePath(a.spec.JobID, rs.Rank, p.restart)
		env = append(env, jobenv.TimelineFileVar+"="+p.timeline)
	}
	if p.restart > 0 {
		env = append(env, jobenv.RestartCountVar+"="+strconv.Itoa(p.restart))
	}
	return a.prog, a.spec.Args, env
}

// start starts every process of the host; one that cannot be started is
// reported to the launcher as exited with 127.
func (a *agent) start(jobEnv []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.notify = make(chan struct{})
	a.jobEnv = jobEnv
	for i, rs := range a.spec.Ranks {
		p := &rankProc{spec: rs}
		a.procs = append(a.procs, p)
		a.launch(i, p, "")
	}
}

// launch starts p, the i'th process of the host; first, if not "", is
// the first line of its control channel. One that cannot be started is
// reported to the launcher as exited with 127. The caller holds a.mu.
func (a *agent) launch(i int, p *rankProc, first string) {
	prog, args, env := a.command(i, p, a.jobEnv)
	p.ooms, _ = oomKills()
	f := a.openChannels(p)
	if first != "" && p.control != nil {
		p.control.send(first) // before the writer runs: the rank reads it first
	}
	err := a.startOne(p, prog, args, append(env, f.env...), f.extra)
	for _, theirs := range f.theirs {
		_ = theirs.Close()
	}
	a.serveChannels(p, err == nil)
	if err != nil {
		if p.page != "" {
			_ = os.Remove(p.page)
		}
		a.notStarted(p, err)
	}
}

// notStarted reports p, which could not be started (err), as exited with
// 127. The caller holds a.mu.
func (a *agent) notStarted(p *rankProc, err error) {
	ex := &proto.Exit{Code: 127}
	a.holdForRestart(p, ex)
	_ = a.conn.Send(&proto.Message{Kind: proto.MsgOutput, Rank: p.spec.Rank, Stream: proto.StreamStderr, Data: []byte("gorun: " + err.Error())})
	_ = a.conn.Send(&proto.Message{Kind: proto.MsgExit, Rank: p.spec.Rank, Exit: ex})
}

// restart starts rank m.Rank again, its m.Count-th restart (gorun
// --max-restarts), in its own place: the same rank, ports and
// environment, with GORUN_RESTART_COUNT, a fresh control channel whose
// first line is the launcher's current view (m.Epoch, m.Live: without
// the rank), a status page and timeline file of its own, no PMI socket
// (PMI-1 knows no rank that comes back) and no stdin.
//
// A rank of another host, whose host is gone, comes with m.RankSpec, its
// numbers here: it gets a gossip port of its own (FreePort, as at the
// start) and this host's address, and is from then on one of this
// host's ranks (output, signals, exits, status page, the agent's done).
//
// A restart of a rank that is running, of a hub, or of a rank that is
// not on this host and comes without a spec of a rank is ignored, and so
// is every restart once the ranks are told to stop.
func (a *agent) restart(m *proto.Message) {
	a.mu.Lock()
	defer a.mu.Unlock()
	i := slices.IndexFunc(a.procs, func(p *rankProc) bool { return p.spec.Rank == m.Rank && p.spec.Hub == 0 })
	moved := m.RankSpec != nil && m.RankSpec.Rank == m.Rank && m.RankSpec.Hub == 0
	if i >= 0 && a.procs[i].alive || i < 0 && !moved {
		a.log.Warn("restart of a rank that is running, or not on this host, ignored", "rank", m.Rank)
		return
	}
	var spec proto.RankSpec
	if i >= 0 {
		old := a.procs[i]
		if old.pending {
			old.pending = false
			a.pending--
		}
		spec = old.spec
	}
	if a.terminating {
		return
	}
	if moved {
		spec = *m.RankSpec
	}
	p := &rankProc{spec: spec, restart: m.Count}
	if i < 0 {
		// A newcomer: its own port, after the host's own ranks'.
		port, err := FreePort(a.ports)
		i = len(a.procs)
		a.procs = append(a.procs, p)
		a.ports = append(a.ports, port)
		if err != nil {
			a.notStarted(p, fmt.Errorf("rank %d, restarted on this host: %w", m.Rank, err))
			return
		}
	}
	a.procs[i] = p
	first := ""
	if m.Epoch > 0 && len(m.Live) > 0 {
		first = control.View{Epoch: m.Epoch, Live: m.Live}.String() + "\n"
	}
	a.launch(i, p, first)
}

// holdForRestart marks p, which exited as ex, as pending when the
// launcher will restart it: an elastic job's rank (not a hub) that failed
// (exit code or signal not 0, or failed by the agent), with restarts
// left, while the ranks are not told to stop. The launcher's policy
// follows the same rule; until its MsgRestart or MsgTerminate the rank
// counts as running, so that the agent is not done. The caller holds
// a.mu.
func (a *agent) holdForRestart(p *rankProc, ex *proto.Exit) {
	failed := ex.Code != 0 || ex.Signal != 0 || ex.Failure != ""
	if a.spec.Elastic && p.spec.Hub == 0 && failed && p.restart < a.spec.MaxRestarts && !a.terminating && !p.pending {
		p.pending = true
		a.pending++
	}
}

// stopRestarts: the ranks are told to stop; no rank is restarted any
// more, and none is waited for.
func (a *agent) stopRestarts() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.terminating = true
	for _, p := range a.procs {
		p.pending = false
	}
	a.pending = 0
}

// channels is what a rank inherits besides its stdio: its descriptors
// (exec.Cmd.ExtraFiles: descriptor 3 + index) and their variables.
type channels struct {
	extra  []*os.File // in descriptor order
	theirs []*os.File // the rank's socket ends, closed once it started
	env    []string
}

// openChannels opens p's PMI socket (descriptor pmiFD, first) with Open
// MPI's library after it (ompiLibFD), and its control channel (gorun
// --elastic) after those; hubs get none. A socket that cannot be made is
// logged and left out.
func (a *agent) openChannels(p *rankProc) channels {
	var f channels
	rs := p.spec
	if rs.Hub != 0 {
		return f
	}
	if a.pmi != nil && p.restart == 0 {
		if conn, theirs, err := socketPair("PMI"); err == nil {
			f.extra, f.theirs = append(f.extra, theirs), append(f.theirs, theirs) // descriptor pmiFD
			f.env = append(f.env, pmi.Env(pmiFD, rs.Rank, a.spec.PMI.Size, rs.LocalRank, rs.LocalSize)...)
			f.env = append(f.env, a.ompi.env...)
			f.env = append(f.env, a.pmix.env(rs.Rank)...)
			if a.ompi.lib != nil {
				f.extra = append(f.extra, a.ompi.lib) // descriptor ompiLibFD
			}
			p.pmi = &pmiSession{conn: conn, done: make(chan struct{})}
		} else {
			a.log.Warn("no PMI for this rank", "rank", rs.Rank, "err", err)
		}
	}
	if a.spec.Elastic {
		if conn, theirs, err := socketPair("control"); err == nil {
			fd := 3 + len(f.extra)
			f.extra, f.theirs = append(f.extra, theirs), append(f.theirs, theirs)
			f.env = append(f.env, jobenv.ControlFDVar+"="+strconv.Itoa(fd))
			p.control = newControlSession(conn)
		} else {
			a.log.Warn("no control channel for this rank", "rank", rs.Rank, "err", err)
		}
	}
	return f
}

// serveChannels serves p's PMI socket and control channel if it started,
// and closes them if not.
func (a *agent) serveChannels(p *rankProc, started bool) {
	if !started {
		if p.pmi != nil {
			_ = p.pmi.conn.Close()
			p.pmi = nil
		}
		if p.control != nil {
			_ = p.control.conn.Close()
			p.control = nil
		}
		return
	}
	if p.pmi != nil {
		a.servePMI(p)
	}
	if p.control != nil {
		a.serveControl(p)
	}
}

// startOne starts one rank in a process group of its own, with extra as
// its descriptors from 3 on. Its output goes through pipes the agent
// owns, so that waiting for the process and reading its output are
// independent.
func (a *agent) startOne(p *rankProc, prog string, args, env []string, extra []*os.File) error {
	cmd := exec.Command(prog, args...)
	cmd.ExtraFiles = extra
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
	if p.spec.Rank == 0 && p.restart == 0 {
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
	a.sentinel.add(cmd.Process.Pid)
	a.live++
	_ = a.conn.Send(&proto.Message{Kind: proto.MsgStarted, Rank: p.spec.Rank, Pid: cmd.Process.Pid})
	pumps := new(sync.WaitGroup)
	pumps.Add(2)
	go a.pump(pumps, p, proto.StreamStdout, outR)
	go a.pump(pumps, p, proto.StreamStderr, errR)
	a.wg.Add(1)
	go a.waitRank(p, pumps)
	return nil
}

// waitRank waits for p to exit and for its output, and reports the exit
// to the launcher.
func (a *agent) waitRank(p *rankProc, pumps *sync.WaitGroup) {
	defer a.wg.Done()
	cmd := p.cmd
	werr := cmd.Wait()
	pid := cmd.Process.Pid
	// Whatever the rank left behind in its group goes with it.
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	a.sentinel.done(pid)
	pumps.Wait()
	ex := &proto.Exit{Pid: pid, Code: cmd.ProcessState.ExitCode()}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		ex.Code, ex.Signal = -1, int(ws.Signal())
	} else if ex.Code < 0 && werr != nil {
		ex.Code = 1
	}
	ex.Failure = a.endPMI(p, ex.Code)
	if ex.Failure == "" && p.spec.Hub == 0 {
		ex.Failure = a.endPMIx(p.spec.Rank, ex.Code)
	}
	a.endControl(p)
	if ex.Code == 0 && ex.Failure == "" && a.ompi.singleton() {
		ex.Failure = "but " + singletonFailure
	}
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
	// Gone before the launcher hears of it: its answer (a restart) must
	// find the rank exited. The loop looks after the report (notify),
	// and waits for it (wg) before it says done.
	a.mu.Lock()
	p.alive = false
	a.live--
	a.holdForRestart(p, ex)
	a.mu.Unlock()
	_ = a.conn.Send(&proto.Message{Kind: proto.MsgExit, Rank: p.spec.Rank, Exit: ex})
	a.mu.Lock()
	close(a.notify)
	a.notify = make(chan struct{})
	a.mu.Unlock()
}

// pump forwards whole lines; a line longer than proto.MaxLine is sent in
// pieces.
func (a *agent) pump(wg *sync.WaitGroup, p *rankProc, stream int, r *os.File) {
	defer wg.Done()
	defer r.Close()
	br := bufio.NewReaderSize(r, proto.MaxLine)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			data := append([]byte(nil), proto.TrimNewline(line)...)
			s := stream
			if s == proto.StreamStderr && p.dumping.Load() {
				s = proto.StreamDump
			}
			_ = a.conn.Send(&proto.Message{Kind: proto.MsgOutput, Rank: p.spec.Rank, Stream: s, Data: data})
		}
		if err != nil && err != bufio.ErrBufferFull {
			return
		}
	}
}

// running counts the ranks running and those waiting for a restart.
func (a *agent) running() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.live + a.pending
}

func (a *agent) exited() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.notify
}

// signalRank sends sig to the process group of the host's rank of that
// number, if it is running (the launcher fences a rank with SIGKILL).
func (a *agent) signalRank(rank int, sig syscall.Signal) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range a.procs {
		if p.alive && p.spec.Rank == rank {
			p.killed = p.killed || sig == syscall.SIGKILL
			_ = syscall.Kill(-p.cmd.Process.Pid, sig)
		}
	}
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
