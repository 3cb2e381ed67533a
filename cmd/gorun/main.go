// Command gorun starts the ranks of a program, locally or over SSH, and
// runs gorun's side tools (`gorun bench`). See the README.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gorun/gorun/bench"
	"github.com/gorun/gorun/collective"
	"github.com/gorun/gorun/internal/jobenv"
	"github.com/gorun/gorun/launcher"
	"github.com/gorun/gorun/launcher/agent"
	"github.com/gorun/gorun/ps"
	"github.com/gorun/gorun/python"
	"github.com/gorun/gorun/reduce"
	"github.com/urfave/cli/v2"
)

func main() {
	os.Exit(run(os.Args))
}

// exitError carries an exit code out of a cli action.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

func run(args []string) int {
	app := newApp()
	err := app.Run(args)
	var ee exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	default:
		fmt.Fprintf(os.Stderr, "gorun: %v\n", err)
		return launcher.ExitLaunchFailed
	}
}

func newApp() *cli.App {
	return &cli.App{
		Name:                      "gorun",
		Usage:                     "start the ranks of a program locally or over SSH",
		UsageText:                 "gorun [flags] PROGRAM [ARGS...]\n   gorun bench [flags]",
		HideHelpCommand:           true,
		DisableSliceFlagSeparator: true,
		Flags:                     append(append(append(launchFlags(), launcherFlags()...), nodeFlags()...), &cli.BoolFlag{Name: "version", Usage: "print gorun's version and exit"}),
		Action:                    launch,
		Commands: []*cli.Command{
			{
				Name:   launcher.AgentCommandName,
				Hidden: true,
				Action: runAgent,
			},
			{
				Name:   launcher.SrunAgentCommandName,
				Hidden: true,
				Action: runSrunAgent,
			},
			{
				Name:   launcher.HubCommandName,
				Hidden: true,
				Action: hub,
			},
			{
				Name:   launcher.SentinelCommandName,
				Hidden: true,
				Action: func(*cli.Context) error { return agent.Sentinel(os.Stdin) },
			},
			{
				Name:      "bench",
				Usage:     "time all-reduce through the ring and through ParamHub on the same job",
				UsageText: "gorun bench [launch flags] [--hubs K | --colocated-hubs K] [--sizes 4KiB,16MiB] [--target 1s] [--format table|csv]",
				Flags:     append(append(launchFlags(), launcherFlags()...), benchFlags()...),
				Action:    benchCmd,
			},
			{
				Name:   benchRankCommand,
				Hidden: true,
				Flags:  benchFlags(),
				Action: benchRank,
			},
		},
	}
}

