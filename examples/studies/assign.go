package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gorun/gorun/internal/chart"
	"github.com/gorun/gorun/ps"
)

// assignStudy tests the survey's first proposal, LB-BSP's optimal share
// rule: the MLP through one dedicated hub, with the upper half of the ranks
// slowed down, under equal shares (BSP), LB-BSP's proportional heuristic,
// and package assign's solver (gorun --hub-share optimal:...) with two
// time/resource weightings and with a deadline. For every configuration it
// reports the time per epoch, each rank's idle share, and the final test
// accuracy; for the two weightings the solver's objective computed from the
// measured per-iteration compute times (-metrics); and for the deadline,
// which the slow ranks' fixed per-iteration overhead makes binding, each
// iteration's measured makespan. Then it checks, in words from the data,
// that the solver matches or beats the heuristic on the objective it
// optimises and meets a deadline the heuristic misses.
//
// The deadline test is measured, not modelled: the slow ranks pay a
// fixed overhead every iteration (fmnist -overhead, a sleep after
// backward and before the push, outside the compute the hub measures),
// the same value the solver is told (overhead= in the spec), in the
// solver's deadline run and in a second heuristic run. Each iteration's
// makespan is the slowest rank's busy time, its wall time less its time
// blocked on the hub (-metrics' wall_ns − wait_ns): its compute, the
// overhead it paid and the little else a rank does between the two.
//
// The heuristic's run calibrates the solver's: the slow ranks' price
// and the two resource weights (either side of the weight at which the
// solver starts trading time for resources) follow from the per-sample
// costs it measured; the overhead and the deadline from the model hub 0
// plans with, fixed + perSample·x per rank, fitted to its records, so
// that under that model the solver meets the deadline with a margin and
// the proportional split misses it (or the report says that no overhead
// allows both). So the tests mean the same on a fast or a slow machine.
//
// Run time: six jobs of four epochs of 20000 samples (79 iterations of a
// global batch of 1024: large enough that a rank's compute, tens of
// milliseconds, is not lost in the scheduling noise of 5 processes on 2
// cores, which a batch of 128 left within a few milliseconds of its
// deadline) on -np ranks and a hub: with -np 4 on 2 shared cores the
// whole study took 64 s, well within the 15 minutes allowed on a quiet
// 2-core machine.
func assignStudy(o options) (string, error) {
	np := o.np
	if np < 2 {
		return "", fmt.Errorf("assign: -np %d: the study slows half of the ranks, it needs 2 or more", np)
	}
	train, test, epochs, batch, slow := 20000, 5000, 4.0, 1024, 4.0
	if o.quick {
		train, test, epochs, batch = 1000, 300, 1.0, 64
	}
	var slowRanks []int
	for r := np / 2; r < np; r++ {
		slowRanks = append(slowRanks, r)
	}
	isSlow := func(r int) bool { return slices.Contains(slowRanks, r) }
	perRank := func(f func(r int) string) string {
		s := make([]string, np)
		for r := range s {
			s[r] = f(r)
		}
		return strings.Join(s, "/")
	}
	capSlow := 3 * batch / (2 * np)
	caps := perRank(func(r int) string {
		if isSlow(r) {
			return strconv.Itoa(capSlow)
		}
		return "0"
	})

	rep, err := newReport(o, "assign")
	if err != nil {
		return "", err
	}
	type config struct {
		name, mode, spec string
		args             []string // trainer flags beyond base (-overhead)
		res              result
		m                [][]shareIter
	}
	base := []string{"-model", "mlp", "-train", strconv.Itoa(train), "-test", strconv.Itoa(test), "-epochs", fmt.Sprint(epochs),
		"-batch", strconv.Itoa(batch), "-lr", "0.1", "-momentum", "0.5", "-seed", "1",
		"-straggler", ints(slowRanks), "-slow", fmt.Sprint(slow)}
	runConfig := func(c *config) error {
		gorunFlags := []string{"--strategy", "hub", "--hubs", "1"}
		if c.spec != "" {
			if _, err := ps.ParseShareConfig(c.spec); err != nil {
				return err
			}
			gorunFlags = append(gorunFlags, "--hub-share", c.spec)
		}
		prefix := filepath.Join(rep.dir, strings.NewReplacer(" ", "-", ",", "", "(", "", ")", "", "+", "with").Replace(c.name)+".metrics")
		args := append(append(append([]string{"-mode", c.mode}, base...), c.args...), "-metrics", prefix)
		r, _, err := o.jobMayFail(np, gorunFlags, args...)
		if err != nil {
			return err
		}
		c.res = r
		if c.m, err = readShareMetrics(prefix, np); err != nil && r.Failed == "" {
			return err
		}
		return nil
	}
	bsp := &config{name: "BSP (equal shares)", mode: "bsp"}
	heur := &config{name: "LB-BSP (proportional)", mode: "lbbsp"}
	for _, c := range []*config{bsp, heur} {
		if err := runConfig(c); err != nil {
			return "", err
		}
	}
	for _, c := range []*config{bsp, heur} {
		if c.res.Failed != "" || shareRounds(c.m) < 3 {
			return "", fmt.Errorf("assign: the %s run failed or was too short (%d iterations): %s", c.name, shareRounds(c.m), c.res.Failed)
		}
	}

	// Calibration: each rank's seconds per sample (compute over samples
	// from the second iteration on); in the BSP run, where every rank has
	// the same share, how many times a fast rank's a slow rank's is (more
	// than -slow when the fixed part of a step weighs: the straggler
	// slows it too; and the more, the smaller the share).
	cost, even := shareCosts(heur.m), shareCosts(bsp.m)
	var cFast, cSlow []float64
	for r, c := range even {
		if isSlow(r) {
			cSlow = append(cSlow, c)
		} else {
			cFast = append(cFast, c)
		}
	}
	ratio := mean(cSlow) / mean(cFast)
	// Prices: 1 per busy second on a fast rank, and on a slow one a
	// quarter of a fast rank's price per sample. Moving a sample from a
	// fast rank to a slow one then lowers the resource term by
	// (1 − price·ratio)·c on each slow rank and raises the slow ranks'
	// time by ratio·c: the solver keeps the time-optimal split below the
	// resource weight threshold, and above it fills the slow ranks up to
	// their cap. The two settings lie a factor 4 either side.
	nSlow := float64(len(slowRanks))
	slowPrice := roundSig(0.25/ratio, 3)
	threshold := ratio / (nSlow * (1 - slowPrice*ratio))
	wA, wB := roundSig(threshold/4, 2), roundSig(4*threshold, 2)
	price := make([]float64, np)
	for r := range price {
		price[r] = 1
		if isSlow(r) {
			price[r] = slowPrice
		}
	}
	prices := perRank(func(r int) string { return strconv.FormatFloat(price[r], 'g', -1, 64) })
	// The slow ranks' overhead, paid (fmnist -overhead) and declared
	// alike, and the deadline, from the model hub 0 plans with: each
	// rank's compute for a share of x samples is fixed + perSample·x,
	// here fitted by least squares to the heuristic run's records (the
	// hub fits its own, from its reports, in the deadline run). For an
	// overhead o on each slow rank, tOpt(o) is the makespan of the
	// solver's best split under that model plus o, tProp(o) that of the
	// proportional split the hub settles on (it measures compute alone,
	// so it splits as without the overhead). The overhead is the one, on
	// a grid of 0.5 ms up to half the heuristic's median makespan, at
	// which the model separates the two most (tProp/tOpt largest); the
	// deadline is their geometric mean, at least margin·tOpt, where the
	// margin is deadlineMargin or the spread of the heuristic run's
	// measured makespans (95th percentile over median), whichever is
	// larger: "meets" asks 95 % of the iterations to be within the
	// deadline, and no split keeps iterations that vary by more than the
	// margin within it. If it is not below tProp, the report says that
	// the deadline cannot separate the rules.
	const deadlineMargin = 1.15
	fits := make([]affineFit, np)
	for r := range fits {
		// The LB-BSP run's shares settle: when they do not spread enough
		// to determine a rank's slope through the noise, its BSP records
		// (the even share) are added, as hub 0's fit also starts from
		// the even split's round.
		lb := heur.m[r][1:shareRounds(heur.m)]
		if fits[r] = fitAffine(lb); !fits[r].determined() {
			fits[r] = fitAffine(append(slices.Clone(lb), bsp.m[r][1:shareRounds(bsp.m)]...))
			fits[r].withEven = true
		}
	}
	speeds := make([]float64, np)
	for r := range speeds {
		speeds[r] = 1 / cost[r]
	}
	propShares, err := ps.Shares(batch, speeds)
	if err != nil {
		return "", err
	}
	type calib struct {
		over                []float64 // seconds per rank
		opt                 []int
		tOpt, tProp, deadln float64
	}
	heurSpans := shareMakespans(heur.m, make([]float64, np))
	spread := percentile(heurSpans, 0.95) / median(heurSpans)
	margin := math.Max(deadlineMargin, spread)
	calibrate := func(o time.Duration) (calib, error) {
		c := calib{over: make([]float64, np)}
		perSampleSpeed := make([]float64, np)
		fixedOver := make([]time.Duration, np)
		for r, f := range fits {
			if isSlow(r) {
				c.over[r] = o.Seconds()
			}
			perSampleSpeed[r] = 1 / f.perSample
			fixedOver[r] = time.Duration((f.fixed + c.over[r]) * float64(time.Second))
		}
		// Hub 0's kind of model offline: the per-sample parts as speeds,
		// the fixed parts added to the overheads (ShareConfig.Split).
		x, err := ps.ShareConfig{Rule: ps.ShareOptimal, Overhead: fixedOver}.Split(batch, perSampleSpeed, nil)
		if err != nil {
			return c, fmt.Errorf("assign: the solver on the fitted costs, overhead %v: %w", o, err)
		}
		c.opt, c.tOpt, c.tProp = x, affineMakespan(x, fits, c.over), affineMakespan(propShares, fits, c.over)
		c.deadln = math.Ceil(math.Max(math.Sqrt(c.tOpt*c.tProp), margin*c.tOpt)*1e4) / 1e4 // 0.1 ms
		return c, nil
	}
	halfMs := median(heurSpans) * 1000 / 2
	var cal calib
	overD := time.Duration(0)
	for o := 500 * time.Microsecond; o.Seconds()*1000 <= math.Max(halfMs, 0.5); o += 500 * time.Microsecond {
		c, err := calibrate(o)
		if err != nil {
			return "", err
		}
		if overD == 0 || c.tProp/c.tOpt > cal.tProp/cal.tOpt {
			cal, overD = c, o
		}
	}
	over, optShares, tOpt, tProp, deadline := cal.over, cal.opt, cal.tOpt, cal.tProp, cal.deadln
	separates := deadline < tProp
	overMs := 1000 * overD.Seconds()
	overheads := perRank(func(r int) string {
		if isSlow(r) {
			return overD.String()
		}
		return time.Duration(0).String()
	})
	overheadFlag := []string{"-overhead", ints(slowRanks) + ":" + overD.String()}
	// A slow rank at the one sample every rank takes, with the overhead:
	// how far below the deadline the model puts it (the least over the
	// slow ranks) is how much the hub's own fit of it may be off before a
	// round has no split within the deadline.
	slack := math.Inf(1)
	for _, r := range slowRanks {
		slack = min(slack, deadline-(fits[r].fixed+fits[r].perSample+over[r]))
	}

	timeFirst := fmt.Sprintf("optimal:time=1,resource=%g,price=%s", wA, prices)
	resourceFirst := fmt.Sprintf("optimal:time=1,resource=%g,price=%s,cap=%s", wB, prices, caps)
	deadlineSpec := fmt.Sprintf("optimal:deadline=%s,overhead=%s", time.Duration(deadline*float64(time.Second)), overheads)
	solA := &config{name: "solver, time first", mode: "lbbsp", spec: timeFirst}
	solB := &config{name: "solver, resource first", mode: "lbbsp", spec: resourceFirst}
	heurOver := &config{name: "LB-BSP (proportional) + overhead", mode: "lbbsp", args: overheadFlag}
	dl := &config{name: "solver, deadline + overhead", mode: "lbbsp", spec: deadlineSpec, args: overheadFlag}
	for _, c := range []*config{solA, solB, heurOver, dl} {
		if err := runConfig(c); err != nil {
			return "", err
		}
	}
	configs := []*config{bsp, heur, solA, solB, heurOver, dl}
	// The objectives: the median iteration's, and the mean.
	objective := func(c *config, w1, w3 float64, price []float64) (float64, float64) {
		v := shareObjective(c.m, w1, w3, price, nil)
		return median(v), mean(v)
	}
	objA := func(c *config) (float64, float64) { return objective(c, 1, wA, price) }
	objB := func(c *config) (float64, float64) { return objective(c, 1, wB, price) }
	// The deadline's objective: the measured makespan.
	objD := func(c *config) (float64, float64) {
		v := shareBusySpans(c.m)
		return median(v), mean(v)
	}
	cmdOverhead := strings.Join(overheadFlag, " ")

	rep.f("# LB-BSP's optimal share rule against its heuristic\n\n")
	rep.f("The claim to test: package assign's solver, which hub 0 runs instead of LB-BSP's proportional split when gorun is given `--hub-share optimal:...`, ")
	rep.f("does at least as well as the heuristic on the objective it minimises (w1·max_i t_i + w3·Σ_i r_i·t_i) and can meet a per-iteration deadline the heuristic misses.\n\n")
	rep.f("Setup: the real Fashion-MNIST (first %d training samples, %d test samples), the MLP (784-256-128-10), %g epoch(s) of a global batch of %d, ", train, test, epochs, batch)
	rep.f("SGD with momentum 0.5 and learning rate 0.1 at the hub, seed 1; %d ranks (on %s) and one dedicated hub (`gorun --hubs 1`). ", np, machine(o))
	rep.f("Ranks %s are stragglers (`-straggler %s -slow %g`): the trainer's straggler sleeps %g times its compute after each layer's backward and after the rest of the step, ", ints(slowRanks), ints(slowRanks), slow, slow-1)
	rep.f("so it computes %g times slower, and the hub, which measures compute time (sleep included), sees it so. ", slow)
	rep.f("In the two deadline runs the same ranks also pay a fixed overhead every iteration (`%s`): a sleep after backward and before the push, as a slow link would cost, ", cmdOverhead)
	rep.f("outside the compute the hub measures and whatever the rank's share.\n\n")
	rep.f("Configurations: BSP splits each batch evenly (`-mode bsp`); LB-BSP (`-mode lbbsp`) asks hub 0 for its share each iteration, which the hub computes from each rank's measured speed, ")
	rep.f("in proportion (the default rule) or by the solver with `gorun --hub-share SPEC`:\n\n")
	rep.f("- time first: `%s`;\n", timeFirst)
	rep.f("- resource first: `%s`: the slow ranks also hold at most %d samples (a memory cap);\n", resourceFirst, capSlow)
	rep.f("- deadline: `%s` with `%s`: time only, the overhead of %g ms the slow ranks pay declared to the solver, and a deadline of %.1f ms; ", deadlineSpec, cmdOverhead, overMs, 1000*deadline)
	rep.f("against it the proportional rule with the same overhead paid (LB-BSP (proportional) + overhead), whose hub, measuring compute alone, splits as without it.\n\n")
	rep.f("The first two runs calibrate the solver's settings (printed above as they were passed). With equal shares (BSP) the ranks measured these seconds per sample: %s ms (compute over samples, from the second iteration on), ",
		perRank(func(r int) string { return fmt.Sprintf("%.3f", 1000*even[r]) }))
	rep.f("so a slow rank costs %.2f times a fast rank's per sample (more than %g when a step's fixed costs weigh: the straggler slows them too, and they weigh more the smaller the share). ", ratio, slow)
	rep.f("A fast rank's price is 1 per busy second and a slow rank's %g, a quarter of a fast rank's per sample. ", slowPrice)
	rep.f("Moving a sample from a fast rank to a slow one then lowers the resource term by (1 − %g·%.2f)·c on each slow rank and raises the slow ranks' time by %.2f·c (c: a fast rank's seconds per sample), ", slowPrice, ratio, ratio)
	rep.f("so the solver keeps the time-optimal split, the heuristic's, while the resource weight is below %.2f/(%g·(1 − %g·%.2f)) = %.2f, and above it fills the slow ranks up to their cap: ", ratio, nSlow, slowPrice, ratio, threshold)
	rep.f("time first (%g) should split as the heuristic does, resource first (%g) trade time for resources.\n\n", wA, wB)
	rep.f("Command: `bin/studies -np %d assign` (each job is listed at the end). ", np)
	rep.f("Six jobs of %g epoch(s) each; with 4 ranks on 2 cores the whole study takes under 2 minutes (this run's time is at the end).\n\n", epochs)

	rep.f("| configuration | time per epoch (s) | iterations per rank | mean share per rank | idle share per rank | test accuracy |\n| --- | --- | --- | --- | --- | --- |\n")
	for _, c := range configs {
		perEpoch := "—"
		acc := "failed: " + shorten(c.res.Failed, 100)
		if c.res.Failed == "" {
			perEpoch, acc = fmt.Sprintf("%.2f", c.res.Time/epochs), fmt.Sprintf("%.4f", c.res.Accuracy)
		}
		idle := make([]string, len(c.res.RankIdle))
		for r, v := range c.res.RankIdle {
			idle[r] = fmt.Sprintf("%.2f", v)
		}
		rep.f("| %s | %s | %d | %s | %s | %s |\n", c.name, perEpoch, shareRounds(c.m), shareMeans(c.m), strings.Join(idle, ", "), acc)
	}
	rep.f("\nThe mean share is each rank's samples per iteration, from the second iteration on; the idle share is the part of each rank's training time it spent waiting (for its share, and for the hub's answer to its push), from the trainer's result line ")
	rep.f("(its busy time is compute and waiting: the overhead the slow ranks pay is in neither, so it shows in the time per epoch, not in these shares).\n\n")

	rep.f("## The objective, from the measured times\n\n")
	rep.f("For the configurations without the overhead, from the per-iteration records every rank writes (`fmnist -metrics`: `batch` and `compute_ns` of each iteration), iteration k's objective under weights (w1, w3) is\n\n")
	rep.f("    w1 · max_i t_i,k + w3 · Σ_i r_i · t_i,k,   t_i,k = compute_i,k\n\n")
	rep.f("where compute_i,k is rank i's measured compute time in iteration k (the straggler's sleep included: what the hub measures) and r_i its price (%s). ", prices)
	rep.f("Iterations 1 to K−1 of every rank count (iteration 0 is split evenly in every mode, before any speed is known). ")
	rep.f("Each cell is the median iteration's value, in milliseconds, and in parentheses the mean, which a single slow iteration (the machine busy elsewhere) moves. ")
	rep.f("Time spent waiting is not in t_i: the solver's model counts busy time only.\n\n")
	rep.f("| configuration | time first (w1 = 1, w3 = %g) | resource first (w1 = 1, w3 = %g) |\n| --- | --- | --- |\n", wA, wB)
	cell := func(md, mn float64) string { return fmt.Sprintf("%.2f (%.2f)", 1000*md, 1000*mn) }
	for _, c := range []*config{bsp, heur, solA, solB} {
		rep.f("| %s | %s | %s |\n", c.name, cell(objA(c)), cell(objB(c)))
	}

	rep.f("\n## The deadline, with the overhead paid\n\n")
	rep.f("In the two runs that pay the overhead, iteration k's makespan is measured: max_i (wall_i,k − wait_i,k), each rank's wall time in the iteration (from its share request to the end of its pull) less the time it was blocked on the hub (`-metrics`' `wall_ns` and `wait_ns`), ")
	rep.f("that is its compute, the overhead it paid (`overhead_ns`, timed around the sleep) and the little else it does between them. Iterations 1 to K−1 count. ")
	rep.f("The round's time as the ranks see it, the hub's push and pull included, is longer: it is the last column (the slowest rank's wall time, median), which the solver's model leaves out and every rule pays alike.\n\n")
	within := func(c *config) (float64, float64) {
		ms := shareBusySpans(c.m)
		n := 0
		for _, v := range ms {
			if v <= deadline {
				n++
			}
		}
		return float64(n) / float64(max(1, len(ms))), percentile(ms, 0.95)
	}
	rep.f("| configuration | measured makespan (ms) | iterations within the %.1f ms deadline | 95th percentile of the makespan | overhead paid per iteration, slow ranks (ms) | round time (ms) |\n| --- | --- | --- | --- | --- | --- |\n", 1000*deadline)
	for _, c := range []*config{heurOver, dl} {
		share, p95 := within(c)
		rep.f("| %s | %s | %.0f %% | %.2f ms | %.2f | %.2f |\n", c.name, cell(objD(c)), 100*share, 1000*p95, 1000*sharePaid(c.m, slowRanks), 1000*median(shareRoundTimes(c.m)))
	}
	for _, c := range []*config{heurOver, dl} {
		if c.res.Failed != "" {
			rep.f("\nThe run %s failed after %d iterations: its row holds the iterations before (the checks below say why it failed).\n", c.name, shareRounds(c.m))
		}
	}
	if n := relaxedRounds(dl.res.Output); n > 0 {
		rep.f("\nIn %d of the solver's %d iterations no split met the deadline under the models hub 0 had fitted (a slow spell raises them); hub 0 split those for the least makespan instead (`miss=relax`, the default; `miss=fail` would have failed the run) and told the ranks (`relaxed=%d` on the trainer's result line).\n", n, shareRounds(dl.m), n)
	}

	// Charts: idle share per rank, and the measured per-iteration
	// makespan against the deadline.
	idle := &chart.Bar{Title: fmt.Sprintf("Idle share of each rank's time (ranks %s %gx slower)", ints(slowRanks), slow), YLabel: "idle / wall time"}
	for r := range np {
		idle.Categories = append(idle.Categories, fmt.Sprintf("rank %d", r))
	}
	for _, c := range configs {
		if len(c.res.RankIdle) == np {
			idle.Groups = append(idle.Groups, c.name)
			idle.Values = append(idle.Values, c.res.RankIdle)
		}
	}
	span := &chart.Line{Title: "Measured makespan per iteration, overhead paid", XLabel: "iteration", YLabel: "ms"}
	for _, c := range []*config{heurOver, dl} {
		ms := shareBusySpans(c.m)
		if len(ms) == 0 {
			continue
		}
		var x, y []float64
		for k, v := range ms {
			x, y = append(x, float64(k+1)), append(y, 1000*v)
		}
		span.Series = append(span.Series, chart.Series{Name: c.name, X: x, Y: y})
		if c == heurOver {
			span.Series = append(span.Series, chart.Series{Name: "deadline", X: []float64{1, x[len(x)-1]}, Y: []float64{1000 * deadline, 1000 * deadline}, Dashed: true})
		}
	}
	for name, p := range map[string]chart.Plot{"idle.png": idle, "makespan.png": span} {
		if err := rep.writeChart(name, p); err != nil {
			return "", err
		}
	}
	rep.f("\n![idle share per rank](%s/idle.png)\n\n![measured makespan per iteration](%s/makespan.png)\n\n", rep.name, rep.name)

	rep.f("## How the overhead and the deadline were chosen\n\n")
	rep.f("Hub 0 plans with a model of each rank's compute for a share of x samples, fixed + perSample·x, which it fits to the rank's reports by weighted least squares (package ps, \"Load balancing (LB-BSP)\"): ")
	rep.f("the fixed part is a step's compute that does not grow with the share (for a straggler, with the sleep that follows it). ")
	rep.f("The study fits the same model by least squares to the LB-BSP run's records (`batch` and `compute_ns` of iterations 1 to K−1, with the hub's clamp: the fixed part within [0, 0.99 × the mean time], the line through the means): ")
	fitText := make([]string, np)
	for r, f := range fits {
		from := "LB-BSP"
		if f.withEven {
			from = "LB-BSP and BSP"
		}
		fitText[r] = fmt.Sprintf("rank %d: %.3f + %.4f·x ms (%s, shares %d to %d, residuals' standard deviation %.2f ms)", r, 1000*f.fixed, 1000*f.perSample, from, f.lo, f.hi, 1000*f.resid)
	}
	rep.f("%s. ", strings.Join(fitText, "; "))
	rep.f("A rank marked LB-BSP and BSP is one whose LB-BSP shares, settled near the proportional split, did not spread enough to determine the slope through the noise in its times (the least-squares slope less than twice its standard error): its BSP records, at the even share, are added to the fit, as hub 0's fit too starts from the even split's round. ")
	rep.f("For an overhead o on each slow rank, the solver's best split of %d samples under this model (ShareConfig.Split with each rank's fixed part added to its overhead, as hub 0 adds it) has a modelled makespan T_opt = max_i (fixed_i + perSample_i·x_i + o_i), ", batch)
	rep.f("and the proportional split, by the LB-BSP run's samples per second (%s ms a sample, compute over samples; the hub measures compute alone, so it splits so with the overhead too), T_prop. ",
		perRank(func(r int) string { return fmt.Sprintf("%.3f", 1000*cost[r]) }))
	rep.f("Of the overheads from 0.5 ms to %g ms (half the LB-BSP run's median makespan) in steps of 0.5 ms, the model separates the two rules most (T_prop/T_opt largest) at %g ms: ", math.Floor(math.Max(halfMs, 0.5)*2)/2, overMs)
	rep.f("the solver's split is %v with T_opt = %.2f ms, the proportional split %v with T_prop = %.2f ms (%.2f times). ", optShares, 1000*tOpt, propShares, 1000*tProp, tProp/tOpt)
	rep.f("The slow ranks pay that overhead (`%s`) and the solver is told it (`overhead=%s`; the fixed parts it fits itself). ", cmdOverhead, overheads)
	rep.f("The deadline's margin over T_opt, %.4f, is the larger of %g and the spread of the LB-BSP run's measured makespans (95th percentile over median: %.4f), since a deadline is met when 95 %% of the iterations are within it, and no split keeps iterations that vary by more than that under a deadline closer to its makespan. ",
		margin, deadlineMargin, spread)
	rep.f("The deadline is the geometric mean of T_opt and T_prop, %.2f ms, and at least the margin × T_opt = %.2f ms, rounded up to 0.1 ms: %.1f ms. ",
		1000*math.Sqrt(tOpt*tProp), 1000*margin*tOpt, 1000*deadline)
	if separates {
		rep.f("The proportional split's modelled makespan is %.1f %% above it, so the heuristic is expected to miss the deadline and the solver to meet it. ", 100*(tProp/deadline-1))
	} else {
		rep.f("**The deadline does not separate the rules**: the proportional split's modelled makespan (%.2f ms) is not above it, for no overhead on the grid leaves room between %.2f × T_opt and T_prop with the costs this run measured, so the heuristic is expected to meet it as well. ", 1000*tProp, margin)
	}
	rep.f("A slow rank at the one sample every rank takes, overhead included, is modelled %.2f ms under the deadline: that is how far hub 0's own fit of a slow rank, made in the run from the shares the solver gives it, may be off (a slow round raises it) before a round has no split within the deadline and hub 0 relaxes it for that round. ", 1000*slack)
	rep.f("The model is only the calibration: the deadline test above is judged on the makespans the two runs measured.\n\n")

	// The checks, from the numbers above.
	rep.f("## Checks\n\n")
	const band = 0.05 // measurement noise between runs
	judge := func(solver, heuristic float64) string {
		switch {
		case solver < heuristic*(1-band):
			return "beats"
		case solver <= heuristic*(1+band):
			return "matches"
		}
		return "loses to"
	}
	verdicts := []struct {
		c, against *config
		f          func(*config) (float64, float64)
		what       string
	}{{solA, heur, objA, "Time first"}, {solB, heur, objB, "Resource first"}, {dl, heurOver, objD, "Deadline (measured makespan, overhead paid)"}}
	lost := false
	for _, s := range verdicts {
		if s.c.res.Failed != "" {
			rep.f("- %s: the run failed (%s), so there is no objective to compare.\n", s.what, shorten(s.c.res.Failed, 160))
			lost = true
			continue
		}
		if s.against.res.Failed != "" {
			rep.f("- %s: the heuristic's run failed (%s), so there is no objective to compare.\n", s.what, shorten(s.against.res.Failed, 160))
			continue
		}
		sv, _ := s.f(s.c)
		hv, _ := s.f(s.against)
		v := judge(sv, hv)
		lost = lost || v == "loses to"
		rep.f("- %s: the median iteration's objective is %.2f ms with the solver against %.2f ms with the heuristic (%+.1f %%): the solver **%s** the heuristic on the objective it optimises (within ±%.0f %% counts as a match: runs differ by that much in their measured compute).\n",
			s.what, 1000*sv, 1000*hv, 100*(sv/hv-1), v, 100*band)
	}
	hs, hp := within(heurOver)
	switch {
	case heurOver.res.Failed != "":
		rep.f("- Deadline: the proportional rule's run with the overhead failed (%s), so there is nothing to hold the solver's against.\n", shorten(heurOver.res.Failed, 160))
	case dl.res.Failed != "":
		rep.f("- Deadline: the solver's run failed (%s), so the deadline test has no result.\n", shorten(dl.res.Failed, 160))
	default:
		ds, dp := within(dl)
		meets := func(share float64) string {
			if share >= 0.95 {
				return "meets"
			}
			return "misses"
		}
		rep.f("- Deadline %.1f ms (overhead paid, measured): the solver **%s** it (%.0f %% of its iterations within it, 95th percentile %.2f ms), the heuristic **%s** it (%.0f %%, 95th percentile %.2f ms); ",
			1000*deadline, meets(ds), 100*ds, 1000*dp, meets(hs), 100*hs, 1000*hp)
		rep.f("\"meets\" means at least 95 %% of the iterations, since measured compute times and sleeps vary from one iteration to the next while the solver plans with the hub's fitted models.")
		if !separates {
			rep.f(" The model expected the heuristic to meet this deadline as well (see how it was chosen): the test cannot separate the rules in this run.")
		}
		rep.f("\n")
		rep.f("- What the deadline costs: the solver's deadline run took %.2f s per epoch against %.2f s for the proportional rule paying the same overhead, and %.2f s for the proportional rule without it; the slow ranks paid %.2f and %.2f ms per iteration (measured).\n",
			dl.res.Time/epochs, heurOver.res.Time/epochs, heur.res.Time/epochs, 1000*sharePaid(dl.m, slowRanks), 1000*sharePaid(heurOver.m, slowRanks))
	}
	if lost {
		var resid, shares []string
		for _, r := range slowRanks {
			resid = append(resid, fmt.Sprintf("%.2f", 1000*fits[r].resid))
			shares = append(shares, fmt.Sprintf("%d to %d", fits[r].lo, fits[r].hi))
		}
		rep.f("- Where the solver lost or failed: it plans with hub 0's model of each rank, t_i = fixed_i + perSample_i·x_i + o_i, which the hub refits every round from the rank's reports by least squares, the newest weighing most (package ps, \"Load balancing (LB-BSP)\"); ")
		rep.f("under a deadline, a round whose models put no split within it fails every rank's share request (the error lists the models hub 0 held). ")
		rep.f("The model is a line through noisy times: fitted to the LB-BSP run, the slow ranks' residuals have a standard deviation of %s ms (the machine is shared, and a straggler sleeps %g times whatever its compute took, a delay included), so one slow round can raise the fixed part the hub fits for a slow rank by milliseconds; ", strings.Join(resid, " and "), slow-1)
		rep.f("and a line fitted to the shares a rank has held (the slow ranks' %s samples in the records the study fitted) need not hold at the one or two samples a deadline leaves it. ", strings.Join(shares, " and "))
		rep.f("In the study's model a slow rank at one sample with the overhead was %.2f ms under the %.1f ms deadline: a hub model of it that much higher makes the round infeasible. ", 1000*slack, 1000*deadline)
		rep.f("The mean shares in the first table show where each run settled; the proportional rule, by contrast, settles where every rank takes the same time, whatever the shape of its cost (its fixed point: x_i proportional to x_i/t_i).\n")
	}
	if solA.res.Failed == "" && solB.res.Failed == "" {
		rep.f("- The trade: resource first spends %.2f s per epoch against time first's %.2f s (%.2f×), for a price-weighted busy time per iteration (median) of %.2f against %.2f ms.\n",
			solB.res.Time/epochs, solA.res.Time/epochs, solB.res.Time/math.Max(solA.res.Time, 1e-9), 1000*median(shareObjective(solB.m, 0, 1, price, nil)), 1000*median(shareObjective(solA.m, 0, 1, price, nil)))
	}
	rep.f("- Equal shares (BSP) against LB-BSP: %.2f against %.2f s per epoch, median makespan %.2f against %.2f ms.\n",
		bsp.res.Time/epochs, heur.res.Time/epochs, 1000*median(shareMakespans(bsp.m, make([]float64, np))), 1000*median(shareMakespans(heur.m, make([]float64, np))))
	rep.f("\n## Jobs\n\n")
	for _, c := range configs {
		rep.f("- %s: `%s`\n", c.name, c.res.Command)
	}
	return rep.write(o)
}

