// Command hubpush measures ParamHub's sparse pushes (docs/paramhub.md,
// "Sparse pushes") between real processes: for each setting, dense or
// sparse (ps.KeyConfig.Sparse, in ps.ParseSparse's form), every rank
// declares a key of -n float32 elements (or one key a layer, -layers) and
// push-pulls a gradient-like vector through the hubs, round after round,
// under BSP. Run it under gorun with the hub strategy:
//
//	gorun -np 4 --strategy hub ./hubpush
//	gorun -np 4 --strategy hub ./hubpush -compress topk:0.01,codec=raw -target 5s
//	gorun -np 4 --hubs 4 --strategy hub ./hubpush -partition 1MiB -layers 2304K,576K,147K,4K
//
// The gradient is new every round: normal values, one in 20 scaled by up
// to 100 (a heavy tail), drawn from -seed, the rank and the round, the
// same for every setting. The settings (-settings, or the one -compress)
// take turns in blocks of -block rounds, the order rotating block by
// block, so that they see the same state of the machine. A round is a
// barrier (not timed), then PushPull of every key and Wait on each (timed:
// a sparse push's selection on the worker is part of it). The first
// -warmup rounds of each setting are not counted; then the job times at
// least -rounds rounds a setting, and with -target until they add up to
// -target a setting (on rank 0's clock). Every setting runs as many
// rounds as the others.
//
// Rank 0 prints a line per setting, its columns:
//
//   - setting: ps.SparseConfig.String, "dense" for dense pushes;
//   - rounds: timed rounds;
//   - median_us, min_us: the median and the fastest round, each round
//     timed by its slowest rank;
//   - push_B, pull_B: payload bytes a worker sent to and received from
//     the hubs a round (ps.Client.Tick's BytesSent and BytesRecv, frame
//     headers not counted), the mean over workers and timed rounds;
//   - resid/grad: at the end, the norm of the error-feedback residuals
//     over the norm of the last round's gradients, over every worker and
//     key ("-" without error feedback);
//   - check: with -check, the largest gap between the pulled value and
//     the sum of every worker's gradients less their residuals, in units
//     of what rounding allows (at most 1, or the job fails; "-" without
//     -check or without error feedback, where nothing tells what a push
//     left out).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/gorun/gorun/bench"
	"github.com/gorun/gorun/collective"
	"github.com/gorun/gorun/ps"
)

const defaultSettings = "dense,topk:0.01,topk:0.1,randk:0.01,randk:0.1"

func main() { os.Exit(run(os.Args[1:], os.Stdout)) }

type options struct {
	layers        []int
	settings      []ps.SparseConfig
	rounds        int
	warmup, block int
	target        time.Duration
	partition     int // bytes; 0: the library's
	seed          uint64
	check         bool
}

func run(args []string, out io.Writer) int {
	o, err := parseFlags(args, os.Stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "hubpush:", err)
		}
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := measure(ctx, o, out); err != nil {
		fmt.Fprintln(os.Stderr, "hubpush:", err)
		return 1
	}
	return 0
}

