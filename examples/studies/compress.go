package main

import (
	"encoding/csv"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/gorun/gorun/examples/fmnist/nn"
	"github.com/gorun/gorun/internal/chart"
	"github.com/gorun/gorun/ps"
)

// compress is the gradient-compression study: the Fashion-MNIST CNN trained
// by N ranks (with -hosts: one on each test host, e.g. at 100 Mbit/s
// through examples/studies/testnet.sh) for the same epochs with float32
// gradients on the ring (the baseline), fp16 and bf16 on the wire,
// PowerSGD, top-k with error feedback through dedicated hubs, and float64
// as a reference; test accuracy against wall time and against steps, the
// final accuracy against float32's (fp16 and bf16 are to stay within 0.5
// points), and the time to 0.85 and 0.88 against float32's (the best method
// is to take at most half).
func compress(o options) (string, error) { return compressEpochs(o, 0) }

// compressEpochs is compress with every method trained for epochs
// (0: the study's default), for a flag.
func compressEpochs(o options, epochs float64) (string, error) {
	c := defaultCompressConfig(o.quick)
	if epochs > 0 {
		c.Epochs = epochs
	}
	if len(o.hosts) > 0 {
		c.Rate = testnetRate(os.LookupEnv)
	}
	return compressWith(o, c)
}

// compressConfig is what the compression study runs.
type compressConfig struct {
	Epochs      float64 // every method trains this many passes over the training set
	Train, Test int     // the first N samples (0: the whole set)
	// CurvePerEpoch spaces rank 0's copies of its weights (the learning
	// curve) CurvePerEpoch·Epochs apart in wall time, about the same
	// number of points whatever the epochs; each costs an evaluation of
	// the test set after training.
	CurvePerEpoch time.Duration
	PowerSGDRank  int
	PowerSGDStart int    // plain steps before PowerSGD
	TopK          string // the top-k method's -compress
	Thresholds    []float64
	// Rate is the test hosts' link rate as testnet.sh was given it
	// ("100mbit"), or "" when unknown (a local run).
	Rate string
}

// defaultCompressConfig is the study as its targets are judged: 2 epochs
// (about 20 minutes for all six methods on 4 test hosts sharing 2 cores),
// the whole data set; quick is a small version for tests.
func defaultCompressConfig(quick bool) compressConfig {
	c := compressConfig{Epochs: 2, CurvePerEpoch: 9 * time.Second, PowerSGDRank: 4, PowerSGDStart: 100,
		TopK: "topk:0.01", Thresholds: []float64{0.85, 0.88}}
	if quick {
		c.Epochs, c.Train, c.Test, c.CurvePerEpoch, c.PowerSGDStart = 1, 2000, 500, 400*time.Millisecond, 4
		c.Thresholds = []float64{0.4, 0.6}
	}
	return c
}

func (c compressConfig) curve() time.Duration {
	return time.Duration(float64(c.CurvePerEpoch) * c.Epochs).Round(time.Millisecond)
}

// compressMethod is one way of exchanging the gradients.
type compressMethod struct {
	name  string
	file  string   // its name in file names
	gorun []string // gorun flags
	args  []string // trainer flags of the method
	ring  bool
}

// compressMethods are the study's methods, float32 (the baseline) first,
// for a job of np ranks and a model of params parameters: the ring ones
// overlap each bucket's all-reduce with backward; top-k pushes through np
// dedicated hubs (one on each host), each holding a quarter of the
// weights' partitions.
func compressMethods(c compressConfig, np, params int) ([]compressMethod, error) {
	sp, err := ps.ParseSparse(c.TopK)
	if err != nil {
		return nil, err
	}
	if sp.Method == ps.Dense {
		return nil, fmt.Errorf("compress: %q is not a sparse push", c.TopK)
	}
	ef := "without error feedback"
	if sp.ErrorFeedback {
		ef = "+ error feedback"
	}
	hubs := max(1, np)
	ring := func(a ...string) []string { return append([]string{"-mode", "ring"}, a...) }
	return []compressMethod{
		{name: "float32", file: "float32", args: ring("-wire", "float32"), ring: true},
		{name: "fp16", file: "fp16", args: ring("-wire", "fp16"), ring: true},
		{name: "bf16", file: "bf16", args: ring("-wire", "bf16"), ring: true},
		{name: fmt.Sprintf("PowerSGD rank %d", c.PowerSGDRank), file: "powersgd",
			args: ring("-powersgd", strconv.Itoa(c.PowerSGDRank), "-powersgd-start", strconv.Itoa(c.PowerSGDStart)), ring: true},
		{name: fmt.Sprintf("%s %g %% %s", sp.Method, 100*sp.Ratio, ef), file: "topk",
			gorun: []string{"--strategy", "hub", "--hubs", strconv.Itoa(hubs)},
			args:  []string{"-mode", "bsp", "-compress", c.TopK, "-partition", strconv.Itoa(hubPartition(params, hubs))}},
		{name: "float64 (reference)", file: "float64", args: ring("-wire", "full"), ring: true},
	}, nil
}