// roundSig rounds v to n significant digits.
func roundSig(v float64, n int) float64 {
	if v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return v
	}
	f, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', n, 64), 64)
	return f
}

// shareIter is one iteration of one rank, from fmnist -metrics, in
// seconds: its compute, its wall time, the time it was blocked on the
// hub and the -overhead it paid.
type shareIter struct {
	batch                         int
	compute, wall, wait, overhead float64
}

// readShareMetrics reads PREFIX.RANK for ranks 0..np-1: each a JSON line
// per iteration (ps.Metrics).
func readShareMetrics(prefix string, np int) ([][]shareIter, error) {
	out := make([][]shareIter, np)
	for r := range np {
		f, err := os.Open(fmt.Sprintf("%s.%d", prefix, r))
		if err != nil {
			return out, err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var m struct {
				Iteration int   `json:"iteration"`
				Batch     int   `json:"batch"`
				Compute   int64 `json:"compute_ns"`
				Wall      int64 `json:"wall_ns"`
				Wait      int64 `json:"wait_ns"`
				Overhead  int64 `json:"overhead_ns"`
			}
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				f.Close()
				return out, fmt.Errorf("%s.%d: %w", prefix, r, err)
			}
			if m.Iteration != len(out[r]) {
				f.Close()
				return out, fmt.Errorf("%s.%d: iteration %d after %d", prefix, r, m.Iteration, len(out[r]))
			}
			out[r] = append(out[r], shareIter{m.Batch, float64(m.Compute) / 1e9, float64(m.Wall) / 1e9, float64(m.Wait) / 1e9, float64(m.Overhead) / 1e9})
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return out, err
		}
	}
	return out, nil
}