func launchFlags() []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: "np", Aliases: []string{"n"}, Usage: "number of ranks (default: one per slot, or 1 locally)"},
		&cli.StringFlag{Name: "hostfile", Aliases: []string{"machinefile"}, Usage: "Open MPI (`host slots=N`) or MPICH (`host:N`) hostfile"},
		&cli.StringFlag{Name: "H", Aliases: []string{"host"}, Usage: "hosts as `host1:4,host2:4`"},
		&cli.StringSliceFlag{Name: "x", Usage: "pass `VAR[=value]` to every rank (repeatable)"},
		&cli.StringFlag{Name: "map-by", Value: "slot", Usage: "place ranks by `slot` (fill hosts), node (round-robin) or speed (the hostfile's speed=: the slowest host finishes first)"},
		&cli.BoolFlag{Name: "oversubscribe", Usage: "allow more ranks than slots"},
		&cli.StringFlag{Name: "output-filename", Usage: "also write each rank's output to `DIR`/rank.N/{stdout,stderr}"},
		&cli.BoolFlag{Name: "tag-output", Value: true, Usage: "prefix each output line with [rank]"},
		&cli.DurationFlag{Name: "timeout", Usage: "end the job after this long (exit code 124)"},
		&cli.StringFlag{Name: "timeline", Usage: "write every rank's collectives and spans to `FILE.json` (Chrome trace / Perfetto) when the job ends"},
		&cli.DurationFlag{Name: "stall-warn", Value: launcher.DefaultConfig().StallWarn, Usage: "when ranks using gorun's collectives make no progress this long, print where each one is (0: off)"},
		&cli.DurationFlag{Name: "stall-abort", Usage: "end a job stalled this long (exit code 124), after goroutine dumps of its Go ranks"},
		&cli.DurationFlag{Name: "grace", Value: launcher.DefaultConfig().Grace, Usage: "time from SIGTERM to SIGKILL when ending ranks"},
		&cli.DurationFlag{Name: "agent-wait", Value: launcher.DefaultConfig().AgentWait, Usage: "when the job ends, how long a host's agent may stay silent before gorun reports the host unreachable and kills its session (0: until the grace period plus 10s)"},
		&cli.StringFlag{Name: "ssh", Value: "ssh", Usage: "remote agent `COMMAND` (like Open MPI's plm_rsh_agent)"},
		&cli.StringFlag{Name: "remote-gorun", Usage: "`PATH` of gorun on remote hosts (default: this binary's path)"},
		&cli.StringFlag{Name: "wdir", Usage: "working `DIR` of the ranks (default: the current directory)"},
		&cli.StringFlag{Name: "strategy", Usage: "collective strategy for the ranks: ring or hub (sets GORUN_STRATEGY)"},
		&cli.StringFlag{Name: "wire", Usage: "wire `FORMAT` of the ranks' float32 all-reduces: full, fp16 or bf16 (half the bytes; sums still in float32; sets GORUN_WIRE)"},
		&cli.BoolFlag{Name: "exact", Usage: "the ranks' float32 and float64 sums (all-reduce, reduce-scatter, fused buckets; Sum and Avg) are the same bits whatever the algorithm, strategy and rank order, within a stated bound of the exact sum (integers at a shared exponent; sets GORUN_EXACT=1)"},
		&cli.StringFlag{Name: "hub-share", Usage: "how hub 0 splits an LB-BSP batch: proportional (the default) or optimal[:OPTIONS], e.g. `optimal:deadline=1.5s,cap=0/0/64/64,overhead=0s/0s/20ms/20ms` (per-worker lists one entry per rank; also miss=relax|fail, time=, resource=, price=; sets GORUN_HUB_SHARE)"},
		&cli.IntFlag{Name: "hubs", Usage: "start `K` dedicated ParamHub processes on the job's hosts (sets GORUN_HUBS)"},
		&cli.BoolFlag{Name: "hub-elastic", Usage: "hubs finish BSP rounds without a lost rank instead of failing (--elastic with --strategy hub)"},
		&cli.BoolFlag{Name: "elastic", Usage: "a lost rank does not end the job while --min-np ranks run: gorun fences ranks others suspect and sends the rest each new membership on GORUN_CONTROL_FD (ring); with --strategy hub, --hub-elastic"},
		&cli.IntFlag{Name: "min-np", Value: 1, Usage: "with --elastic or --hub-elastic: fail the job when a lost rank leaves fewer than `M` ranks running"},
		&cli.IntFlag{Name: "max-restarts", Usage: "with --elastic (ring): restart a lost rank up to `R` times (GORUN_RESTART_COUNT=k), on its host or, if that host is gone, on one with a free slot; it joins the next view once it says join"},
		&cli.StringFlag{Name: "pmi", Value: launcher.PMIOn, Usage: "what MPI programs bootstrap through: pmi1 (PMI-1 for MPICH and Open MPI 4, and a PMIx server for Open MPI 5, on every host) or none (MPI ranks run as singletons)"},
		&cli.StringFlag{Name: "metrics", Usage: "serve the job's metrics (Prometheus text format) at http://`ADDR`/metrics while it runs, e.g. :9400 or 127.0.0.1:9400 (-v logs the URL)"},
		&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "no live status line on the terminal"},
		&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "log launcher progress to stderr"},
	}
}

func launch(c *cli.Context) error {
	if c.Bool("version") {
		bi, _ := debug.ReadBuildInfo()
		_, err := fmt.Fprintln(c.App.Writer, versionLine(python.Version, bi))
		return err
	}
	if c.NArg() == 0 {
		return cli.ShowAppHelp(c)
	}
	if perNode(c) {
		return launchNode(c)
	}
	cfg, err := launchConfig(c)
	if err != nil {
		return err
	}
	if err := checkHubShare(cfg, jobSize(cfg)); err != nil {
		closeMetrics(cfg)
		return err
	}
	cfg.Program = c.Args().First()
	cfg.Args = c.Args().Tail()
	end, err := startAgents(c, &cfg)
	if err != nil {
		return err
	}
	defer end()
	return runJob(cfg)
}

