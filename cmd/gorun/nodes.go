package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/gorun/gorun/internal/jobenv"
	"github.com/gorun/gorun/internal/jobsecret"
	"github.com/gorun/gorun/launcher"
	"github.com/gorun/gorun/launcher/agent"
	"github.com/urfave/cli/v2"
)

// Per-node start: one gorun per node, started by whatever starts the
// nodes (a Kubernetes Indexed Job, a container per host, a script), with
// no SSH anywhere. Node 0 is the launcher: it listens at the rendezvous
// address, waits for the others, and runs the job on all of them; every
// other node dials it and runs its agent over that connection.

// nodeFlags are the per-node start's flags; each has an environment
// variable too, for a pod template.
func nodeFlags() []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: "nnodes", EnvVars: []string{"GORUN_NNODES"}, Usage: "per-node start: the job's `N` nodes each run gorun with the same command; no SSH (see --node-rank, --rendezvous; the secret is GORUN_JOB_SECRET)"},
		&cli.IntFlag{Name: "node-rank", EnvVars: []string{"GORUN_NODE_RANK", "JOB_COMPLETION_INDEX"}, Usage: "per-node start: this node's index `I`, 0 to N-1 (0 runs the launcher)"},
		&cli.StringFlag{Name: "rendezvous", EnvVars: []string{"GORUN_RENDEZVOUS"}, Usage: "per-node start: node 0's `HOST:PORT`, where the other nodes dial in (node 0 listens on PORT)"},
		&cli.IntFlag{Name: "nproc-per-node", Value: 1, EnvVars: []string{"GORUN_NPROC_PER_NODE"}, Usage: "per-node start: ranks on each node (its slots)"},
		&cli.DurationFlag{Name: "rendezvous-timeout", Value: launcher.DefaultRendezvousConfig().Timeout, Usage: "per-node start: how long node 0 waits for every node, and a node for node 0"},
	}
}

// perNode reports whether the flags ask for a per-node start.
func perNode(c *cli.Context) bool { return c.IsSet("nnodes") }

// launchNode is gorun in a per-node start: node 0's launcher, or another
// node's agent.
func launchNode(c *cli.Context) error {
	nodes, node, slots := c.Int("nnodes"), c.Int("node-rank"), c.Int("nproc-per-node")
	addr := c.String("rendezvous")
	switch {
	case nodes < 1:
		return fmt.Errorf("--nnodes %d: want at least 1", nodes)
	case node < 0 || node >= nodes:
		return fmt.Errorf("--node-rank %d: want 0 to %d (--nnodes %d)", node, nodes-1, nodes)
	case slots < 1:
		return fmt.Errorf("--nproc-per-node %d: want at least 1", slots)
	case nodes > 1 && addr == "":
		return errors.New("--nnodes needs --rendezvous HOST:PORT (node 0's address; every node the same)")
	}
	if np := c.Int("np"); np != 0 && np != nodes*slots {
		return fmt.Errorf("-np %d: a per-node start runs --nproc-per-node ranks on each node: leave -np out or give %d (%d nodes x %d)", np, nodes*slots, nodes, slots)
	}
	for _, f := range []string{"hostfile", "H", "ssh", "remote-gorun", "launcher"} {
		if c.IsSet(f) {
			return fmt.Errorf("--%s: a per-node start (--nnodes) has no host list: every node starts its own gorun", f)
		}
	}
	secret := []byte(os.Getenv(jobenv.SecretVar))
	if jobsecret.Check(secret) != nil && nodes > 1 {
		return fmt.Errorf("a per-node start needs the job's secret in %s, at least %d bytes, the same on every node (e.g. from a Kubernetes Secret)", jobenv.SecretVar, jobsecret.MinLen)
	}
	program, args := c.Args().First(), c.Args().Tail()
	digest := launcher.ProgramDigest(program, args)
	if node > 0 {
		return runNodeAgent(c, nodes, node, slots, addr, secret, digest)
	}
	cfg, err := launchConfig(c)
	if err != nil {
		return err
	}
	cfg.Program, cfg.Args = program, args
	cfg.Hosts = []launcher.Host{{Name: "localhost", Slots: slots}}
	if nodes > 1 {
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			return fmt.Errorf("--rendezvous %q: %w", addr, err)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("", port))
		if err != nil {
			return fmt.Errorf("--rendezvous: node 0 cannot listen on port %s: %w", port, err)
		}
		rc := launcher.DefaultRendezvousConfig()
		rc.Secret, rc.Nodes, rc.Program, rc.Timeout = secret, nodes, digest, c.Duration("rendezvous-timeout")
		warn := func(s string) { fmt.Fprintln(os.Stderr, "gorun: "+s) }
		if cfg.Logger != nil {
			cfg.Logger.Info("rendezvous: waiting for nodes", "listen", l.Addr().String(), "nodes", nodes-1)
		}
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		r, met, err := launcher.Meet(ctx, l, rc, warn)
		stop()
		if err != nil {
			return err
		}
		defer r.Close()
		cfg.Hosts, cfg.Remote = launcher.Hosts(slots, met), r
		if cfg.Logger != nil {
			for _, n := range met {
				cfg.Logger.Info("rendezvous: node in", "node", n.Index, "addr", n.Addr, "hostname", n.Hostname, "slots", n.Slots)
			}
		}
	}
	return runJob(cfg)
}

// runNodeAgent is a node other than 0: it dials node 0 and runs this
// host's agent over the connection until the job ends.
func runNodeAgent(c *cli.Context, nodes, node, slots int, addr string, secret []byte, digest string) error {
	nc := launcher.DefaultNodeConfig()
	nc.Launcher, nc.Secret, nc.Node, nc.Nodes, nc.Slots, nc.Program = addr, secret, node, nodes, slots, digest
	nc.Timeout = c.Duration("rendezvous-timeout")
	nc.Hostname, _ = os.Hostname()
	return dialAndServe(nc, fmt.Sprintf("gorun node %d", node), true)
}

// dialAndServe dials the launcher as nc says and runs this host's agent
// over the connection until the job ends; SIGTERM or SIGINT (scancel, a
// pod's deletion) end the ranks, then the agent. Its errors start with
// label. With result, it waits for the whole job and exits with its code
// (a node of a per-node start: a pod of a Kubernetes Job fails with the
// job); without, it ends with its own ranks (an srun step's agent: gorun
// reports the job).
func dialAndServe(nc launcher.NodeConfig, label string, result bool) error {
	drop := make(chan os.Signal, 8) // caught, not ignored: the ranks would inherit an ignored signal
	signal.Notify(drop, syscall.SIGHUP, syscall.SIGPIPE)
	defer signal.Stop(drop)
	go func() {
		for range drop {
		}
	}()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	stream, local, err := launcher.DialLauncher(ctx, nc)
	if err != nil {
		return fmt.Errorf("%s: %w", label, err)
	}
	defer stream.Close()
	cfg := agent.Config{In: stream, Out: stream, Environ: launcher.AgentEnviron(os.Environ()), Advertise: local}
	code := 0
	if result {
		cfg.Result = func(c int) { code = c }
	}
	if exe, err := os.Executable(); err == nil {
		cfg.Sentinel = []string{exe, launcher.SentinelCommandName}
	}
	if err := agent.Run(ctx, cfg); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", label, err)
		return exitError{1}
	}
	if code != 0 {
		fmt.Fprintf(os.Stderr, "%s: the job failed with exit code %d (node 0's output says why)\n", label, code)
		return exitError{code}
	}
	return nil
}