// shareRounds is the number of iterations every rank recorded.
func shareRounds(m [][]shareIter) int {
	if len(m) == 0 {
		return 0
	}
	k := len(m[0])
	for _, r := range m {
		k = min(k, len(r))
	}
	return k
}

// shareObjective is each iteration's w1·max_i t_i + w3·Σ_i r_i·t_i with
// t_i = compute_i + o_i (price and over nil: none), for iterations 1 to
// K−1.
func shareObjective(m [][]shareIter, w1, w3 float64, price, over []float64) []float64 {
	var out []float64
	for k := 1; k < shareRounds(m); k++ {
		T, res := 0.0, 0.0
		for i := range m {
			t := m[i][k].compute
			if over != nil {
				t += over[i]
			}
			if price != nil {
				res += price[i] * t
			}
			T = max(T, t)
		}
		out = append(out, w1*T+w3*res)
	}
	return out
}

// shareMakespans is each iteration's max_i (compute_i + over_i), from
// iteration 1 on.
func shareMakespans(m [][]shareIter, over []float64) []float64 {
	return shareObjective(m, 1, 0, nil, over)
}

// shareBusySpans is each iteration's measured makespan, max_i (wall_i −
// wait_i): the slowest rank's time in the iteration not blocked on the
// hub (its compute, the overhead it paid, and what else it did between),
// from iteration 1 on.
func shareBusySpans(m [][]shareIter) []float64 {
	var out []float64
	for k := 1; k < shareRounds(m); k++ {
		T := 0.0
		for i := range m {
			T = max(T, m[i][k].wall-m[i][k].wait)
		}
		out = append(out, T)
	}
	return out
}