// launchConfig turns the launch flags into a launcher.Config (without the
// program). With --metrics it listens there last, so that a busy address
// fails before anything starts (runJob closes the listener).
func launchConfig(c *cli.Context) (launcher.Config, error) {
	cfg := launcher.DefaultConfig()
	cfg.NP = c.Int("np")
	if err := parseLaunchFlags(c, &cfg); err != nil {
		return cfg, err
	}
	if addr := c.String("metrics"); addr != "" {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return cfg, fmt.Errorf("--metrics %s: %w", addr, err)
		}
		cfg.Metrics = l
	}
	return cfg, nil
}

// parseLaunchFlags reads the launch flags into cfg: the hosts, how ranks
// are run, the collectives' settings the ranks get in their environment,
// elasticity, and the launcher's own plumbing.
func parseLaunchFlags(c *cli.Context, cfg *launcher.Config) error {
	source, err := parseHostFlags(c, cfg)
	if err != nil {
		return err
	}
	if err := parseRunFlags(c, cfg); err != nil {
		return err
	}
	if err := parseCollectiveFlags(c, cfg); err != nil {
		return err
	}
	if err := parseElasticFlags(c, cfg); err != nil {
		return err
	}
	cfg.PMI = c.String("pmi")
	if cfg.Gorun, err = os.Executable(); err != nil {
		return err
	}
	cfg.Stdin = os.Stdin
	if c.Bool("verbose") {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
		cfg.Logger.Info("hosts", "from", source, "hosts", len(cfg.Hosts))
		cfg.Env = append(cfg.Env, jobenv.HubStatsVar+"=1") // hubs report their traffic
	}
	return nil
}

// parseHostFlags reads the job's hosts from -hostfile, -H or a batch
// allocation (none: this machine), and says where they came from.
func parseHostFlags(c *cli.Context, cfg *launcher.Config) (source string, err error) {
	source = "this machine (no -hostfile, -H or batch allocation)"
	if hf := c.String("hostfile"); hf != "" {
		source = "hostfile " + hf
		if c.String("H") != "" {
			return "", errors.New("give either -hostfile or -H, not both")
		}
		f, err := os.Open(hf)
		if err != nil {
			return "", err
		}
		cfg.Hosts, err = launcher.ParseHostfile(hf, f)
		f.Close()
		if err != nil {
			return "", err
		}
	} else if h := c.String("H"); h != "" {
		source = "-H " + h
		if cfg.Hosts, err = launcher.ParseHostList(h); err != nil {
			return "", err
		}
	} else {
		hosts, from, err := launcher.AllocHosts(os.LookupEnv, os.ReadFile)
		if err != nil {
			return "", err
		}
		if hosts != nil {
			cfg.Hosts, source = hosts, from
		}
	}
	return source, nil
}

// parseRunFlags reads how ranks are placed, started and watched: mapping,
// exported variables, output, timeouts, ssh, working directory and the
// collective strategy.
func parseRunFlags(c *cli.Context, cfg *launcher.Config) error {
	var err error
	if cfg.MapBy, err = launcher.ParseMapBy(c.String("map-by")); err != nil {
		return err
	}
	cfg.Oversubscribe = c.Bool("oversubscribe")
	for _, x := range c.StringSlice("x") {
		kv, err := exportVar(x)
		if err != nil {
			return err
		}
		cfg.Env = append(cfg.Env, kv)
	}
	cfg.OutputDir = c.String("output-filename")
	cfg.TagOutput = c.Bool("tag-output")
	cfg.Timeout = c.Duration("timeout")
	cfg.StallWarn, cfg.StallAbort = c.Duration("stall-warn"), c.Duration("stall-abort")
	cfg.Timeline = c.String("timeline")
	cfg.StatusLine = launcher.IsTerminal(os.Stderr) && !c.Bool("quiet")
	cfg.Grace = c.Duration("grace")
	cfg.AgentWait = c.Duration("agent-wait")
	cfg.SSH = strings.Fields(c.String("ssh"))
	cfg.RemoteGorun = c.String("remote-gorun")
	cfg.Wdir, cfg.WdirSet = c.String("wdir"), c.IsSet("wdir")
	switch s := c.String("strategy"); s {
	case "", "ring", "hub":
		cfg.Strategy = s
	default:
		return fmt.Errorf("--strategy %q: want ring or hub", s)
	}
	return nil
}

