package launcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gorun/gorun/internal/jobenv"
	"github.com/gorun/gorun/internal/jobsecret"
)

// Agents started by Slurm. Inside an allocation, where sites confine or
// deny SSH between nodes, the launcher starts every host's agent with one
// `srun` step (one task per node, no CPU binding, stdin closed), so that
// scancel, accounting and cleanup see them; each agent dials back to the
// launcher and proves the job's secret (the rendezvous handshake of a
// per-node start), then speaks the same protocol as over SSH.
//
// The secret, the addresses to dial and the step's nonce travel in the
// step's environment, never on a command line.

// SrunAgentCommandName is the hidden subcommand of gorun that an srun
// step runs on every node.
const SrunAgentCommandName = "__srun-agent"

// The environment of an srun step's agents (beside GORUN_JOB_SECRET).
const (
	// SrunLauncherVar holds the launcher's addresses, HOST:PORT,...
	SrunLauncherVar = "GORUN_SRUN_LAUNCHER"
	// SrunStepVar holds the step's nonce, which each agent's handshake
	// repeats: an agent of another step is refused.
	SrunStepVar = "GORUN_SRUN_STEP"
)

// SrunConfig is an srun step of agents.
type SrunConfig struct {
	Srun   []string // the srun command and options of the user's, e.g. ["srun"]
	Gorun  string   // gorun's path on the nodes
	Hosts  []Host   // the nodes (Slurm node names) to start an agent on
	Secret []byte   // the job's secret (GORUN_JOB_SECRET in the step)
	// Env is the step's environment (nil: this process's).
	Env []string
	// Stderr takes srun's own messages and the agents' (nil: discarded).
	Stderr io.Writer
	// Timeout bounds the wait for every agent to dial in after srun
	// started; HandshakeTimeout one agent's handshake.
	Timeout, HandshakeTimeout time.Duration
	// Grace is how long Close waits for srun to end on its own (its
	// agents end when their streams do) before it signals srun.
	Grace time.Duration
}

// DefaultSrunConfig waits a minute for the agents (srun launches them all
// at once, the launcher is listening before it starts), 10 s for one
// handshake, and 10 s for srun to end.
func DefaultSrunConfig() SrunConfig {
	return SrunConfig{Srun: []string{"srun"}, Timeout: time.Minute, HandshakeTimeout: 10 * time.Second, Grace: 10 * time.Second}
}

// Command is the srun command line that starts the agents.
func (cfg SrunConfig) Command() []string {
	n := strconv.Itoa(len(cfg.Hosts))
	args := slices.Clone(cfg.Srun)
	return append(args,
		"--nodes="+n, "--ntasks="+n, "--ntasks-per-node=1", "--nodelist="+hostNames(cfg.Hosts),
		"--whole",              // the ranks get the node's whole allocation, not the one CPU of the agent's task
		"--cpu-bind=none",      // the ranks bind (or not) themselves
		"--mpi=none",           // no PMI of Slurm's in the agents' environment: gorun serves the ranks' PMI
		"--input=none",         // stdin closed: the launcher forwards rank 0's stdin
		"--kill-on-bad-exit=0", // a lost node is the launcher's to report (or, elastic, to survive)
		"--wait=0",             // the other agents run on when one ends
		"--job-name=gorun",
		cfg.Gorun, SrunAgentCommandName)
}

// SrunStep is a running srun step whose agents all dialed in: the
// launcher's Spawner for every host (Attacher). Close ends the step.
type SrunStep struct {
	*Rendezvous
	cmd       *exec.Cmd
	exited    chan struct{} // closed when srun has ended
	grace     time.Duration
	closeOnce sync.Once
}

