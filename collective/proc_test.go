package collective_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math"
	"math/big"
	"math/bits"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/collective"
	"github.com/gorun/gorun/internal/conformance"
	"github.com/gorun/gorun/internal/jobenv"
	"github.com/gorun/gorun/internal/jobtest"
	"github.com/gorun/gorun/internal/proctest"
	"github.com/gorun/gorun/launcher"
	"github.com/gorun/gorun/ps"
)

// The test binary doubles as gorun's agent and as the rank program, so the
// tests below start real processes that talk over real TCP.
func TestMain(m *testing.M) {
	if code, ok := jobtest.Dispatch(os.Stdout); ok {
		os.Exit(code)
	}
	if mode := os.Getenv("GORUN_TEST_RANK"); mode != "" {
		os.Exit(rankMain(mode))
	}
	os.Exit(m.Run())
}

// sleepInOwnCode is a rank busy outside gorun's collectives, forever.
func sleepInOwnCode() {
	for {
		time.Sleep(time.Hour)
	}
}

func rankMain(mode string) int {
	ctx := context.Background()
	cfg, err := collective.ConfigFromEnv(os.LookupEnv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "config:", err)
		return 2
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := collective.New(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "join:", err)
		return 2
	}
	defer c.Close()
	switch mode {
	case "verify":
		if err := conformance.Run(ctx, c, 42, 40); err != nil {
			fmt.Fprintf(os.Stderr, "FAIL rank %d: %v\n", c.Rank(), err)
			return 1
		}
		if h := c.Hub(); h != nil {
			fmt.Printf("SHMHUBS %v\n", h.SharedMemoryHubs())
		}
		fmt.Println("OK")
		return 0
	case "kill", "stop", "kill-handles":
		// Survivors must live to report, even when gorun starts ending
		// the job because the victim died first.
		signal.Notify(make(chan os.Signal, 1), syscall.SIGTERM)
		sig := map[string]syscall.Signal{"kill": syscall.SIGKILL, "stop": syscall.SIGSTOP, "kill-handles": syscall.SIGKILL}[mode]
		drill := conformance.Drill
		if mode == "kill-handles" {
			drill = conformance.DrillHandles
		}
		at, err := drill(ctx, c, sig, 64, func(s string) { fmt.Println(s) })
		fmt.Printf("LOST %d %v\n", at.UnixNano(), err)
		return 3
	case "pause":
		// The last rank is stopped three times for pauseFor (less than the
		// confirmation window) by a shell of its own, while every rank
		// all-reduces; every sum is checked, and no rank may be lost.
		const pauseFor = 900 * time.Millisecond
		buf := make([]float64, 1031)
		n := c.Size()
		for iter := range 60 {
			if c.Rank() == n-1 && iter%20 == 5 {
				pid := os.Getpid()
				sh := exec.Command("sh", "-c", fmt.Sprintf("kill -STOP %d; sleep %.3f; kill -CONT %d", pid, pauseFor.Seconds(), pid))
				if err := sh.Start(); err != nil {
					fmt.Fprintln(os.Stderr, err)
					return 1
				}
				fmt.Printf("PAUSE %d\n", iter)
				time.Sleep(pauseFor / 2) // the stop lands in here
				if err := sh.Wait(); err != nil {
					fmt.Fprintln(os.Stderr, "pause:", err)
					return 1
				}
			}
			for i := range buf {
				buf[i] = float64(c.Rank()*len(buf) + i + iter)
			}
			if err := collective.AllReduce(ctx, c, buf, collective.Sum); err != nil {
				fmt.Fprintln(os.Stderr, "all-reduce:", err)
				return 1
			}
			for i, v := range buf {
				if want := float64(len(buf)*n*(n-1)/2 + n*(i+iter)); v != want {
					fmt.Fprintf(os.Stderr, "iteration %d element %d: %v, want %v\n", iter, i, v, want)
					return 1
				}
			}
		}
		fmt.Println("PAUSED OK")
		return 0
	case "elastic", "elastic-stop":
		// The last rank dies (or freezes) before its 11th push; with
		// --hub-elastic the others finish every BSP round without it.
		hub := c.Hub()
		if err := hub.Declare(ctx, "w", ps.KeyConfig{Len: 1}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		v := []float64{0}
		for iter := range 40 {
			if c.Rank() == c.Size()-1 && iter == 10 {
				sig := syscall.SIGKILL
				if mode == "elastic-stop" {
					fmt.Printf("VICTIM %d\n", os.Getpid())
					sig = syscall.SIGSTOP
				}
				_ = syscall.Kill(os.Getpid(), sig)
				select {} // not one more push while the signal takes hold
			}
			if err := ps.PushPull(hub, "w", []float64{1}, 1, v).Wait(ctx); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
		fmt.Printf("ELASTIC %v\n", v[0])
		return 0
	case "wire":
		// A float32 all-reduce in the wire format GORUN_WIRE names, of
		// inputs every rank can make for every rank: the sum within the
		// format's bound of the exact one, and a digest of its bits that
		// must be the same on every rank.
		const n = 100_003
		mine := make([]float32, n)
		exact, abs := make([]float64, n), make([]float64, n)
		for r := range c.Size() {
			rng := rand.New(rand.NewPCG(uint64(r), 36))
			for i := range n {
				v := float32(rng.NormFloat64() * 10)
				exact[i] += float64(v)
				abs[i] += math.Abs(float64(v))
				if r == c.Rank() {
					mine[i] = v
				}
			}
		}
		if err := collective.AllReduce(ctx, c, mine, collective.Sum); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		u := math.Ldexp(1, -11)
		if cfg.Wire == collective.WireBF16 {
			u = math.Ldexp(1, -8)
		}
		h := fnv.New64a()
		worst, changed := 0.0, 0
		for i, v := range mine {
			bound := float64(c.Size())*(u+math.Ldexp(1, -24))*abs[i]*1.125 + float64(c.Size())*math.Ldexp(1, -25)
			d := math.Abs(float64(v) - exact[i])
			if d > bound {
				fmt.Fprintf(os.Stderr, "element %d: %v, exact %v, off by %g > %g\n", i, v, exact[i], d, bound)
				return 1
			}
			worst = max(worst, d/bound)
			if float64(v) != float64(float32(exact[i])) {
				changed++
			}
			_ = binary.Write(h, binary.LittleEndian, math.Float32bits(v))
		}
		fmt.Printf("WIRE %v digest %x worst %.2f of the bound, %d of %d not the float32 sum, strategy %v\n", cfg.Wire, h.Sum64(), worst, changed, n, c.Strategy())
		return 0
	case "exact":
		// Exact float32 sums (GORUN_EXACT=1) of values over many binades
		// with cancellation: AllReduce, GroupAllReduce in pieces,
		// StartAllReduce and a small AllReduce give the same bits, within the stated bound of
		// the exact sum (math/big), and a digest that must be the same
		// on every rank and under every algorithm and strategy.
		const n = 100_003
		rows := make([][]float32, c.Size())
		for r := range rows {
			rng := rand.New(rand.NewPCG(uint64(r), 47))
			rows[r] = make([]float32, n)
			for i := range n {
				v := float32(math.Ldexp(rng.NormFloat64(), rng.IntN(60)-30))
				if i%5 == 0 && r%2 == 1 {
					v = -rows[r-1][i] // cancels the rank before's
				}
				rows[r][i] = v
			}
		}
		a, b, d := slices.Clone(rows[c.Rank()]), slices.Clone(rows[c.Rank()]), slices.Clone(rows[c.Rank()])
		if err := collective.AllReduce(ctx, c, a, collective.Sum); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if err := collective.GroupAllReduce(ctx, c, [][]float32{b[:n/3], b[n/3:]}, collective.Sum); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if err := collective.StartAllReduce(ctx, c, d, collective.Sum).Wait(ctx); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		// A small buffer: gathered and summed by each rank, in one round;
		// the same bits as the two rounds gave.
		small := slices.Clone(rows[c.Rank()][:1000])
		if err := collective.AllReduce(ctx, c, small, collective.Sum); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		for i, v := range small {
			if math.Float32bits(v) != math.Float32bits(a[i]) {
				fmt.Fprintf(os.Stderr, "element %d: %v in a small buffer, %v in the whole\n", i, v, a[i])
				return 1
			}
		}
		h := fnv.New64a()
		hb := bits.Len(uint(c.Size()))
		for i, v := range a {
			if math.Float32bits(v) != math.Float32bits(b[i]) || math.Float32bits(v) != math.Float32bits(d[i]) {
				fmt.Fprintf(os.Stderr, "element %d: %v alone, %v fused, %v started\n", i, v, b[i], d[i])
				return 1
			}
			exact, top := new(big.Float).SetPrec(1024), 0.0
			for r := range rows {
				exact.Add(exact, big.NewFloat(float64(rows[r][i])))
				top = max(top, math.Abs(float64(rows[r][i])))
			}
			_, e := math.Frexp(top)
			_, eg := math.Frexp(math.Abs(float64(v)))
			bound := math.Ldexp(float64(c.Size()), e-32+hb) + math.Ldexp(1, max(eg-25, -150))
			diff, _ := new(big.Float).Sub(big.NewFloat(float64(v)), exact).Float64()
			if math.Abs(diff) > bound {
				fmt.Fprintf(os.Stderr, "element %d: %v, exact %v, off by %g > %g\n", i, v, exact, diff, bound)
				return 1
			}
			_ = binary.Write(h, binary.LittleEndian, math.Float32bits(v))
		}
		fmt.Printf("EXACT digest %x strategy %v\n", h.Sum64(), c.Strategy())
		return 0
	case "stall":
		// Five all-reduces, then the last rank stays in its own code for
		// good while the others wait in the sixth.
		buf := make([]float32, 4096)
		for i := range 6 {
			if i == 5 && c.Rank() == c.Size()-1 {
				fmt.Println("STALLING")
				sleepInOwnCode()
			}
			if err := collective.AllReduce(ctx, c, buf, collective.Sum); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
		return 0
	case "litter":
		// Rank 1 leaves a segment file behind, as a rank killed between
		// creating a segment and its peer mapping it would, and dies.
		if c.Rank() == 1 {
			f := filepath.Join("/dev/shm", jobenv.ShmPrefix+os.Getenv("GORUN_JOB_ID")+"-1-2-litter")
			if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 2
			}
			fmt.Printf("LITTER %s\n", f)
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		_ = c.Barrier(ctx)
		return 3
	case "ring-kill", "ring-stop":
		// The last rank dies (or freezes) in its 10th all-reduce; with
		// --elastic the others get ErrViewChanged once, take the step
		// from the view's first rank and finish on the new view.
		sig := map[string]syscall.Signal{"ring-kill": syscall.SIGKILL, "ring-stop": syscall.SIGSTOP}[mode]
		if err := conformance.ElasticDrill(ctx, c, conformance.ElasticOptions{How: sig}, func(s string) { fmt.Println(s) }); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	case "ring-rejoin-die", "ring-rejoin-freeze":
		// The victim's first restart dies (or freezes, and is fenced on
		// the survivors' word) as it takes the state; its second joins.
		how := map[string]syscall.Signal{"ring-rejoin-die": syscall.SIGKILL, "ring-rejoin-freeze": syscall.SIGSTOP}[mode]
		if err := conformance.ElasticDrill(ctx, c, conformance.ElasticOptions{How: syscall.SIGKILL, Pause: 10 * time.Millisecond, Rejoin: true, DieOnRestart: 1, DieHow: how}, func(s string) { fmt.Println(s) }); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	case "ring-rejoin", "ring-rejoin-stop":
		// As ring-kill (ring-stop), under --max-restarts: the victim's
		// restarted process joins the survivors, and everyone finishes
		// on the whole view again.
		sig := map[string]syscall.Signal{"ring-rejoin": syscall.SIGKILL, "ring-rejoin-stop": syscall.SIGSTOP}[mode]
		if err := conformance.ElasticDrill(ctx, c, conformance.ElasticOptions{How: sig, Pause: 10 * time.Millisecond, Rejoin: true}, func(s string) { fmt.Println(s) }); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	case "hubkill":
		// Rank 0 kills hub 0's process in the middle of a 64 MiB
		// all-reduce; every rank must report the lost hub.
		signal.Notify(make(chan os.Signal, 1), syscall.SIGTERM)
		buf := make([]float32, 16<<20)
		for iter := 0; iter < 1000; iter++ {
			if c.Rank() == 0 && iter == 2 {
				pid, err := hubPid(os.Getenv("GORUN_JOB_ID"), 0)
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					return 2
				}
				go func() {
					time.Sleep(20 * time.Millisecond)
					fmt.Printf("STRIKE %d\n", time.Now().UnixNano())
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}()
			}
			if err := collective.AllReduce(ctx, c, buf, collective.Sum); err != nil {
				fmt.Printf("LOST %d %v\n", time.Now().UnixNano(), err)
				return 3
			}
		}
		return 2
	}
	return 2
}

// hubPid finds the process of hub index of job in /proc.
func hubPid(job string, index int) (int, error) {
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + d.Name() + "/cmdline")
		env, _ := os.ReadFile("/proc/" + d.Name() + "/environ")
		args := strings.Split(string(cmdline), "\x00")
		vars := strings.Split(string(env), "\x00")
		if len(args) > 1 && args[1] == launcher.HubCommandName && slices.Contains(vars, "GORUN_JOB_ID="+job) && slices.Contains(vars, "GORUN_HUB_INDEX="+strconv.Itoa(index)) {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no process for hub %d of job %s", index, job)
}

func launch(t *testing.T, np int, mode string, grace time.Duration) (launcher.Result, string) {
	t.Helper()
	return launchWith(t, np, mode, grace, func(*launcher.Config) {})
}

func launchWith(t *testing.T, np int, mode string, grace time.Duration, set func(*launcher.Config)) (launcher.Result, string) {
	t.Helper()
	proctest.SkipShort(t)
	cfg := launcher.DefaultConfig()
	cfg.NP, cfg.Program, cfg.Gorun = np, os.Args[0], os.Args[0]
	cfg.Env = []string{"GORUN_TEST_RANK=" + mode, "GORACE=atexit_sleep_ms=0"}
	cfg.Grace, cfg.Timeout = grace, 3*time.Minute
	var out proctest.Buffer
	cfg.Stdout, cfg.Stderr = &out, &out
	set(&cfg)
	res, err := launcher.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return res, out.String()
}

// TestProcessesWire: float32 all-reduces of 100 003 elements between
// real processes in fp16 and bf16 (GORUN_WIRE, as gorun --wire sets it),
// over shared memory and over TCP, with the ring and with the hub
// strategy (two colocated hubs): every rank's sum within the format's
// bound of the exact sum, the same bits on every rank, and not the plain
// float32 sums (the format was used).
func TestProcessesWire(t *testing.T) {
	for _, strategy := range []string{"ring", "hub"} {
		for _, wire := range []string{"fp16", "bf16"} {
			for _, shm := range []string{"1", "0"} {
				what := fmt.Sprintf("%s %s shm %s", strategy, wire, shm)
				res, out := launchWith(t, 3, "wire", 5*time.Second, func(c *launcher.Config) {
					c.Env = append(c.Env, "GORUN_WIRE="+wire, "GORUN_SHM="+shm, "GORUN_STRATEGY="+strategy)
					if strategy == "hub" {
						c.Env = append(c.Env, "GORUN_COLOCATED_HUBS=2")
					}
				})
				lines := regexp.MustCompile(`WIRE (\S+) digest (\S+) .*, (\d+) of 100003 not the float32 sum, strategy (\S+)`).FindAllStringSubmatch(out, -1)
				if res.ExitCode != 0 || len(lines) != 3 {
					t.Fatalf("%s: exit %d:\n%s", what, res.ExitCode, out)
				}
				for _, l := range lines {
					if changed, _ := strconv.Atoi(l[3]); l[1] != wire || l[2] != lines[0][2] || changed < 50000 || l[4] != strategy {
						t.Fatalf("%s: ranks differ, or the format or strategy was not used:\n%s", what, out)
					}
				}
				t.Logf("%s: %s", what, strings.TrimSpace(strings.SplitN(out, "\n", 2)[0]))
			}
		}
	}
}

// TestProcessesExact: exact float32 sums (GORUN_EXACT=1, as gorun --exact
// sets it) between 3 real processes, over shared memory and TCP, under
// the ring, halving and direct algorithms and the hub strategy: within
// the bound of the exact sum, and the same bits on every rank and in
// every one of these runs.
func TestProcessesExact(t *testing.T) {
	digests := map[string]bool{}
	for _, run := range []struct{ strategy, algo, shm string }{
		{"ring", "auto", "1"}, {"ring", "ring", "0"}, {"ring", "halving", "1"}, {"ring", "direct", "0"}, {"hub", "auto", "1"}, {"hub", "auto", "0"},
	} {
		what := fmt.Sprintf("%s %s shm %s", run.strategy, run.algo, run.shm)
		res, out := launchWith(t, 3, "exact", 5*time.Second, func(c *launcher.Config) {
			c.Env = append(c.Env, "GORUN_EXACT=1", "GORUN_SHM="+run.shm, "GORUN_STRATEGY="+run.strategy, "GORUN_ALGORITHM="+run.algo)
			if run.strategy == "hub" {
				c.Env = append(c.Env, "GORUN_COLOCATED_HUBS=2")
			}
		})
		lines := regexp.MustCompile(`EXACT digest (\S+) strategy (\S+)`).FindAllStringSubmatch(out, -1)
		if res.ExitCode != 0 || len(lines) != 3 {
			t.Fatalf("%s: exit %d:\n%s", what, res.ExitCode, out)
		}
		for _, l := range lines {
			if l[2] != run.strategy {
				t.Fatalf("%s: strategy %s was not used:\n%s", what, run.strategy, out)
			}
			digests[l[1]] = true
		}
		if len(digests) != 1 {
			t.Fatalf("%s: the bits differ from an earlier run's (digests %v):\n%s", what, digests, out)
		}
	}
}

// TestProcessesVerify runs the reference-checked workload in 1 to 9 real
// processes.
func TestProcessesVerify(t *testing.T) {
	for _, np := range []int{1, 2, 3, 4, 5, 7, 9} {
		res, out := launch(t, np, "verify", 5*time.Second)
		if res.ExitCode != 0 || strings.Count(out, "OK\n") != np {
			t.Fatalf("np %d: exit %d:\n%s", np, res.ExitCode, out)
		}
	}
}

// TestProcessesAlgorithm forces each large-buffer algorithm through the
// environment, as a user does with gorun -x GORUN_ALGORITHM=..., and runs
// the reference-checked workload in real processes on shared memory and
// on TCP.
func TestProcessesAlgorithm(t *testing.T) {
	for _, c := range []struct {
		algo string
		np   int
		shm  string
	}{{"halving", 4, "1"}, {"halving", 6, "0"}, {"ring", 5, "1"}, {"hierarchical", 4, "0"}} {
		res, out := launchWith(t, c.np, "verify", 5*time.Second, func(cfg *launcher.Config) {
			cfg.Env = append(cfg.Env, "GORUN_ALGORITHM="+c.algo, "GORUN_SHM="+c.shm)
		})
		if res.ExitCode != 0 || strings.Count(out, "OK\n") != c.np {
			t.Fatalf("%s np %d shm %s: exit %d:\n%s", c.algo, c.np, c.shm, res.ExitCode, out)
		}
	}
	res, out := launchWith(t, 2, "verify", 5*time.Second, func(cfg *launcher.Config) {
		cfg.Env = append(cfg.Env, "GORUN_ALGORITHM=tree")
	})
	if res.ExitCode == 0 || !strings.Contains(out, "GORUN_ALGORITHM") {
		t.Fatalf("an unknown GORUN_ALGORITHM ran (exit %d):\n%s", res.ExitCode, out)
	}
}

var (
	strikeRE = regexp.MustCompile(`\[(\d+)\] STRIKE (\d+)`)
	lostRE   = regexp.MustCompile(`\[(\d+)\] LOST (\d+) (.*)`)
)

// reports returns when a drill struck (nanoseconds) and the 3 reports
// of what the others saw: rank, time, error.
func reports(t *testing.T, out string) (int64, [][]string) {
	t.Helper()
	s := strikeRE.FindStringSubmatch(out)
	if s == nil {
		t.Fatalf("no strike:\n%s", out)
	}
	strike, _ := strconv.ParseInt(s[2], 10, 64)
	lost := lostRE.FindAllStringSubmatch(out, -1)
	if len(lost) != 3 {
		t.Fatalf("%d ranks reported, want 3:\n%s", len(lost), out)
	}
	return strike, lost
}

// drill runs a fault drill on 4 processes: rank 3 dies (or freezes) in the
// middle of a 64 MiB all-reduce. Every survivor must report ErrPeerLost
// naming rank 3 within bound; the job must end non-zero.
func drill(t *testing.T, mode string, bound time.Duration, set func(*launcher.Config)) {
	res, out := launchWith(t, 4, mode, 3*time.Second, set)
	if res.ExitCode == 0 {
		t.Fatalf("job succeeded:\n%s", out)
	}
	noSegments(t, res.JobID)
	if s := strikeRE.FindStringSubmatch(out); s == nil || s[1] != "3" {
		t.Fatalf("no strike by rank 3:\n%s", out)
	}
	strike, lost := reports(t, out)
	evidence := false
	for _, l := range lost {
		at, _ := strconv.ParseInt(l[2], 10, 64)
		delay := time.Duration(at - strike)
		t.Logf("%s: rank %s saw the loss after %v: %s", mode, l[1], delay, l[3])
		evidence = evidence || strings.Contains(l[3], "no answer on its data connection") || strings.Contains(l[3], "did not answer a connection")
		if !strings.Contains(l[3], "rank 3 lost") || !strings.Contains(l[3], "peer lost") && !strings.Contains(l[3], "lost:") {
			t.Fatalf("rank %s: error does not name rank 3: %s", l[1], l[3])
		}
		if delay > bound {
			t.Fatalf("rank %s noticed after %v (bound %v)", l[1], delay, bound)
		}
	}
	// A frozen rank is lost on evidence: gossip's verdict, and no answer on
	// its data connection (or to a connection) for a window. Every survivor's error names it;
	// the one that confirmed it says why.
	if mode == "stop" && !evidence {
		t.Fatalf("no survivor names the evidence (no answer for a window) against rank 3:\n%s", out)
	}
}

// Bounds are generous (the machines are small and noisy); the measured
// delays are logged. Typical: tens of ms for kill, under a second for stop.
func TestKillDetected(t *testing.T) { drill(t, "kill", 5*time.Second, func(*launcher.Config) {}) }

// TestKillHandlesDetected: a rank killed while four nonblocking
// all-reduces are outstanding on every rank fails each survivor's handles
// naming it, within seconds.
func TestKillHandlesDetected(t *testing.T) {
	drill(t, "kill-handles", 5*time.Second, func(*launcher.Config) {})
}

func TestStopDetected(t *testing.T) { drill(t, "stop", 8*time.Second, func(*launcher.Config) {}) }

// TestBriefStopSurvives: a rank that stops running for less than the
// confirmation window (ConfirmTimeout, 1 s) is never declared lost: to be
// lost, a peer must stay silent (no frame, no answer to a ping) for a whole
// window after gossip's verdict. Rank 3 of 4 is stopped three times for
// 0.9 s (SIGSTOP, then SIGCONT) while the ranks all-reduce; the job ends
// with every sum right. TestStopDetected is the other side: a rank stopped
// for good is named within seconds.
func TestBriefStopSurvives(t *testing.T) {
	for _, shm := range []string{"1", "0"} {
		res, out := launchWith(t, 4, "pause", 3*time.Second, func(c *launcher.Config) {
			c.Env = append(c.Env, "GORUN_SHM="+shm)
		})
		if res.ExitCode != 0 || strings.Count(out, "PAUSED OK") != 4 || strings.Count(out, "PAUSE ") != 3 {
			t.Fatalf("shm %s: exit %d:\n%s", shm, res.ExitCode, out)
		}
	}
}

// noSegments fails if job left a shared memory file in /dev/shm.
func noSegments(t *testing.T, job string) {
	t.Helper()
	if job == "" {
		t.Fatal("no job id")
	}
	if left, _ := filepath.Glob(jobenv.ShmPattern("/dev/shm", job)); len(left) > 0 {
		t.Fatalf("shared memory files outlived job %s: %v", job, left)
	}
}

// TestSegmentsRemoved: a rank killed while its segment file still has a
// name leaves it behind; the host's agent removes it when the job's ranks
// are gone. After a normal end there are none either.
func TestSegmentsRemoved(t *testing.T) {
	res, out := launch(t, 3, "litter", 3*time.Second)
	if res.ExitCode == 0 || !strings.Contains(out, "LITTER ") {
		t.Fatalf("exit %d:\n%s", res.ExitCode, out)
	}
	noSegments(t, res.JobID)
	res, out = launch(t, 2, "verify", 3*time.Second)
	if res.ExitCode != 0 {
		t.Fatalf("exit %d:\n%s", res.ExitCode, out)
	}
	noSegments(t, res.JobID)
}

func hubs(k int) func(*launcher.Config) {
	return func(cfg *launcher.Config) { cfg.Strategy, cfg.Hubs = "hub", k }
}

// TestProcessesHubVerify runs the reference-checked workload with the hub
// strategy through 2 dedicated hub processes started by the launcher,
// which share memory with every rank (one host), and again with
// GORUN_SHM=0.
func TestProcessesHubVerify(t *testing.T) {
	for _, shm := range []bool{true, false} {
		res, out := launchWith(t, 4, "verify", 5*time.Second, func(cfg *launcher.Config) {
			hubs(2)(cfg)
			if !shm {
				cfg.Env = append(cfg.Env, "GORUN_SHM=0")
			}
		})
		if res.ExitCode != 0 || strings.Count(out, "OK\n") != 4 {
			t.Fatalf("exit %d:\n%s", res.ExitCode, out)
		}
		want := "SHMHUBS []"
		if shm {
			want = "SHMHUBS [0 1]"
		}
		if strings.Count(out, want+"\n") != 4 {
			t.Fatalf("shm %v: want every rank to say %q:\n%s", shm, want, out)
		}
		noSegments(t, res.JobID)
		checkHubsServed(t, out)
	}
}

func checkHubsServed(t *testing.T, out string) {
	t.Helper()
	for h := range 2 {
		m := regexp.MustCompile(fmt.Sprintf(`\[hub %d\] hub %d served (\d+) requests`, h, h)).FindStringSubmatch(out)
		if m == nil || m[1] == "0" {
			t.Fatalf("hub %d served nothing:\n%s", h, out)
		}
	}
}

// TestHubKillDetected: a rank killed mid all-reduce under the hub
// strategy (one dedicated hub) is named by every survivor.
func TestHubKillDetected(t *testing.T) { drill(t, "kill", 5*time.Second, hubs(1)) }

// TestHubStopDetected: a rank frozen under the hub strategy is found by
// gossip, and that wakes every survivor waiting on the hub.
func TestHubStopDetected(t *testing.T) { drill(t, "stop", 8*time.Second, hubs(1)) }

// launchElastic runs 4 ranks of mode under gorun --elastic with
// --max-restarts restarts and GORUN_SHM=shm, and fails the test unless
// gorun exits 0.
func launchElastic(t *testing.T, mode, shm string, restarts int) (launcher.Result, string) {
	t.Helper()
	res, out := launchWith(t, 4, mode, 3*time.Second, func(cfg *launcher.Config) {
		cfg.Elastic, cfg.MaxRestarts = true, restarts
		cfg.Env = append(cfg.Env, "GORUN_SHM="+shm)
	})
	if res.ExitCode != 0 {
		t.Fatalf("%s shm %s: exit %d (%s):\n%s", mode, shm, res.ExitCode, res.Failure, out)
	}
	return res, out
}

// TestElasticRing: under gorun --elastic a rank killed (or frozen) in the
// middle of an all-reduce does not end the job: every survivor gets one
// ErrViewChanged, resynchronises, and finishes with exact sums over the
// three survivors; gorun exits 0 and says which rank it went on without.
func TestElasticRing(t *testing.T) {
	for _, c := range []struct {
		mode string
		shm  string
	}{{"ring-kill", "1"}, {"ring-kill", "0"}, {"ring-stop", "1"}} {
		res, out := launchElastic(t, c.mode, c.shm, 0)
		if n := strings.Count(out, "DONE changes=1 view={1 [0 1 2]} size=3\n"); n != 3 {
			t.Fatalf("%s shm %s: %d survivors finished on view 1 with one change, want 3:\n%s", c.mode, c.shm, n, out)
		}
		if !strings.Contains(out, "--elastic") || !strings.Contains(out, "rank 3") {
			t.Fatalf("%s: gorun did not say it went on without rank 3:\n%s", c.mode, out)
		}
		noSegments(t, res.JobID)
		strike := regexp.MustCompile(`STRIKE (\d+)`).FindStringSubmatch(out)
		resumed := regexp.MustCompile(`RESUMED (\d+)`).FindAllStringSubmatch(out, -1)
		if strike != nil && len(resumed) == 3 {
			s0, _ := strconv.ParseInt(strike[1], 10, 64)
			var worst int64
			for _, r := range resumed {
				at, _ := strconv.ParseInt(r[1], 10, 64)
				worst = max(worst, at-s0)
			}
			t.Logf("%s shm %s: every survivor completed a collective on the new view %v after the strike", c.mode, c.shm, time.Duration(worst))
		}
	}
}

// TestElasticRejoinProcesses: under gorun --elastic --max-restarts 1, the
// last of 4 ranks is killed (or frozen, and fenced) in the middle of an
// all-reduce; gorun restarts it, it joins the survivors at their next
// collective, takes the step from them, and all 4 finish with exact sums
// on view 2 (the loss, then the join); gorun exits 0 and names the
// restart.
func TestElasticRejoinProcesses(t *testing.T) {
	for _, c := range []struct {
		mode string
		shm  string
	}{{"ring-rejoin", "1"}, {"ring-rejoin", "0"}, {"ring-rejoin-stop", "1"}} {
		// A second restart is allowed: under a heavy load a survivor
		// can suspect the restarted rank falsely (a broken pipe on a
		// connection it made while joining); gorun then fences it, and it
		// comes back once more.
		res, out := launchElastic(t, c.mode, c.shm, 2)
		done := regexp.MustCompile(`(?m)^\[\d\] DONE changes=\d+ view=\{(\d+) \[0 1 2 3\]\} size=4$`).FindAllStringSubmatch(out, -1)
		if len(done) != 4 || done[0][1] < "2" || !strings.Contains(out, "[3] BACK ") || !strings.Contains(out, "rank 3 restarted") {
			t.Fatalf("%s shm %s: want all 4 ranks done on one view with all 4 after rank 3 came back:\n%s", c.mode, c.shm, out)
		}
		for _, d := range done {
			if d[1] != done[0][1] {
				t.Fatalf("%s shm %s: ranks finished on different views:\n%s", c.mode, c.shm, out)
			}
		}
		if done[0][1] != "2" {
			t.Logf("%s shm %s: rank 3 came back more than once (final view %s):\n%s", c.mode, c.shm, done[0][1], out)
		}
		noSegments(t, res.JobID)
		strike := regexp.MustCompile(`STRIKE (\d+)`).FindStringSubmatch(out)
		back := regexp.MustCompile(`BACK (\d+)`).FindStringSubmatch(out)
		var stall int64
		for _, m := range regexp.MustCompile(`(?m)^\[[012]\] RECOVERED \d+ (\d+) 2$`).FindAllStringSubmatch(out, -1) {
			d, _ := strconv.ParseInt(m[1], 10, 64)
			stall = max(stall, d)
		}
		if strike != nil && back != nil {
			s0, _ := strconv.ParseInt(strike[1], 10, 64)
			b, _ := strconv.ParseInt(back[1], 10, 64)
			t.Logf("%s shm %s: from the strike to the restarted rank back in the ring %v; the survivors' longest stall at the join %v", c.mode, c.shm, time.Duration(b-s0), time.Duration(stall))
		}
	}
}

// TestElasticJoinerDies: the restarted rank dies again as it takes the
// state (in its Resync); the survivors finish that Resync without it,
// gorun restarts it a second time (--max-restarts 2), and all 4 finish
// on view 4 (loss, join, loss, join).
// A restarted rank that freezes there must be suspected again (a new
// process: its loss is news), fenced and restarted.
func TestElasticJoinerDies(t *testing.T) {
	for _, mode := range []string{"ring-rejoin-die", "ring-rejoin-freeze"} {
		res, out := launchElastic(t, mode, "1", 2)
		if n := strings.Count(out, " view={4 [0 1 2 3]} size=4\n"); n != 4 {
			t.Fatalf("%s: %d ranks finished on view 4 with all 4, want 4:\n%s", mode, n, out)
		}
		if !strings.Contains(out, "rank 3 restarted 2 times") {
			t.Fatalf("%s: gorun did not say rank 3 was restarted twice:\n%s", mode, out)
		}
		noSegments(t, res.JobID)
	}
}

// elasticRE matches a survivor's final value: 10 rounds of 4 pushes of 1,
// then 30 rounds of 3.
var elasticRE = regexp.MustCompile(`(?m)^\[\d\] ELASTIC 130$`)

// TestHubElasticJob: under --hub-elastic a rank that dies mid-training
// does not end the job: the hub finishes every BSP round from the others,
// the launcher says so, and the job succeeds.
func TestHubElasticJob(t *testing.T) {
	res, out := launchWith(t, 4, "elastic", 3*time.Second, func(cfg *launcher.Config) {
		cfg.Strategy, cfg.Hubs, cfg.HubElastic = "hub", 1, true
	})
	if res.ExitCode != 0 {
		t.Fatalf("exit %d (%s):\n%s", res.ExitCode, res.Failure, out)
	}
	if len(elasticRE.FindAllString(out, -1)) != 3 {
		t.Fatalf("want 3 survivors at 130:\n%s", out)
	}
	for _, want := range []string{"rank 3 on localhost", "--hub-elastic: the job goes on without it", "finished without 1 lost rank(s) [3]"} {
		if !strings.Contains(out, want) {
			t.Fatalf("no %q in:\n%s", want, out)
		}
	}
}

// TestHubElasticFrozenRank: a rank that freezes is found by gossip; the
// survivors tell the elastic hub, which finishes the rounds without it, so
// nobody hangs. (The launcher then waits for the frozen process, as it
// waits for any rank; the test kills it.)
func TestHubElasticFrozenRank(t *testing.T) {
	var out proctest.Buffer
	cfg := launcher.DefaultConfig()
	cfg.NP, cfg.Program, cfg.Gorun = 4, os.Args[0], os.Args[0]
	cfg.Env = []string{"GORUN_TEST_RANK=elastic-stop", "GORACE=atexit_sleep_ms=0"}
	cfg.Grace, cfg.Timeout = 3*time.Second, 2*time.Minute
	cfg.Stdout, cfg.Stderr = &out, &out
	cfg.Strategy, cfg.Hubs, cfg.HubElastic = "hub", 1, true
	done := make(chan launcher.Result, 1)
	go func() {
		res, err := launcher.Run(context.Background(), cfg)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	for deadline := time.Now().Add(time.Minute); len(elasticRE.FindAllString(out.String(), -1)) < 3; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("3 survivors did not finish at 130 within a minute:\n%s", out.String())
		}
	}
	m := regexp.MustCompile(`VICTIM (\d+)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no victim:\n%s", out.String())
	}
	pid, _ := strconv.Atoi(m[1])
	_ = syscall.Kill(pid, syscall.SIGKILL)
	if res := <-done; res.ExitCode != 0 {
		t.Fatalf("exit %d (%s):\n%s", res.ExitCode, res.Failure, out.String())
	}
}

// TestHubProcessKilled: a dedicated hub killed mid all-reduce is reported
// by every rank, and the job fails naming it.
func TestHubProcessKilled(t *testing.T) {
	res, out := launchWith(t, 3, "hubkill", 3*time.Second, hubs(2))
	if res.ExitCode == 0 || !strings.Contains(res.Failure, "hub 0") {
		t.Fatalf("exit %d, failure %q:\n%s", res.ExitCode, res.Failure, out)
	}
	strike, lost := reports(t, out)
	for _, l := range lost {
		at, _ := strconv.ParseInt(l[2], 10, 64)
		t.Logf("rank %s saw the hub's loss after %v: %s", l[1], time.Duration(at-strike), l[3])
		if !strings.Contains(l[3], "hub 0 at") || !strings.Contains(l[3], "lost") {
			t.Fatalf("rank %s: error does not name hub 0: %s", l[1], l[3])
		}
	}
}

// TestStallInspector: rank 3 stays in its own code while ranks 0-2 wait in
// all-reduce #6. gorun prints a stall line that names rank 3 as behind and
// where every rank is, before --stall-abort ends the job with 124; the
// summary holds each Go rank's goroutine dump, whose top frames show rank
// 3 in its own function and the others in AllReduce; nothing is left.
func TestStallInspector(t *testing.T) {
	res, out := launchWith(t, 4, "stall", 2*time.Second, func(c *launcher.Config) {
		c.StallWarn, c.StallAbort = time.Second, 3*time.Second
		c.OutputDir = t.TempDir()
	})
	if res.ExitCode != launcher.ExitTimeout {
		t.Fatalf("exit %d, want %d:\n%s", res.ExitCode, launcher.ExitTimeout, out)
	}
	warn := strings.Index(out, "gorun: stall: no progress for")
	abort := strings.Index(out, "(--stall-abort 3s); terminated every rank")
	if warn < 0 || abort < warn {
		t.Fatalf("no stall line before the abort:\n%s", out)
	}
	line := out[warn : warn+strings.Index(out[warn:], "\n")]
	for _, want := range []string{"behind: rank 3 (localhost)", "rank 3: not in a collective for", "(last: #5)", "ranks 0-2: allreduce #6 float32 16 KiB for"} {
		if !strings.Contains(line, want) {
			t.Fatalf("stall line lacks %q:\n%s", want, line)
		}
	}
	dumps := out[strings.Index(out, "goroutine dumps"):]
	if !strings.Contains(dumps, "goroutine dumps (SIGQUIT before the stop) of ranks 0-3") {
		t.Fatalf("dumps of every rank:\n%s", out)
	}
	for r := range 4 {
		i := strings.Index(dumps, fmt.Sprintf("  rank %d on localhost", r))
		if i < 0 {
			t.Fatalf("no dump of rank %d:\n%s", r, dumps)
		}
		block := dumps[i:]
		if j := strings.Index(block[2:], "\n  rank "); j > 0 {
			block = block[:j+2]
		}
		want := "collective.AllReduce"
		if r == 3 {
			want = "sleepInOwnCode"
		}
		if !strings.Contains(block, want) {
			t.Fatalf("rank %d's top frames lack %s:\n%s", r, want, block)
		}
	}
	proctest.WaitFor(t, 5*time.Second, func() bool { return len(jobProcs(res.JobID)) == 0 }, "no process of the job left")
}

// jobProcs lists the pids of the processes whose environment names job.
func jobProcs(job string) []string {
	var pids []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err == nil && strings.Contains(string(env), "GORUN_JOB_ID="+job+"\x00") {
			pids = append(pids, e.Name())
		}
	}
	return pids
}