// parseCollectiveFlags reads the settings the ranks' collectives get in
// their environment: --exact, --wire and --hub-share, checking the share
// rule now when the job's size is known.
func parseCollectiveFlags(c *cli.Context, cfg *launcher.Config) error {
	if c.Bool("exact") {
		cfg.Env = append(cfg.Env, jobenv.ExactVar+"=1")
	}
	if w := c.String("wire"); w != "" {
		if _, err := reduce.ParseWire(w); err != nil {
			return fmt.Errorf("--wire: %w", err)
		}
		cfg.Env = append(cfg.Env, jobenv.WireVar+"="+w)
	}
	if c.IsSet("hub-share") {
		if slices.ContainsFunc(cfg.Env, isHubShare) {
			return fmt.Errorf("give --hub-share or -x %s, not both", jobenv.HubShareVar)
		}
		cfg.Env = append(cfg.Env, jobenv.HubShareVar+"="+c.String("hub-share"))
	}
	if perNode(c) {
		// (Otherwise the caller checks it once the job's size is known.)
		if err := checkHubShare(*cfg, c.Int("nnodes")*c.Int("nproc-per-node")); err != nil {
			return err
		}
	}
	return nil
}

// parseElasticFlags reads the hubs, elasticity, --min-np and
// --max-restarts, and checks that they go together.
func parseElasticFlags(c *cli.Context, cfg *launcher.Config) error {
	cfg.Hubs, cfg.HubElastic, cfg.Elastic = c.Int("hubs"), c.Bool("hub-elastic"), c.Bool("elastic")
	if c.IsSet("min-np") {
		if !cfg.Elastic && !cfg.HubElastic {
			return errors.New("--min-np needs --elastic (or --hub-elastic)")
		}
		if cfg.MinNP = c.Int("min-np"); cfg.MinNP < 1 {
			return fmt.Errorf("--min-np %d: want at least 1", cfg.MinNP)
		}
	}
	if c.IsSet("max-restarts") {
		if !cfg.Elastic || cfg.Strategy == "hub" {
			return errors.New("--max-restarts needs --elastic with the ring strategy (not --hub-elastic or --strategy hub)")
		}
		if cfg.MaxRestarts = c.Int("max-restarts"); cfg.MaxRestarts < 0 {
			return fmt.Errorf("--max-restarts %d: want 0 or more", cfg.MaxRestarts)
		}
	}
	return nil
}

func isHubShare(kv string) bool { return strings.HasPrefix(kv, jobenv.HubShareVar+"=") }

// checkHubShare checks the LB-BSP share rule the job's hubs are to get
// (--hub-share, or -x GORUN_HUB_SHARE=...) for a job of np ranks, before
// anything starts: the hubs and the ranks would refuse it at their start.
func checkHubShare(cfg launcher.Config, np int) error {
	i := slices.IndexFunc(cfg.Env, isHubShare)
	if i < 0 {
		return nil
	}
	spec := strings.TrimPrefix(cfg.Env[i], jobenv.HubShareVar+"=")
	sc, err := ps.ParseShareConfig(spec)
	if err == nil {
		err = sc.Validate(np)
	}
	if err != nil {
		return fmt.Errorf("--hub-share: %w", err)
	}
	return nil
}

// jobSize is the number of ranks launcher.Run will start for cfg.
func jobSize(cfg launcher.Config) int {
	if cfg.NP > 0 {
		return cfg.NP
	}
	n := 0
	for _, h := range cfg.Hosts {
		n += h.Slots
	}
	return max(n, 1)
}

func closeMetrics(cfg launcher.Config) {
	if cfg.Metrics != nil {
		_ = cfg.Metrics.Close()
	}
}

// runJob runs a job with signals forwarded and exits with its code.
func runJob(cfg launcher.Config) error {
	if cfg.Metrics != nil {
		defer cfg.Metrics.Close() // Run closes it too, unless it failed before the ranks started
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	cfg.Signals = sigs
	res, err := launcher.Run(context.Background(), cfg)
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return exitError{res.ExitCode}
	}
	return nil
}

const benchRankCommand = "__benchrank"

func benchFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "sizes", Value: "4KiB,256KiB,4MiB,16MiB", Usage: "comma-separated all-reduce `SIZES`"},
		&cli.DurationFlag{Name: "target", Value: time.Second, Usage: "time spent per size and strategy"},
		&cli.IntFlag{Name: "colocated-hubs", Value: 1, Usage: "without --hubs: hubs inside ranks 0..`K`-1"},
		&cli.StringFlag{Name: "format", Value: "table", Usage: "table (with a chart) or csv"},
		&cli.StringFlag{Name: "partition", Value: "4MiB", Usage: "largest ParamHub partition `SIZE` (a round cuts smaller ones to give each hub about 32)"},
	}
}