// StartSrun starts the step, with its agents told to dial addrs (each
// HOST:PORT of l, the launcher's listener; Listen picks them), and
// returns when every agent has dialed in and proved the secret. If srun
// ends first, or the wait times out, or ctx ends, the step is ended and
// the error names the nodes that never dialed in, with what srun said.
// Refused connections are reported through warn.
func StartSrun(ctx context.Context, l net.Listener, addrs []string, cfg SrunConfig, warn func(string)) (*SrunStep, error) {
	switch {
	case jobsecret.Check(cfg.Secret) != nil:
		return nil, fmt.Errorf("srun: %w", jobsecret.Check(cfg.Secret))
	case len(cfg.Hosts) == 0:
		return nil, errors.New("srun: no nodes")
	case len(addrs) == 0:
		return nil, errors.New("srun: no address for the agents to dial")
	case len(cfg.Srun) == 0:
		return nil, errors.New("srun: no srun command")
	}
	step, err := nonce()
	if err != nil {
		return nil, err
	}
	args := cfg.Command()
	cmd := exec.Command(args[0], args[1:]...)
	env := cfg.Env
	if env == nil {
		env = os.Environ()
	}
	cmd.Env = append(slices.Clone(env), jobenv.SecretVar+"="+string(cfg.Secret), SrunLauncherVar+"="+strings.Join(addrs, ","), SrunStepVar+"="+step)
	said := newTail(20)
	if cfg.Stderr != nil {
		cmd.Stderr = io.MultiWriter(cfg.Stderr, said)
	} else {
		cmd.Stderr = said
	}
	// Own process group: a Ctrl-C on the terminal reaches the launcher
	// only (srun would take a single one as a request for its status);
	// if the launcher dies, srun gets SIGTERM and forwards it to the
	// agents.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	cmd.WaitDelay = agentWaitDelay // a child of srun's may hold its stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("srun: %w", err)
	}
	s := &SrunStep{cmd: cmd, exited: make(chan struct{}), grace: cfg.Grace}
	wait, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		err := cmd.Wait()
		if err == nil {
			err = errors.New("exit status 0")
		}
		cancel(fmt.Errorf("srun ended: %v%s", err, said.suffix()))
		close(s.exited)
	}()
	// Slurm numbers a step's nodes (SLURM_NODEID) in the order of its
	// node list, which is the allocation's.
	rc := RendezvousConfig{Secret: cfg.Secret, Nodes: len(cfg.Hosts), Program: step, Timeout: cfg.Timeout, HandshakeTimeout: cfg.HandshakeTimeout, allDial: true, names: strings.Split(hostNames(cfg.Hosts), ",")}
	r, nodes, err := Meet(wait, l, rc, warn)
	if err != nil {
		s.end()
		return nil, fmt.Errorf("srun: %w", err)
	}
	s.Rendezvous = r
	for _, n := range nodes {
		if !slices.ContainsFunc(cfg.Hosts, func(h Host) bool { return h.Name == n.Hostname }) {
			s.Close()
			return nil, fmt.Errorf("srun: node %d's agent says it runs on %q (SLURMD_NODENAME), which is not one of the nodes asked for (%s)", n.Index, n.Hostname, hostNames(cfg.Hosts))
		}
	}
	return s, nil
}

func hostNames(hosts []Host) string {
	names := make([]string, len(hosts))
	for i, h := range hosts {
		names[i] = h.Name
	}
	return strings.Join(names, ",")
}

// Close ends the step: the agents no job took are let go, then srun is
// given Grace to end on its own (its agents end with their streams),
// then SIGTERM (which it forwards to the agents), then, 5 s later,
// SIGKILL. It returns once srun has ended.
func (s *SrunStep) Close() error {
	s.closeOnce.Do(func() {
		if s.Rendezvous != nil {
			_ = s.Rendezvous.Close()
		}
		select {
		case <-s.exited:
		case <-time.After(s.grace):
			s.end()
		}
	})
	return nil
}

// end signals srun to end its step and waits until it has.
func (s *SrunStep) end() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// ListenAddrs are the addresses an srun step's agents may dial to reach
// l (listening on every interface): the address this machine routes to
// first from, if it resolves, then every other address of its up,
// non-loopback interfaces.
func ListenAddrs(l net.Listener, first string) []string {
	_, port, _ := net.SplitHostPort(l.Addr().String())
	var ips []string
	if first != "" {
		if ip := routeTo(first); ip != "" && !net.ParseIP(ip).IsLoopback() {
			ips = append(ips, ip)
		}
	}
	ifaces, _ := net.Interfaces()
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		as, _ := ifc.Addrs()
		for _, a := range as {
			ipn, ok := a.(*net.IPNet)
			if !ok || ipn.IP.IsLoopback() || ipn.IP.IsLinkLocalUnicast() {
				continue
			}
			if ip := ipn.IP.String(); !slices.Contains(ips, ip) {
				ips = append(ips, ip)
			}
		}
	}
	addrs := make([]string, len(ips))
	for i, ip := range ips {
		addrs[i] = net.JoinHostPort(ip, port)
	}
	return addrs
}

// InSlurm reports whether lookup shows a Slurm allocation (SLURM_JOB_ID
// and a node list) and, if so, the job's id.
func InSlurm(lookup func(string) (string, bool)) (string, bool) {
	id, ok := lookup("SLURM_JOB_ID")
	if !ok || id == "" {
		return "", false
	}
	if _, ok := lookup("SLURM_JOB_NODELIST"); ok {
		return id, true
	}
	_, ok = lookup("SLURM_NODELIST")
	return id, ok
}

// AgentEnviron is an srun step's (or a per-node start's) environment as
// the agent passes it on to its ranks: without the job's secret and the
// step's addresses, and without what describes the agent's own Slurm task
// (its task id, step, PMI), which would tell an MPI library that srun
// started it as a task of a step of len(nodes) tasks.
func AgentEnviron(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case name == jobenv.SecretVar, name == SrunLauncherVar, name == SrunStepVar:
		case strings.HasPrefix(name, "SLURM_STEP_"), strings.HasPrefix(name, "SLURM_SRUN_COMM_"), strings.HasPrefix(name, "SLURM_CPU_BIND"):
		case strings.HasPrefix(name, "PMI_"), strings.HasPrefix(name, "PMIX_"):
		case slices.Contains(stepVars, name):
		default:
			out = append(out, kv)
		}
	}
	return out
}

// stepVars describe one task of a step.
var stepVars = []string{"SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_TASK_PID", "SLURM_STEPID", "SLURM_GTIDS", "SLURM_LAUNCH_NODE_IPADDR", "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_TASKS_PER_NODE", "SLURM_DISTRIBUTION", "SLURM_UMASK", "SLURM_PRIO_PROCESS", "SLURM_SRUN_COMM_HOST"}