// shareRoundTimes is each iteration's max_i wall_i, the round's time as
// the slowest rank saw it, from iteration 1 on.
func shareRoundTimes(m [][]shareIter) []float64 {
	var out []float64
	for k := 1; k < shareRounds(m); k++ {
		T := 0.0
		for i := range m {
			T = max(T, m[i][k].wall)
		}
		out = append(out, T)
	}
	return out
}

// sharePaid is the -overhead the given ranks paid per iteration, on
// average over their iterations from 1 on (NaN for none).
func sharePaid(m [][]shareIter, ranks []int) float64 {
	var v []float64
	for _, r := range ranks {
		if r < len(m) {
			for k := 1; k < len(m[r]); k++ {
				v = append(v, m[r][k].overhead)
			}
		}
	}
	return mean(v)
}

// shareCosts is each rank's seconds per sample, its compute over its
// samples from iteration 1 on.
func shareCosts(m [][]shareIter) []float64 {
	c := make([]float64, len(m))
	for i, r := range m {
		t, n := 0.0, 0
		for k := 1; k < len(r); k++ {
			t, n = t+r[k].compute, n+r[k].batch
		}
		c[i] = t / float64(max(1, n))
	}
	return c
}

// affineFit is a rank's compute for a share of x samples modelled as
// fixed + perSample·x seconds, as hub 0 models it for the optimal rule,
// with resid the standard deviation of the fit's residuals, lo and hi
// the least and largest share it was fitted on, and slope and slopeSE
// the least-squares slope before the clamp and its standard error.
type affineFit struct {
	fixed, perSample, resid float64
	slope, slopeSE          float64
	lo, hi                  int
	withEven                bool // fitted to the BSP run's records too
}