func parseFlags(args []string, errOut io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("hubpush", flag.ContinueOnError)
	fs.SetOutput(errOut)
	n := fs.Int("n", 1<<20, "float32 elements of the key")
	layers := fs.String("layers", "", "one key per layer instead of -n: element counts such as 2304K,576K,147K,4K (K, M, G: 2^10, 2^20, 2^30)")
	compress := fs.String("compress", "", "one setting instead of -settings: dense, topk:R or randk:R, then optionally ,noef ,codec=raw|varint|s2|zstd ,seed=N (ps.ParseSparse)")
	settings := fs.String("settings", defaultSettings, "the settings, taking turns in blocks: -compress's forms separated by commas (an option belongs to the setting before it)")
	fs.IntVar(&o.rounds, "rounds", 5, "timed rounds a setting, at least (exactly, with -target 0)")
	fs.DurationVar(&o.target, "target", 2*time.Second, "time the rounds until they add up to this a setting (0: exactly -rounds)")
	fs.IntVar(&o.warmup, "warmup", 2, "rounds of each setting not counted, first")
	fs.IntVar(&o.block, "block", 3, "rounds a setting runs before the next one's turn")
	partition := fs.String("partition", "", "the hubs' partition size (collective.Config.HubPartitionBytes; keys are cut into partitions of this many bytes of float32), e.g. 1MiB (default: the library's)")
	fs.Uint64Var(&o.seed, "seed", 1, "the gradients' seed")
	fs.BoolVar(&o.check, "check", false, "check the pulled sums against the gradients less the residuals (float64 copies of every key)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	switch {
	case set["layers"] && set["n"]:
		return o, errors.New("-n and -layers: give one")
	case set["layers"]:
		if o.layers, err = parseLayers(*layers); err != nil {
			return o, err
		}
	case *n < 0 || *n > maxElements:
		return o, fmt.Errorf("-n %d: want 0 to %d elements", *n, maxElements)
	default:
		o.layers = []int{*n}
	}
	switch {
	case set["compress"] && set["settings"]:
		return o, errors.New("-compress and -settings: give one")
	case set["compress"]:
		o.settings, err = parseSettings(*compress)
		if err == nil && len(o.settings) != 1 {
			err = fmt.Errorf("-compress %q: one setting (several go in -settings)", *compress)
		}
	default:
		o.settings, err = parseSettings(*settings)
	}
	if err != nil {
		return o, err
	}
	if *partition != "" {
		if o.partition, err = bench.ParseSize(*partition); err != nil {
			return o, fmt.Errorf("-partition: %w", err)
		}
		if o.partition < 8 {
			return o, fmt.Errorf("-partition %s: at least 8 bytes", *partition)
		}
	}
	switch {
	case o.rounds < 1:
		return o, fmt.Errorf("-rounds %d: at least 1", o.rounds)
	case o.warmup < 0:
		return o, fmt.Errorf("-warmup %d: not negative", o.warmup)
	case o.block < 1:
		return o, fmt.Errorf("-block %d: at least 1", o.block)
	case o.target < 0:
		return o, fmt.Errorf("-target %v: not negative", o.target)
	}
	return o, nil
}

// gradient fills g, one slice a layer, with round's gradient of rank:
// normal values, one in 20 scaled by 1 to 100.
func gradient(seed uint64, rank, round int, g [][]float32) {
	rng := rand.New(rand.NewPCG(seed, uint64(rank)<<32|uint64(uint32(round))))
	for _, l := range g {
		for i := range l {
			v := rng.NormFloat64()
			if rng.IntN(20) == 0 {
				v *= 1 + 99*rng.Float64()
			}
			l[i] = float32(v)
		}
	}
}

// setting is one setting's keys and what its rounds measured on this
// rank.
type setting struct {
	cfg         ps.SparseConfig
	keys        []string
	dst         [][]float32 // the pulled values, a layer each
	times       []float64   // µs, a timed round each
	sent, recvd int64       // payload bytes of the timed rounds
}

// ef: whether the setting keeps a residual.
func (s *setting) ef() bool { return s.cfg.Method != ps.Dense && s.cfg.ErrorFeedback }

func measure(ctx context.Context, o options, out io.Writer) error {
	cfg, err := collective.ConfigFromEnv(os.LookupEnv)
	if err != nil {
		return err
	}
	if o.partition > 0 {
		cfg.HubPartitionBytes = o.partition
	}
	c, err := collective.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	hub := c.Hub()
	if hub == nil {
		return errors.New("run with the hub strategy: gorun --strategy hub (or GORUN_STRATEGY=hub)")
	}
	m := &meter{c: c, hub: hub, o: o}
	if err := m.declare(ctx); err != nil {
		return err
	}
	if err := m.loop(ctx); err != nil {
		return err
	}
	if err := m.report(ctx, out, cfg.HubPartitionBytes); err != nil {
		return err
	}
	return c.Barrier(ctx)
}

// meter runs the settings' rounds on one rank.
type meter struct {
	c    *collective.Comm
	hub  *ps.Client
	o    options
	sets []*setting
	// grads holds a block's gradients: [round in the block][layer].
	grads [][][]float32
	// last is the index in grads of the last round's gradient.
	last int
	// rounds counts every round each setting ran, warm-up included.
	rounds int
	// sum and abs: with -check, Σ gradients and Σ |gradients| so far, a
	// layer each (the same for every setting).
	sum, abs [][]float64
}

