package main

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/gorun/gorun/internal/jobenv"
	"github.com/gorun/gorun/internal/jobsecret"
	"github.com/gorun/gorun/launcher"
	"github.com/urfave/cli/v2"
)

// The launch modes: how the agents of a job's hosts are started.
const (
	modeAuto = "auto" // srun inside a Slurm allocation when srun exists, else ssh
	modeSSH  = "ssh"  // ssh for other hosts, a child process for this one
	modeSrun = "srun" // one srun step for every host's agent, which dials back
)

// chooseLauncher picks the launch mode for flag (--launcher) and says
// why. hostsGiven: -hostfile or -H named the hosts (auto then keeps ssh:
// the user chose the hosts, not the allocation).
func chooseLauncher(flag string, hostsGiven bool, lookup func(string) (string, bool), lookPath func(string) (string, error)) (mode, why string, err error) {
	job, inSlurm := launcher.InSlurm(lookup)
	srun, srunErr := lookPath("srun")
	switch flag {
	case modeSSH:
		return modeSSH, "--launcher ssh", nil
	case modeSrun:
		switch {
		case !inSlurm:
			return "", "", fmt.Errorf("--launcher srun: not inside a Slurm allocation (no SLURM_JOB_ID and SLURM_JOB_NODELIST): run gorun under salloc or in an sbatch script")
		case srunErr != nil:
			return "", "", fmt.Errorf("--launcher srun: no srun on PATH: %w", srunErr)
		}
		return modeSrun, fmt.Sprintf("--launcher srun, Slurm job %s, %s", job, srun), nil
	case modeAuto, "":
		switch {
		case !inSlurm:
			return modeSSH, "not inside a Slurm allocation", nil
		case hostsGiven:
			return modeSSH, fmt.Sprintf("inside Slurm job %s, but -hostfile or -H names the hosts", job), nil
		case srunErr != nil:
			return modeSSH, fmt.Sprintf("inside Slurm job %s, but no srun on PATH", job), nil
		}
		return modeSrun, fmt.Sprintf("inside Slurm job %s, with %s", job, srun), nil
	}
	return "", "", fmt.Errorf("--launcher %q: want auto, ssh or srun", flag)
}

// launcherFlags choose how agents start.
func launcherFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "launcher", Value: modeAuto, EnvVars: []string{"GORUN_LAUNCHER"}, Usage: "how the hosts' agents start: ssh, srun (one Slurm step whose agents dial back; no SSH), or auto (srun inside a Slurm allocation when srun exists and no -hostfile or -H is given, else ssh; -v says which)"},
		&cli.StringFlag{Name: "srun", Value: "srun", EnvVars: []string{"GORUN_SRUN"}, Usage: "with --launcher srun: the srun `COMMAND` and options of yours, e.g. \"srun --partition=gpu\""},
	}
}

// startAgents picks the launch mode (--launcher) and, for srun, starts
// the agents and points cfg at them. The returned function ends what it
// started; call it when the job has ended. On error, cfg's metrics
// listener is closed.
func startAgents(c *cli.Context, cfg *launcher.Config) (func(), error) {
	mode, why, err := chooseLauncher(c.String("launcher"), c.IsSet("hostfile") || c.IsSet("H"), os.LookupEnv, exec.LookPath)
	if err == nil && cfg.Logger != nil {
		cfg.Logger.Info("launcher", "mode", mode, "why", why)
	}
	end := func() {}
	if err == nil && mode == modeSrun {
		end, err = useSrun(c, cfg)
	}
	if err != nil {
		closeMetrics(*cfg)
		return nil, err
	}
	return end, nil
}

// useSrun makes cfg start its agents with one srun step over the hosts the
// job places ranks on, and waits for them to dial back. The returned
// function ends the step; call it when the job has ended.
func useSrun(c *cli.Context, cfg *launcher.Config) (func(), error) {
	np := cfg.NP
	if np == 0 { // one rank per slot, as launcher.Run places them
		for _, h := range cfg.Hosts {
			np += h.Slots
		}
	}
	places, err := launcher.Place(cfg.Hosts, np, cfg.MapBy, cfg.Oversubscribe)
	if err != nil {
		return nil, err
	}
	used := make([]bool, len(cfg.Hosts))
	for _, p := range places {
		used[p.Host] = true
	}
	var hosts []launcher.Host
	for i, h := range cfg.Hosts {
		if used[i] {
			hosts = append(hosts, h)
		}
	}
	secret, err := jobsecret.New()
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		return nil, fmt.Errorf("--launcher srun: listening for the agents: %w", err)
	}
	defer l.Close()
	sc := launcher.DefaultSrunConfig()
	sc.Srun = strings.Fields(c.String("srun"))
	sc.Gorun = cmp.Or(cfg.RemoteGorun, cfg.Gorun)
	sc.Hosts, sc.Secret, sc.Stderr = hosts, secret, os.Stderr
	addrs := launcher.ListenAddrs(l, hosts[0].Name)
	if cfg.Logger != nil {
		cfg.Logger.Info("srun: starting the agents", "nodes", len(hosts), "dial", strings.Join(addrs, ","), "command", strings.Join(sc.Command(), " "))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	warn := func(s string) { fmt.Fprintln(os.Stderr, "gorun: "+s) }
	step, err := launcher.StartSrun(ctx, l, addrs, sc, warn)
	if err != nil {
		return nil, err
	}
	cfg.Hosts, cfg.Local, cfg.Remote = hosts, step, step
	if cfg.Logger != nil {
		cfg.Logger.Info("srun: every agent dialed in", "nodes", len(hosts))
	}
	return func() { _ = step.Close() }, nil
}

// runSrunAgent is `gorun __srun-agent`, which an srun step runs on every
// node: it dials the launcher back and runs the node's agent.
func runSrunAgent(c *cli.Context) error {
	get := os.Getenv
	addrs, secret, step := get(launcher.SrunLauncherVar), get(jobenv.SecretVar), get(launcher.SrunStepVar)
	if addrs == "" || secret == "" || step == "" {
		return fmt.Errorf("gorun %s: not started by gorun's srun step (%s, %s or %s unset)", launcher.SrunAgentCommandName, launcher.SrunLauncherVar, jobenv.SecretVar, launcher.SrunStepVar)
	}
	node, err := strconv.Atoi(get("SLURM_NODEID"))
	if err != nil {
		return fmt.Errorf("gorun %s: SLURM_NODEID %q: %v", launcher.SrunAgentCommandName, get("SLURM_NODEID"), err)
	}
	nodes, err := strconv.Atoi(cmp.Or(get("SLURM_STEP_NUM_NODES"), get("SLURM_NNODES")))
	if err != nil {
		return fmt.Errorf("gorun %s: SLURM_STEP_NUM_NODES: %v", launcher.SrunAgentCommandName, err)
	}
	host, _ := os.Hostname()
	nc := launcher.DefaultNodeConfig()
	nc.Launcher, nc.Secret, nc.Node, nc.Nodes, nc.Slots, nc.Program = addrs, []byte(secret), node, nodes, 1, step
	nc.Hostname = cmp.Or(get("SLURMD_NODENAME"), host)
	// The launcher listens before srun starts: a launcher that does not
	// answer within a minute is gone.
	nc.Timeout = launcher.DefaultSrunConfig().Timeout
	return dialAndServe(nc, "gorun srun agent on "+nc.Hostname, false)
}