// benchCmd launches gorun itself as the rank program of a bench job.
func benchCmd(c *cli.Context) error {
	cfg, err := launchConfig(c)
	if err != nil {
		return err
	}
	if cfg.NP == 0 && len(cfg.Hosts) == 0 {
		cfg.NP = 2
	}
	if err := checkHubShare(cfg, jobSize(cfg)); err != nil {
		closeMetrics(cfg)
		return err
	}
	if _, err := parseSizes(c.String("sizes")); err != nil {
		return err
	}
	if f := c.String("format"); f != "table" && f != "csv" {
		return fmt.Errorf("--format %q: want table or csv", f)
	}
	cfg.Program = cfg.Gorun
	if cfg.RemoteGorun != "" && len(cfg.Hosts) > 0 {
		cfg.Program = cfg.RemoteGorun
	}
	cfg.Args = []string{benchRankCommand, "--sizes", c.String("sizes"), "--target", c.Duration("target").String(),
		"--colocated-hubs", strconv.Itoa(c.Int("colocated-hubs")), "--format", c.String("format"), "--partition", c.String("partition")}
	cfg.Strategy, cfg.TagOutput, cfg.Stdin = "hub", false, nil
	end, err := startAgents(c, &cfg)
	if err != nil {
		return err
	}
	defer end()
	return runJob(cfg)
}

func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := bench.ParseSize(f)
		if err != nil {
			return nil, fmt.Errorf("--sizes: %w", err)
		}
		out = append(out, n)
	}
	return out, nil
}

// benchRank is one rank of `gorun bench`.
func benchRank(c *cli.Context) error {
	sizes, err := parseSizes(c.String("sizes"))
	if err != nil {
		return err
	}
	cfg, err := collective.ConfigFromEnv(os.LookupEnv)
	if err != nil {
		return err
	}
	cfg.Strategy, cfg.ColocatedHubs = collective.StrategyHub, min(c.Int("colocated-hubs"), cfg.Size)
	if cfg.HubPartitionBytes, err = bench.ParseSize(c.String("partition")); err != nil {
		return fmt.Errorf("--partition: %w", err)
	}
	ctx := context.Background()
	comm, err := collective.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer comm.Close()
	pairs, err := bench.Compare(ctx, comm, sizes, c.Duration("target"))
	if err != nil {
		return err
	}
	if comm.Rank() != 0 {
		return nil
	}
	if c.String("format") == "csv" {
		return bench.WriteCSV(os.Stdout, pairs, comm.Size())
	}
	return bench.WriteComparison(os.Stdout, pairs, comm.Size())
}

// exportVar turns -x VAR or -x VAR=value into VAR=value.
func exportVar(x string) (string, error) {
	name, _, hasValue := strings.Cut(x, "=")
	if name == "" || strings.ContainsAny(name, " \t") {
		return "", fmt.Errorf("-x %q: bad variable name", x)
	}
	if hasValue {
		return x, nil
	}
	v, ok := os.LookupEnv(name)
	if !ok {
		return "", fmt.Errorf("-x %s: not set in gorun's environment", name)
	}
	return name + "=" + v, nil
}

// runAgent is `gorun __agent`, which the launcher starts on every host.
func runAgent(c *cli.Context) error {
	// The launcher forwards signals; the terminal's Ctrl-C, a hang-up and
	// a broken pipe are not for the agent. They are caught and dropped, not
	// ignored: an ignored signal would stay ignored in the ranks it execs.
	// SIGTERM ends its ranks, then the agent.
	drop := make(chan os.Signal, 8)
	signal.Notify(drop, syscall.SIGINT, syscall.SIGHUP, syscall.SIGPIPE)
	go func() {
		for range drop {
		}
	}()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	cfg := agent.Config{In: os.Stdin, Out: os.Stdout, Environ: os.Environ()}
	if exe, err := os.Executable(); err == nil {
		cfg.Sentinel = []string{exe, launcher.SentinelCommandName}
	}
	err := agent.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gorun agent: %v\n", err)
		return exitError{1}
	}
	return nil
}

// hub runs one dedicated ParamHub process for the launcher.
func hub(c *cli.Context) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	cfg, err := ps.HubConfigFromEnv(os.LookupEnv)
	if err != nil {
		return err
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	st, err := ps.Serve(ctx, cfg, time.Second)
	if err != nil {
		return err
	}
	if os.Getenv(jobenv.HubStatsVar) == "1" {
		fmt.Fprintf(os.Stderr, "gorun hub %d: done; %d bytes in, %d bytes out, %d requests\n", cfg.Index, st.BytesIn, st.BytesOut, st.Requests)
	}
	return nil
}