func (m *meter) declare(ctx context.Context) error {
	for i, sc := range m.o.settings {
		s := &setting{cfg: sc}
		for j, n := range m.o.layers {
			key := fmt.Sprintf("s%d.%d", i, j)
			if err := m.hub.Declare(ctx, key, ps.KeyConfig{Len: n, Update: ps.Sum, Sparse: sc}); err != nil {
				return fmt.Errorf("setting %v: %w", sc, err)
			}
			s.keys = append(s.keys, key)
			s.dst = append(s.dst, make([]float32, n))
		}
		m.sets = append(m.sets, s)
	}
	m.grads = make([][][]float32, m.o.block)
	for b := range m.grads {
		for _, n := range m.o.layers {
			m.grads[b] = append(m.grads[b], make([]float32, n))
		}
	}
	if m.o.check {
		for _, n := range m.o.layers {
			m.sum = append(m.sum, make([]float64, n))
			m.abs = append(m.abs, make([]float64, n))
		}
	}
	return nil
}

// loop runs blocks of rounds, every setting in turn, until rank 0 says
// the job has timed enough.
func (m *meter) loop(ctx context.Context) error {
	var spent time.Duration // rank 0's timed rounds, every setting
	for b := 0; ; b++ {
		nb := blockRounds(m.rounds, m.o.block, m.o.warmup, m.o.rounds, m.o.target)
		for j := range nb {
			gradient(m.o.seed, m.c.Rank(), m.rounds+j, m.grads[j])
			if m.o.check {
				for l, g := range m.grads[j] {
					for i, v := range g {
						m.sum[l][i] += float64(v)
						m.abs[l][i] += math.Abs(float64(v))
					}
				}
			}
		}
		m.last = nb - 1
		for i := range m.sets {
			s := m.sets[(b+i)%len(m.sets)]
			for j := range nb {
				d, met, err := m.round(ctx, s, m.grads[j])
				if err != nil {
					return err
				}
				if m.rounds+j >= m.o.warmup {
					s.times = append(s.times, float64(d.Nanoseconds())/1e3)
					s.sent += met.BytesSent
					s.recvd += met.BytesRecv
					spent += d
				}
			}
		}
		m.rounds += nb
		goOn := []int64{0}
		if more(max(0, m.rounds-m.o.warmup), m.o.rounds, len(m.sets), spent, m.o.target) {
			goOn[0] = 1
		}
		if err := collective.Broadcast(ctx, m.c, goOn, 0); err != nil {
			return fmt.Errorf("after round %d: %w", m.rounds, err)
		}
		if goOn[0] == 0 {
			return nil
		}
	}
}

// round runs one round of s: a barrier, then (timed) every key's
// PushPull of g and the waits. It returns the time and what Tick counted
// for the pushes and pulls alone.
func (m *meter) round(ctx context.Context, s *setting, g [][]float32) (time.Duration, ps.Metrics, error) {
	if err := m.c.Barrier(ctx); err != nil {
		return 0, ps.Metrics{}, fmt.Errorf("setting %v: barrier: %w", s.cfg, err)
	}
	m.hub.Tick(0, 0) // drops what the barrier and the block's broadcast counted
	hs := make([]*ps.Handle, len(s.keys))
	t0 := time.Now()
	for j, key := range s.keys {
		hs[j] = ps.PushPull(m.hub, key, g[j], 1, s.dst[j])
	}
	var first error
	for j, h := range hs {
		if err := h.Wait(ctx); err != nil && first == nil {
			first = fmt.Errorf("setting %v, key %s: %w", s.cfg, s.keys[j], err)
		}
	}
	d := time.Since(t0)
	return d, m.hub.Tick(1, d), first
}