// hubPartition is the trainer's -partition (bytes, counted in float32
// elements as ps.ClientConfig.PartitionBytes is) that cuts a key of
// params elements into hubs partitions, one on each hub.
func hubPartition(params, hubs int) int {
	return 4 * max(1, (params+hubs-1)/max(1, hubs))
}

// compressRun is one method's job.
type compressRun struct {
	m      compressMethod
	r      result
	fields map[string]string // rank 0's result line, field by field
	err    error
}

func (ru compressRun) ok() bool { return ru.err == nil }

// findRun is the run of the method whose file name is file.
func findRun(runs []compressRun, file string) (compressRun, bool) {
	for _, ru := range runs {
		if ru.m.file == file {
			return ru, true
		}
	}
	return compressRun{}, false
}

// iters is the iterations of each rank.
func (ru compressRun) iters(np int) int { return ru.r.Iterations / max(1, np) }

func compressWith(o options, c compressConfig) (string, error) {
	model, err := nn.NewCNN(nn.Shape{H: 28, W: 28, C: 1}, 8, 16, 64, 10, 1)
	if err != nil {
		return "", err
	}
	params := len(model.Params)
	methods, err := compressMethods(c, o.np, params)
	if err != nil {
		return "", err
	}
	rep, err := newReport(o, "compress")
	if err != nil {
		return "", err
	}
	launch, where := o.launch, "local"
	if len(o.hosts) > 0 {
		launch, where = o.hosts, "test hosts"
	}
	common := []string{"-model", "cnn", "-epochs", fmt.Sprint(c.Epochs), "-batch", "128", "-lr", "0.02", "-momentum", "0.9", "-seed", "1",
		"-curve", c.curve().String()}
	if c.Train > 0 {
		common = append(common, "-train", strconv.Itoa(c.Train))
	}
	if c.Test > 0 {
		common = append(common, "-test", strconv.Itoa(c.Test))
	}
	// A job that hangs fails the method instead of the study.
	timeout := []string{"--timeout", (10*time.Minute + time.Duration(c.Epochs*float64(5*time.Minute))).Round(time.Second).String()}
	runs := make([]compressRun, len(methods))
	var failed []error
	for i, m := range methods {
		jo := o
		jo.launch = launch
		r, err := jo.job(o.np, append(append([]string(nil), timeout...), m.gorun...), append(append([]string(nil), m.args...), common...)...)
		runs[i] = compressRun{m: m, r: r, fields: resultFields(r.Output), err: err}
		if err != nil {
			failed = append(failed, fmt.Errorf("%s: %w", m.name, err))
		}
	}
	base := runs[0]

	testN := c.Test
	if testN == 0 {
		testN = fmnistTestSamples
	}
	rep.f("# Gradient compression on the Fashion-MNIST CNN\n\n")
	rep.f("The question: how much do fewer bytes on the wire buy in time to accuracy, and what do they cost in accuracy? ")
	rep.f("The study's targets: fp16 and bf16 end within 0.5 points of float32's test accuracy, and the best method reaches 0.88 in at most half float32's time.\n\n")
	rep.f("**Setup.** %d ranks, %s", o.np, where)
	if len(o.hosts) > 0 {
		rate := c.Rate
		if rate == "" {
			rate = "an unknown rate"
		}
		rep.f(" (one rank each, links of %s: `%s`; the hosts are network namespaces on one machine, %s, so they share its cores)", rate, joinWords(o.hosts), machine(options{}))
	} else {
		rep.f(" (%s)", machine(o))
	}
	rep.f(". The CNN (two 5×5 convolutions of 8 and 16 channels with max-pooling, a dense layer of 64, %d parameters), ", params)
	rep.f("%s of the %s, global batch 128, SGD with learning rate 0.02 and momentum 0.9, seed 1, the same for every method (the settings of `results/studies/accuracy`); ", epochsName(c.Epochs), trainSetName(c.Train))
	rep.f("test accuracy on %s. ", testSetName(c.Test))
	rep.f("Every method trains for the same %s, a fixed budget (by default %s: about 20 minutes for the whole study on 4 test hosts sharing 2 cores): **0.88 may not be reached within it** (the CNN reached 0.8968 in 6 epochs in `results/studies/accuracy`); `-epochs` runs longer. ",
		epochsName(c.Epochs), epochsName(defaultCompressConfig(false).Epochs))
	rep.f("Rank 0 keeps a copy of its weights every %s of training and evaluates them after training: the curves, and the time to each accuracy, linearly interpolated between the copies on either side of it. ", c.curve())
	rep.f("The methods ran one after the other in the table's order.\n\n")
	flags := ""
	if c.Epochs != defaultCompressConfig(false).Epochs {
		flags = fmt.Sprintf(" -epochs %g", c.Epochs)
	}
	if len(o.hosts) > 0 {
		rate := c.Rate
		if _, ok := parseRate(rate); !ok {
			rate = "RATE"
		}
		rep.f("Command: `RATE=%s bash examples/studies/testnet.sh%s compress` (brings up 4 test hosts and runs `bin/studies -hosts ...%s compress`).\n\n", rate, flags, flags)
	} else {
		rep.f("Command: `bin/studies -np %d%s compress`; on test hosts, `RATE=100mbit bash examples/studies/testnet.sh%s compress`.\n\n", o.np, flags, flags)
	}

	rep.f("**Methods.**\n\n")
	rep.f("- float32 (the baseline), fp16, bf16 and float64: the ring, each layer's gradient all-reduced in buckets while backward goes on (`-wire float32|fp16|bf16|full`); fp16 and bf16 are pre-divided by the ranks and summed in float32. float64 is the trainer's default, the reference for what rounding costs.\n")
	psgd, _ := findRun(runs, "powersgd")
	topk, _ := findRun(runs, "topk")
	rep.f("- %s (`-powersgd %d -powersgd-start %d`): each weight matrix approximated at rank %d with error feedback and warm start after %d plain (float64) steps. ", psgd.m.name, c.PowerSGDRank, c.PowerSGDStart, c.PowerSGDRank, c.PowerSGDStart)
	rep.f("%s", powerSGDWhy(model, c, runs, o.np))
	rep.f("\n- %s (`--strategy hub --hubs %d`, `-mode bsp -compress %s`): hub BSP, the hubs applying SGD with the same momentum; each worker pushes the largest elements of each partition's gradient and keeps the rest for later (error feedback). ", topk.m.name, max(1, o.np), c.TopK)
	rep.f("%d dedicated hubs, one on each host, each holding one of %d partitions of the weights (`-partition %d`), rather than one hub in rank 0: pulls stay dense (the worker pulls every weight as float64, %d bytes), so one hub would send %d ranks' pulls, %d bytes a round, over rank 0's link, more than the float32 ring sends; spread over %d hubs each link carries %d. ",
		max(1, o.np), max(1, o.np), hubPartition(params, max(1, o.np)), 8*params, o.np-1, (o.np-1)*8*params, max(1, o.np), (o.np-1)*8*params/max(1, o.np))
	rep.f("Dedicated hubs rather than a shard in every rank keep the hubs' work out of the ranks' processes; on a test host a hub shares the link with that host's rank, as a shard would.\n\n")

	// The table.
	rep.f("| method | final test accuracy | vs float32 (points) | within 0.5 points | wall time (s) | time / iteration (ms) | compute / sync per iteration (ms) | bytes sent per rank per iteration |")
	for _, th := range c.Thresholds {
		rep.f(" time to %s (s) | speed-up |", fmtAcc(th))
	}
	rep.f("\n|%s\n", strings.Repeat(" --- |", 8+2*len(c.Thresholds)))
	for _, ru := range runs {
		if !ru.ok() {
			rep.f("| %s | failed: %s |%s\n", ru.m.name, shorten(strings.SplitN(ru.err.Error(), "\n", 2)[0], 160), strings.Repeat(" - |", 6+2*len(c.Thresholds)))
			continue
		}
		r := ru.r
		diff, target := "-", "-"
		if base.ok() {
			d := 100 * (r.Accuracy - base.r.Accuracy)
			diff = fmt.Sprintf("%+.2f", d)
			if ru.m.file == "fp16" || ru.m.file == "bf16" {
				target = map[bool]string{true: "yes", false: "**no**"}[math.Abs(d) <= 0.5]
			}
		}
		if ru.m.file == "float32" {
			diff, target = "(baseline)", "-"
		}
		b := ru.bytes(o.np, params)
		rep.f("| %s | %.4f | %s | %s | %.1f | %.1f | %.1f / %.1f | %s |", ru.m.name, r.Accuracy, diff, target, r.Time, r.IterMs, r.ComputeMs, r.SyncMs, b.cell())
		for _, th := range c.Thresholds {
			t, it, ok := ru.reach(th)
			if !ok {
				rep.f(" not reached | - |")
				continue
			}
			rep.f(" %.1f (step %.0f) | %s |", t, it, speedupCell(base, th, t))
		}
		rep.f("\n")
	}
	rep.f("\nBytes: what one rank sends per iteration, as the trainer's model counts it (2(N−1)/N of each all-reduced buffer); ")
	rep.f("`wire_B` from the trainer's result line where it prints one (fp16, bf16, PowerSGD, and float32 if it does), computed from the model's %d parameters (+1 for the stop vote) otherwise, marked *computed*. ", params)
	rep.f("PowerSGD's is the mean over the run, its %d plain float64 steps included; after them, derived from that mean: see below. ", c.PowerSGDStart)
	rep.f("Top-k's is the push (`push_B`) plus the dense pull each worker receives (`pull_B` if the trainer prints it, else %d bytes, computed). ", 8*params)
	rep.f("The speed-up is float32's time to the accuracy over the method's. Compute and sync are each rank's mean per iteration: sync is what training waited for after backward (the all-reduces' exposed part, or the hub round), waiting for slower peers included.\n\n")
	if ru, ok := findRun(runs, "powersgd"); ok && ru.ok() {
		if after, ok := ru.powerSGDAfterWarmup(o.np, params, c.PowerSGDStart); ok {
			rep.f("PowerSGD after its warm-up: %d bytes per rank per iteration (from the mean over %d iterations less %d plain steps of %d bytes), %.1f× fewer than float32's.\n\n",
				after, ru.iters(o.np), c.PowerSGDStart, ringBytes(o.np, params+1, 8), float64(runs[0].bytes(o.np, params).sent)/float64(max(1, after)))
		}
	}

	// Charts, of the runs that have a curve.
	if drawn, err := compressCharts(rep, runs, c.Thresholds); err != nil {
		return "", err
	} else if drawn {
		if err := writeCurves(filepath.Join(rep.dir, "curves.csv"), runs); err != nil {
			return "", err
		}
		rep.f("![test accuracy against wall time](%s/accuracy-time.png)\n\n![test accuracy against steps](%s/accuracy-steps.png)\n\n", rep.name, rep.name)
		rep.f("The curves' points, every method's, are in [curves.csv](%s/curves.csv).\n\n", rep.name)
	} else {
		rep.f("No method printed a learning curve: no charts.\n\n")
	}

	rep.f("## Where the time goes\n\n")
	rep.f("%s\n\n", whereTimeGoes(runs, o.np, params, c, len(o.hosts) > 0 || len(o.launch) == 0))
	rep.f("## Conclusions\n\n")
	for _, s := range compressConclusions(runs, o.np, params, c, testN) {
		rep.f("- %s\n", s)
	}
	path, werr := rep.write(o)
	if werr != nil {
		return "", werr
	}
	if len(failed) > 0 {
		return "", fmt.Errorf("compress: %d of %d methods failed (the report, with what ran, is %s): %w", len(failed), len(runs), path, errors.Join(failed...))
	}
	return path, nil
}