// determined reports whether the shares spread enough, for the noise in
// the times, to determine the slope: the least-squares slope is at least
// twice its standard error.
func (f affineFit) determined() bool { return f.slope >= 2*f.slopeSE }

// fitAffine fits fixed + perSample·x to the iterations' (batch,
// compute) by ordinary least squares, with hub 0's clamp (package ps,
// "Load balancing"): the fixed part within [0, 0.99·ȳ], and the line
// through the means (x̄, ȳ), so perSample = (ȳ − fixed)/x̄ stays
// positive. Shares that do not vary leave no fixed part (ȳ/x̄ a
// sample). Iterations without samples or time are left out, as the hub
// leaves them out.
func fitAffine(it []shareIter) affineFit {
	var xs, ys []float64
	f := affineFit{lo: math.MaxInt, slope: math.NaN(), slopeSE: math.NaN()}
	for _, v := range it {
		if v.batch > 0 && v.compute > 0 {
			xs, ys = append(xs, float64(v.batch)), append(ys, v.compute)
			f.lo, f.hi = min(f.lo, v.batch), max(f.hi, v.batch)
		}
	}
	if len(xs) == 0 {
		f.perSample, f.resid = math.NaN(), math.NaN()
		return f
	}
	mx, my := mean(xs), mean(ys)
	sxx, sxy := 0.0, 0.0
	for k := range xs {
		sxx += (xs[k] - mx) * (xs[k] - mx)
		sxy += (xs[k] - mx) * (ys[k] - my)
	}
	if sxx > 0 {
		f.slope = sxy / sxx
		f.fixed = min(max(my-f.slope*mx, 0), 0.99*my)
		if len(xs) > 2 {
			ss := 0.0
			for k := range xs {
				e := ys[k] - (my - f.slope*mx) - f.slope*xs[k]
				ss += e * e
			}
			f.slopeSE = math.Sqrt(ss / float64(len(xs)-2) / sxx)
		}
	}
	f.perSample = (my - f.fixed) / mx
	ss := 0.0
	for k := range xs {
		e := ys[k] - f.fixed - f.perSample*xs[k]
		ss += e * e
	}
	f.resid = math.Sqrt(ss / float64(len(xs)))
	return f
}