// report combines the ranks' measurements, setting by setting (every rank
// takes part), and rank 0 prints them.
func (m *meter) report(ctx context.Context, out io.Writer, partBytes int) error {
	rank, w := m.c.Rank(), m.c.Size()
	var gradSq float64
	for _, g := range m.grads[m.last] {
		for _, v := range g {
			gradSq += float64(v) * float64(v)
		}
	}
	if rank == 0 {
		hubs, _ := m.hub.HubBytes()
		total := 0
		for _, n := range m.o.layers {
			total += n
		}
		elems := max(1, partBytes/4)
		fmt.Fprintf(out, "# hubpush: %d workers, hubs: %d; a setting pushes %d keys, %d float32 in all, in partitions of at most %d; %d warm-up and %d timed rounds a setting, in blocks of %d\n",
			w, len(hubs), len(m.o.layers), total, elems, m.o.warmup, m.rounds-m.o.warmup, m.o.block)
		fmt.Fprintf(out, "# %-26s %7s %10s %10s %12s %12s %11s %9s\n", "setting", "rounds", "median_us", "min_us", "push_B", "pull_B", "resid/grad", "check")
	}
	var failed bool
	for _, s := range m.sets {
		var residSq float64
		var resid [][]float64
		if s.ef() {
			for j, key := range s.keys {
				r := make([]float64, m.o.layers[j])
				if err := m.hub.Residual(key, r); err != nil {
					return err
				}
				for _, v := range r {
					residSq += v * v
				}
				resid = append(resid, r)
			}
		}
		checked := m.o.check && (s.cfg.Method == ps.Dense || s.ef())
		worst := 0.0
		if checked {
			var err error
			if worst, err = m.check(ctx, s, resid); err != nil {
				return err
			}
		}
		sums := []float64{float64(s.sent), float64(s.recvd), residSq, gradSq}
		if err := collective.AllReduce(ctx, m.c, sums, collective.Sum); err != nil {
			return err
		}
		maxes := append(slices.Clone(s.times), worst)
		if err := collective.AllReduce(ctx, m.c, maxes, collective.Max); err != nil {
			return err
		}
		times, worst := maxes[:len(s.times)], maxes[len(s.times)]
		failed = failed || worst > 1
		if rank != 0 {
			continue
		}
		per := float64(w * max(1, len(times)))
		residCol, checkCol := "-", "-"
		if s.ef() && sums[3] > 0 {
			residCol = fmt.Sprintf("%.6g", math.Sqrt(sums[2]/sums[3]))
		}
		if checked {
			checkCol = fmt.Sprintf("%.4f", worst)
		}
		fmt.Fprintf(out, "%-28s %7d %10.0f %10.0f %12.1f %12.1f %11s %9s\n", s.cfg, len(times), median(times), slices.Min(times), sums[0]/per, sums[1]/per, residCol, checkCol)
	}
	if failed {
		return errCheck
	}
	return nil
}

// check compares, on every rank, the pulled values of s with the sum of
// every worker's gradients less its residual (resid, nil for dense), and
// returns the largest gap in units of checkTolerance.
func (m *meter) check(ctx context.Context, s *setting, resid [][]float64) (float64, error) {
	total := 0
	for _, n := range m.o.layers {
		total += n
	}
	buf := make([]float64, 0, 2*total)
	for j := range m.o.layers {
		for i, v := range m.sum[j] {
			if resid != nil {
				v -= resid[j][i]
			}
			buf = append(buf, v)
		}
	}
	for j := range m.o.layers {
		for i, v := range m.abs[j] {
			if resid != nil {
				v += math.Abs(resid[j][i])
			}
			buf = append(buf, v)
		}
	}
	if err := collective.AllReduce(ctx, m.c, buf, collective.Sum); err != nil {
		return 0, err
	}
	worst, off := 0.0, 0
	for j := range m.o.layers {
		for _, got := range s.dst[j] {
			want, abs := buf[off], buf[total+off]
			off++
			gap := math.Abs(float64(got) - want)
			tol := checkTolerance(want, abs, m.rounds, m.c.Size())
			switch {
			case gap == 0:
			case tol == 0 || math.IsNaN(gap):
				worst = math.Inf(1)
			default:
				worst = max(worst, gap/tol)
			}
		}
	}
	return worst, nil
}