// fmnistTestSamples is the size of Fashion-MNIST's test set.
const fmnistTestSamples = 10000

func epochsName(e float64) string {
	if e == 1 {
		return "1 epoch"
	}
	return fmt.Sprintf("%g epochs", e)
}

func trainSetName(n int) string {
	if n == 0 {
		return "whole training set (60,000)"
	}
	return fmt.Sprintf("first %d training samples", n)
}

func testSetName(n int) string {
	if n == 0 {
		return fmt.Sprintf("the whole test set (%d)", fmnistTestSamples)
	}
	return fmt.Sprintf("the first %d test samples", n)
}

// fmtAcc writes a threshold as 0.85, or with more digits when it has
// them.
func fmtAcc(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// fieldRE is one name=value of a result line (a quoted value may hold
// spaces).
var fieldRE = regexp.MustCompile(`([A-Za-z_]+)=("[^"]*"|\S+)`)

// resultFields is rank 0's result line ("[0] mode=..."), field by field;
// nil when there is none.
func resultFields(out string) map[string]string {
	for _, line := range strings.Split(out, "\n") {
		rest, ok := strings.CutPrefix(line, "[0] mode=")
		if !ok {
			continue
		}
		f := map[string]string{}
		for _, m := range fieldRE.FindAllStringSubmatch("mode="+rest, -1) {
			f[m[1]] = strings.Trim(m[2], `"`)
		}
		return f
	}
	return nil
}

// intField is a whole number field of a result line.
func intField(f map[string]string, name string) (int64, bool) {
	v, err := strconv.ParseInt(f[name], 10, 64)
	return v, err == nil && f[name] != ""
}

// floatField is a decimal field of a result line.
func floatField(f map[string]string, name string) (float64, bool) {
	v, err := strconv.ParseFloat(f[name], 64)
	return v, err == nil && f[name] != "" && !math.IsNaN(v) && !math.IsInf(v, 0)
}

// ringBytes is what one rank sends in a ring all-reduce of elems
// elements of size bytes over n ranks, as the trainer counts it:
// 2(n-1)/n of the buffer, rounded down.
func ringBytes(n, elems, size int) int64 {
	return int64(2 * (n - 1) * elems * size / max(1, n))
}

// sentBytes is a run's bytes per rank per iteration and where they come
// from.
type sentBytes struct {
	sent     int64 // sent by a rank (the ring), or pushed (the hub)
	computed bool  // computed from the model, not printed by the trainer
	pull     int64 // the hub: the dense pull a worker receives
	pullComp bool
	hub      bool
}

func (b sentBytes) total() int64 { return b.sent + b.pull }

func (b sentBytes) cell() string {
	mark := func(comp bool) string {
		if comp {
			return " *computed*"
		}
		return ""
	}
	if b.hub {
		return fmt.Sprintf("%d push + %d pull%s = %d", b.sent, b.pull, mark(b.pullComp), b.total())
	}
	return fmt.Sprintf("%d%s", b.sent, mark(b.computed))
}

// bytes is the run's bytes per rank per iteration: the trainer's wire_B
// or push_B (and pull_B) when it printed them, else computed from the
// model's params (and the stop vote the ring sums with them).
func (ru compressRun) bytes(np, params int) sentBytes {
	if !ru.m.ring {
		b := sentBytes{hub: true, pull: int64(8 * params), pullComp: true}
		b.sent, _ = intField(ru.fields, "push_B")
		if v, ok := intField(ru.fields, "pull_B"); ok {
			b.pull, b.pullComp = v, false
		}
		return b
	}
	if v, ok := intField(ru.fields, "wire_B"); ok {
		return sentBytes{sent: v}
	}
	size := 8
	if ru.m.file == "float32" {
		size = 4
	}
	return sentBytes{sent: ringBytes(np, params+1, size), computed: true}
}

// powerSGDAfterWarmup derives PowerSGD's bytes per step after its start
// plain (float64) steps from the mean wire_B over the run.
func (ru compressRun) powerSGDAfterWarmup(np, params, start int) (int64, bool) {
	mean, ok := intField(ru.fields, "wire_B")
	iters := ru.iters(np)
	if !ok || iters <= start {
		return 0, false
	}
	v := (mean*int64(iters) - int64(start)*ringBytes(np, params+1, 8)) / int64(iters-start)
	return max(0, v), true
}

// reach is when the run's test accuracy first reached th: wall seconds
// and rank 0's steps, each interpolated between the copies either side.
func (ru compressRun) reach(th float64) (t, iter float64, ok bool) {
	if t, ok = reach(ru.r.Curve, th, func(p point) float64 { return p.T }); !ok {
		return 0, 0, false
	}
	iter, _ = reach(ru.r.Curve, th, func(p point) float64 { return float64(p.Iter) })
	return t, iter, true
}

// reach is where a curve's accuracy first reaches th, along x: at the
// first point at or above th, linearly interpolated from the point before
// it (whose accuracy is below th); false when no point reaches it.
func reach(pts []point, th float64, x func(point) float64) (float64, bool) {
	for i, p := range pts {
		if p.Accuracy < th {
			continue
		}
		if i == 0 {
			return x(p), true
		}
		q := pts[i-1]
		f := (th - q.Accuracy) / (p.Accuracy - q.Accuracy) // in (0, 1]: q is below th, p at or above
		return x(q) + f*(x(p)-x(q)), true
	}
	return 0, false
}

// speedupCell is float32's time to th over t.
func speedupCell(base compressRun, th, t float64) string {
	if !base.ok() {
		return "-"
	}
	bt, _, ok := base.reach(th)
	switch {
	case !ok:
		return "float32 did not"
	case t <= 0:
		return "-"
	}
	return fmt.Sprintf("%.2f×", bt/t)
}

// powerSGDWhy justifies PowerSGD's rank and start from the model and,
// once it ran, float32's curve.
func powerSGDWhy(m *nn.Model, c compressConfig, runs []compressRun, np int) string {
	var d *nn.Dense
	for _, l := range m.Layers {
		if x, ok := l.(*nn.Dense); ok && (d == nil || x.NumParams() > d.NumParams()) {
			d = x
		}
	}
	var b strings.Builder
	if d != nil {
		w := d.In() * d.Out()
		fmt.Fprintf(&b, "The dense layer's %d × %d weights are %.0f %% of the parameters; at rank r it sends (%d+%d)·r floats instead of %d: ",
			d.Out(), d.In(), 100*float64(w)/float64(len(m.Params)), d.Out(), d.In(), w)
		for i, r := range []int{1, 2, 4, 8} {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%.0f× fewer at %d", float64(w)/float64((d.In()+d.Out())*r), r)
		}
		b.WriteString(". ")
	}
	if d != nil {
		// What a lower rank would save on the wire: the dense layer's
		// factors, as a ring all-reduce sends them.
		saved := ringBytes(np, (d.In()+d.Out())*(c.PowerSGDRank-1), 4)
		fmt.Fprintf(&b, "Rank %d keeps more of each gradient than rank 1; rank 1 would send only %d bytes less per step on the dense layer", c.PowerSGDRank, saved)
		if bps, ok := parseRate(c.Rate); ok {
			fmt.Fprintf(&b, " (%.2f ms at %s)", 1000*float64(saved)*8/bps, c.Rate)
		}
		b.WriteString(", little next to a step's compute; the accuracy a cruder approximation may cost is the larger risk. ")
	}
	fmt.Fprintf(&b, "The first %d steps (%.2f of an epoch at batch 128) average plainly, as PyTorch's start_powerSGD_iter does: the first steps move the weights most and compressing them is what hurts accuracy most; ", c.PowerSGDStart, float64(c.PowerSGDStart)*128/float64(trainSamples(c)))
	if len(runs) > 0 && runs[0].ok() {
		if a, ok := accuracyAt(runs[0].r.Curve, float64(c.PowerSGDStart)); ok {
			fmt.Fprintf(&b, "float32 had reached %.2f test accuracy by step %d (its curve, interpolated), ", a, c.PowerSGDStart)
		}
		fmt.Fprintf(&b, "and the plain steps are %.0f %% of the run's %d. ", 100*float64(c.PowerSGDStart)/float64(max(1, runs[0].iters(np))), runs[0].iters(np))
	}
	return b.String()
}

func trainSamples(c compressConfig) int {
	if c.Train > 0 {
		return c.Train
	}
	return 60000
}

// accuracyAt is a curve's accuracy at step iter, interpolated between
// the copies either side; false outside the curve.
func accuracyAt(pts []point, iter float64) (float64, bool) {
	for i := 1; i < len(pts); i++ {
		a, b := pts[i-1], pts[i]
		if float64(a.Iter) <= iter && iter <= float64(b.Iter) {
			if b.Iter == a.Iter {
				return b.Accuracy, true
			}
			f := (iter - float64(a.Iter)) / float64(b.Iter-a.Iter)
			return a.Accuracy + f*(b.Accuracy-a.Accuracy), true
		}
	}
	return 0, false
}

// compressCharts draws test accuracy against wall time and against
// steps, a line per method, with the thresholds dashed; false when no
// run has a curve to draw.
func compressCharts(rep *report, runs []compressRun, thresholds []float64) (bool, error) {
	lo, hi, maxT, maxI := 1.0, 0.0, 0.0, 0.0
	curves := 0
	for _, ru := range runs {
		if !ru.ok() || len(ru.r.Curve) == 0 {
			continue
		}
		curves++
		lo = math.Min(lo, ru.r.Accuracy)
		for _, p := range ru.r.Curve {
			hi, maxT, maxI = math.Max(hi, p.Accuracy), math.Max(maxT, p.T), math.Max(maxI, float64(p.Iter))
		}
	}
	// The interesting part: from a little below the lowest final accuracy.
	ymin := math.Max(0, math.Floor((lo-0.15)*20)/20)
	ymax := math.Min(1, math.Ceil((hi+0.01)*50)/50)
	if curves == 0 {
		return false, nil
	}
	for name, axis := range map[string]struct {
		x          func(point) float64
		xmax       float64
		title, lab string
	}{
		"accuracy-time.png":  {func(p point) float64 { return p.T }, maxT, "Test accuracy against wall time", "seconds of training"},
		"accuracy-steps.png": {func(p point) float64 { return float64(p.Iter) }, maxI, "Test accuracy against steps", "steps (rank 0's iterations)"},
	} {
		l := &chart.Line{Title: axis.title, XLabel: axis.lab, YLabel: "test accuracy"}
		if ymax > ymin {
			l.YMin, l.YMax = ymin, ymax
		}
		for _, ru := range runs {
			if !ru.ok() || len(ru.r.Curve) == 0 {
				continue
			}
			s := chart.Series{Name: ru.m.name}
			for _, p := range ru.r.Curve {
				s.X, s.Y = append(s.X, axis.x(p)), append(s.Y, p.Accuracy)
			}
			l.Series = append(l.Series, s)
		}
		for _, th := range thresholds {
			if th > ymin && th < ymax && axis.xmax > 0 {
				l.Series = append(l.Series, chart.Series{Name: fmtAcc(th), X: []float64{0, axis.xmax}, Y: []float64{th, th}, Dashed: true})
			}
		}
		if err := rep.writeChart(name, l); err != nil {
			return false, err
		}
	}
	return true, nil
}

// writeCurves writes every method's curve as CSV.
func writeCurves(path string, runs []compressRun) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"method", "wall_s", "iteration", "test_accuracy", "test_loss"})
	for _, ru := range runs {
		for _, p := range ru.r.Curve {
			_ = w.Write([]string{ru.m.file, strconv.FormatFloat(p.T, 'f', 3, 64), strconv.Itoa(p.Iter),
				strconv.FormatFloat(p.Accuracy, 'f', 4, 64), strconv.FormatFloat(p.Loss, 'f', 4, 64)})
		}
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// testnetRate is the link rate testnet.sh gives the test hosts: its RATE,
// or its default.
func testnetRate(lookup func(string) (string, bool)) string {
	if v, ok := lookup("RATE"); ok && strings.TrimSpace(v) != "" {
		return strings.TrimSpace(v)
	}
	return "1gbit"
}

var rateRE = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)(bit|kbit|mbit|gbit|tbit)$`)

// parseRate reads a tc rate in bits ("100mbit", "1gbit") as bits per
// second; false for anything else (tc's bytes-per-second units, "mbps",
// included).
func parseRate(s string) (float64, bool) {
	m := rateRE.FindStringSubmatch(strings.ToLower(strings.TrimSpace(s)))
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil || v <= 0 {
		return 0, false
	}
	return v * map[string]float64{"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12}[m[2]], true
}

// whereTimeGoes splits float32's iteration into compute and
// synchronisation and says what that leaves for compression.
//
// shared says the ranks ran on this machine (locally, or on test hosts
// that are network namespaces of it), sharing its cores.
func whereTimeGoes(runs []compressRun, np, params int, c compressConfig, shared bool) string {
	base := runs[0]
	if !base.ok() {
		return "float32's run failed: nothing to compare against."
	}
	var b strings.Builder
	cm, sy, it := base.r.ComputeMs, base.r.SyncMs, base.r.IterMs
	fmt.Fprintf(&b, "A float32 iteration took %.1f ms: %.1f ms of compute (forward and backward of %d samples per rank) and %.1f ms waiting on synchronisation (%.0f %% of compute + sync). ",
		it, cm, 128/max(1, np), sy, 100*sy/math.Max(1e-9, cm+sy))
	if comm, ok := floatField(base.fields, "comm_s"); ok {
		perIter := 1000 * comm / float64(max(1, base.iters(np)))
		hidden, _ := floatField(base.fields, "hidden")
		fmt.Fprintf(&b, "Its buckets' all-reduces were in flight %.1f ms per iteration (summed over the buckets, which overlap; waiting for slower peers included), %.0f %% of it behind backward. ", perIter, 100*hidden)
	}
	if bps, ok := parseRate(c.Rate); ok {
		sent := base.bytes(np, params).sent
		fmt.Fprintf(&b, "At %s a rank's %d bytes take %.1f ms on its link alone. ", c.Rate, sent, 1000*float64(sent)*8/bps)
	}
	b.WriteString("Sync also holds the wait for the slowest rank's compute")
	if shared {
		fmt.Fprintf(&b, ": %d ranks share %s", np, machine(options{}))
	}
	b.WriteString(". ")
	free := (cm + sy) / math.Max(1e-9, cm)
	fmt.Fprintf(&b, "Compression can remove at most the synchronisation: with free communication a float32-sized step would take %.1f ms, %.2f× faster, ", cm, free)
	if free < 2 {
		b.WriteString("so **the 2× target is out of reach of any compression here** for a method that needs as many steps as float32 (compute dominates); only fewer steps to the same accuracy could reach it, and none of these methods is meant to take fewer. ")
	} else {
		b.WriteString("so the 2× target is within reach in principle: communication is more than half of the step. ")
	}
	lo, hi := -1, -1
	for i, ru := range runs {
		if !ru.ok() || ru.r.ComputeMs <= 0 {
			continue
		}
		if lo < 0 || ru.r.ComputeMs < runs[lo].r.ComputeMs {
			lo = i
		}
		if hi < 0 || ru.r.ComputeMs > runs[hi].r.ComputeMs {
			hi = i
		}
	}
	if lo >= 0 && runs[hi].r.ComputeMs > 1.1*runs[lo].r.ComputeMs {
		fmt.Fprintf(&b, "Mind that compute per iteration, the same model and batch in every run, ranged from %.1f ms (%s) to %.1f ms (%s): differences of that size between the runs come from the shared machine (or a method's own work, such as top-k's selection or PowerSGD's products), not from the wire. ",
			runs[lo].r.ComputeMs, runs[lo].m.name, runs[hi].r.ComputeMs, runs[hi].m.name)
	}
	best, bestRatio := -1, 0.0
	for i, ru := range runs[1:] {
		if ru.ok() && ru.r.IterMs > 0 {
			if r := it / ru.r.IterMs; r > bestRatio {
				best, bestRatio = i+1, r
			}
		}
	}
	if best > 0 {
		ru := runs[best]
		fmt.Fprintf(&b, "The fastest step measured: %s, %.1f ms (%.1f compute, %.1f sync), %.2f× float32's. ", ru.m.name, ru.r.IterMs, ru.r.ComputeMs, ru.r.SyncMs, bestRatio)
	}
	cores := float64(runtime.NumCPU())
	if share := cores / float64(np); shared && share < 1 {
		pc := cm * share
		fmt.Fprintf(&b, "A projection, not a measure: with a core per rank, compute would be about %.1f ms (%.0f cores for %d ranks here), and free communication would make the step %.2f× faster than float32's (%.1f ms of sync unchanged).",
			pc, cores, np, (pc+sy)/math.Max(1e-9, pc), sy)
	}
	return b.String()
}

// compressConclusions are the study's answers, from the runs.
func compressConclusions(runs []compressRun, np, params int, c compressConfig, testN int) []string {
	base := runs[0]
	if !base.ok() {
		return []string{"float32's run failed: no comparison (see the table)."}
	}
	var out []string
	// Accuracy.
	se := func(p float64) float64 { return math.Sqrt(p * (1 - p) / float64(testN)) }
	for _, ru := range runs {
		if ru.m.file != "fp16" && ru.m.file != "bf16" {
			continue
		}
		if !ru.ok() {
			out = append(out, fmt.Sprintf("%s: the run failed; the accuracy target cannot be judged.", ru.m.name))
			continue
		}
		d := 100 * (ru.r.Accuracy - base.r.Accuracy)
		verdict := "met"
		if math.Abs(d) > 0.5 {
			verdict = "**missed**"
		}
		out = append(out, fmt.Sprintf("**%s accuracy: target %s.** %.4f against float32's %.4f, %+.2f points (target: within 0.5). For scale: on %d test samples one accuracy's standard error is about %.2f points, and two standard errors of the difference of two independent accuracies %.2f points (the methods share the test set, so the difference's own noise is smaller; the training's, from a different trajectory, comes on top).",
			ru.m.name, verdict, ru.r.Accuracy, base.r.Accuracy, d, testN, 100*se(base.r.Accuracy), 200*math.Sqrt(2)*se(base.r.Accuracy)))
	}
	// Time to accuracy.
	for i := len(c.Thresholds) - 1; i >= 0; i-- {
		th := c.Thresholds[i]
		bt, _, ok := base.reach(th)
		best, bestT := -1, 0.0
		for j, ru := range runs[1:] {
			if t, _, ok := ru.reach(th); ru.ok() && ok && (best < 0 || t < bestT) {
				best, bestT = j+1, t
			}
		}
		switch {
		case !ok && best < 0:
			out = append(out, fmt.Sprintf("**Time to %s: not reached** by any method within %s, so the 2× target cannot be judged at %s in this run (run longer with `-epochs`).", fmtAcc(th), epochsName(c.Epochs), fmtAcc(th)))
			continue
		case !ok:
			out = append(out, fmt.Sprintf("**Time to %s:** float32 did not reach it within %s; %s did, in %.1f s, so the speed-up has no baseline (run longer with `-epochs`).", fmtAcc(th), epochsName(c.Epochs), runs[best].m.name, bestT))
			continue
		case best < 0:
			out = append(out, fmt.Sprintf("**Time to %s:** float32 reached it in %.1f s; no other method did.", fmtAcc(th), bt))
			continue
		}
		sp := bt / bestT
		verdict := "the 2× target is met"
		if sp < 2 {
			verdict = "the 2× target is **missed**"
		}
		if i < len(c.Thresholds)-1 {
			verdict = fmt.Sprintf("(the 2× target is judged at %s)", fmtAcc(c.Thresholds[len(c.Thresholds)-1]))
		}
		if sp < 1 {
			verdict += "; float32 itself is the fastest"
		}
		out = append(out, fmt.Sprintf("**Time to %s:** the fastest other method is %s, %.1f s against float32's %.1f s, %.2f×: %s.", fmtAcc(th), runs[best].m.name, bestT, bt, sp, verdict))
	}
	// Bytes against time.
	b32 := base.bytes(np, params).total()
	for _, ru := range runs[1:] {
		if !ru.ok() || ru.r.IterMs <= 0 {
			continue
		}
		bt := ru.bytes(np, params).total()
		ratio := fmt.Sprintf("%.2f×", float64(bt)/float64(max(1, b32)))
		if after, ok := ru.powerSGDAfterWarmup(np, params, c.PowerSGDStart); ok && ru.m.file == "powersgd" {
			ratio = fmt.Sprintf("%.3f× (after its warm-up; %s over the run)", float64(after)/float64(max(1, b32)), ratio)
		}
		out = append(out, fmt.Sprintf("%s: bytes per iteration %s float32's; time per iteration %.2f×.", ru.m.name, ratio, ru.r.IterMs/base.r.IterMs))
	}
	if ru, ok := findRun(runs, "topk"); ok && ru.ok() {
		b := ru.bytes(np, params)
		out = append(out, fmt.Sprintf("Top-k pushes %d bytes a step, but the dense pull is %.0f %% of its traffic: sparse pushes alone cannot cut a hub round below the pulls, whatever the ratio.", b.sent, 100*float64(b.pull)/float64(max(1, b.total()))))
	}
	return out
}