// affineMakespan is max_i (fixed_i + perSample_i·x_i + over_i).
func affineMakespan(x []int, fits []affineFit, over []float64) float64 {
	T := 0.0
	for i := range x {
		T = max(T, fits[i].fixed+fits[i].perSample*float64(x[i])+over[i])
	}
	return T
}

// shareMeans is each rank's mean share from iteration 1 on, as "a, b, c".
func shareMeans(m [][]shareIter) string {
	s := make([]string, len(m))
	for i, r := range m {
		t, n := 0, 0
		for k := 1; k < len(r); k++ {
			t, n = t+r[k].batch, n+1
		}
		s[i] = fmt.Sprintf("%.1f", float64(t)/float64(max(1, n)))
	}
	return strings.Join(s, ", ")
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

func median(v []float64) float64 { return percentile(v, 0.5) }

// percentile is the value at quantile q of v (nearest rank), NaN for none.
func percentile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	sort.Float64s(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// ints is 0,1,2.
func ints(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

var relaxedRE = regexp.MustCompile(`\[0\] mode=.* relaxed=(\d+)`)

// relaxedRounds is the relaxed=N of rank 0's result line in out: the
// iterations hub 0 split without the deadline (0 when it has none).
func relaxedRounds(out string) int {
	m := relaxedRE.FindStringSubmatch(out)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}
