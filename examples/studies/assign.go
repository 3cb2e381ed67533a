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
	st, err := newAssignRun(o)
	if err != nil {
		return "", err
	}
	if err := st.runBaselines(); err != nil {
		return "", err
	}
	st.calibratePrices()
	if err := st.calibrateDeadline(); err != nil {
		return "", err
	}
	if err := st.runSolvers(); err != nil {
		return "", err
	}
	st.reportSetup()
	st.reportRuns()
	st.reportObjectives()
	st.reportDeadline()
	if err := st.reportCharts(); err != nil {
		return "", err
	}
	st.reportCalibration()
	st.reportChecks()
	st.reportJobs()
	return st.rep.write(o)
}

// assignRun is the assign study under way: its setup, its six runs, and
// what the first two told the solver's (see calibratePrices and
// calibrateDeadline).
type assignRun struct {
	o   options
	rep *report

	np, train, test, batch int
	epochs, slow           float64  // epochs; how many times slower the slow ranks compute
	slowRanks              []int    // the upper half of the ranks
	capSlow                int      // a slow rank's cap in the resource-first run
	caps                   string   // capSlow as a per-rank list, 0 (no cap) for the others
	base                   []string // every run's trainer flags

	// The runs: equal shares, the proportional rule, the solver's two
	// weightings, and the proportional rule and the solver's deadline
	// with the slow ranks' overhead paid. configs lists all six.
	bsp, heur, solA, solB, heurOver, dl *assignConfig
	configs                             []*assignConfig

	// The calibration from the first two runs (see calibratePrices and
	// calibrateDeadline).
	cost, even                  []float64 // seconds per sample by rank: proportional, BSP
	ratio                       float64   // a slow rank's cost over a fast one's, in the BSP run
	nSlow, slowPrice, threshold float64
	wA, wB                      float64 // the resource weights, time first and resource first
	price                       []float64
	prices                      string
	fits                        []affineFit
	propShares                  []int
	spread, margin, halfMs      float64
	over                        []float64 // the overhead paid, seconds by rank
	optShares                   []int
	tOpt, tProp, deadline       float64
	separates                   bool // the model puts the proportional split over the deadline
	overD                       time.Duration
	overMs                      float64
	overheads                   string
	overheadFlag                []string
	slack                       float64
	timeFirst, resourceFirst    string // the solver's share specs
	deadlineSpec, cmdOverhead   string
}

// assignConfig is one run of the study: the trainer's mode and gorun's
// share spec (none: the proportional rule), and what it measured.
type assignConfig struct {
	name, mode, spec string
	args             []string // trainer flags beyond base (-overhead)
	res              result
	m                [][]shareIter
}

// deadlineMargin is the least margin of the deadline over the solver's
// modelled makespan (see calibrateDeadline).
const deadlineMargin = 1.15

// newAssignRun sets the study up for o: the sizes, the slow ranks, their
// cap, the report and the trainer's flags.
func newAssignRun(o options) (*assignRun, error) {
	st := &assignRun{o: o, np: o.np}
	if st.np < 2 {
		return nil, fmt.Errorf("assign: -np %d: the study slows half of the ranks, it needs 2 or more", st.np)
	}
	st.train, st.test, st.epochs, st.batch, st.slow = 20000, 5000, 4.0, 1024, 4.0
	if o.quick {
		st.train, st.test, st.epochs, st.batch = 1000, 300, 1.0, 64
	}
	for r := st.np / 2; r < st.np; r++ {
		st.slowRanks = append(st.slowRanks, r)
	}
	st.capSlow = 3 * st.batch / (2 * st.np)
	st.caps = st.perRank(func(r int) string {
		if st.isSlow(r) {
			return strconv.Itoa(st.capSlow)
		}
		return "0"
	})
	var err error
	if st.rep, err = newReport(o, "assign"); err != nil {
		return nil, err
	}
	st.base = []string{"-model", "mlp", "-train", strconv.Itoa(st.train), "-test", strconv.Itoa(st.test), "-epochs", fmt.Sprint(st.epochs),
		"-batch", strconv.Itoa(st.batch), "-lr", "0.1", "-momentum", "0.5", "-seed", "1",
		"-straggler", ints(st.slowRanks), "-slow", fmt.Sprint(st.slow)}
	return st, nil
}

// isSlow says whether rank r is one of the slow ranks.
func (st *assignRun) isSlow(r int) bool { return slices.Contains(st.slowRanks, r) }

// perRank is a per-rank list, f(r) for every rank, slash-separated.
func (st *assignRun) perRank(f func(r int) string) string {
	s := make([]string, st.np)
	for r := range s {
		s[r] = f(r)
	}
	return strings.Join(s, "/")
}

// run runs one configuration and reads its per-iteration records.
func (st *assignRun) run(c *assignConfig) error {
	gorunFlags := []string{"--strategy", "hub", "--hubs", "1"}
	if c.spec != "" {
		if _, err := ps.ParseShareConfig(c.spec); err != nil {
			return err
		}
		gorunFlags = append(gorunFlags, "--hub-share", c.spec)
	}
	prefix := filepath.Join(st.rep.dir, strings.NewReplacer(" ", "-", ",", "", "(", "", ")", "", "+", "with").Replace(c.name)+".metrics")
	args := append(append(append([]string{"-mode", c.mode}, st.base...), c.args...), "-metrics", prefix)
	r, _, err := st.o.jobMayFail(st.np, gorunFlags, args...)
	if err != nil {
		return err
	}
	c.res = r
	if c.m, err = readShareMetrics(prefix, st.np); err != nil && r.Failed == "" {
		return err
	}
	return nil
}

// runBaselines runs equal shares and the proportional rule, which the
// calibration reads.
func (st *assignRun) runBaselines() error {
	st.bsp = &assignConfig{name: "BSP (equal shares)", mode: "bsp"}
	st.heur = &assignConfig{name: "LB-BSP (proportional)", mode: "lbbsp"}
	for _, c := range []*assignConfig{st.bsp, st.heur} {
		if err := st.run(c); err != nil {
			return err
		}
	}
	for _, c := range []*assignConfig{st.bsp, st.heur} {
		if c.res.Failed != "" || shareRounds(c.m) < 3 {
			return fmt.Errorf("assign: the %s run failed or was too short (%d iterations): %s", c.name, shareRounds(c.m), c.res.Failed)
		}
	}
	return nil
}

// calibratePrices derives the slow ranks' price and the two resource
// weights from the costs the first two runs measured.
func (st *assignRun) calibratePrices() {
	// Calibration: each rank's seconds per sample (compute over samples
	// from the second iteration on); in the BSP run, where every rank has
	// the same share, how many times a fast rank's a slow rank's is (more
	// than -slow when the fixed part of a step weighs: the straggler
	// slows it too; and the more, the smaller the share).
	st.cost, st.even = shareCosts(st.heur.m), shareCosts(st.bsp.m)
	var cFast, cSlow []float64
	for r, c := range st.even {
		if st.isSlow(r) {
			cSlow = append(cSlow, c)
		} else {
			cFast = append(cFast, c)
		}
	}
	st.ratio = mean(cSlow) / mean(cFast)
	// Prices: 1 per busy second on a fast rank, and on a slow one a
	// quarter of a fast rank's price per sample. Moving a sample from a
	// fast rank to a slow one then lowers the resource term by
	// (1 − price·ratio)·c on each slow rank and raises the slow ranks'
	// time by ratio·c: the solver keeps the time-optimal split below the
	// resource weight threshold, and above it fills the slow ranks up to
	// their cap. The two settings lie a factor 4 either side.
	st.nSlow = float64(len(st.slowRanks))
	st.slowPrice = roundSig(0.25/st.ratio, 3)
	st.threshold = st.ratio / (st.nSlow * (1 - st.slowPrice*st.ratio))
	st.wA, st.wB = roundSig(st.threshold/4, 2), roundSig(4*st.threshold, 2)
	st.price = make([]float64, st.np)
	for r := range st.price {
		st.price[r] = 1
		if st.isSlow(r) {
			st.price[r] = st.slowPrice
		}
	}
	st.prices = st.perRank(func(r int) string { return strconv.FormatFloat(st.price[r], 'g', -1, 64) })
}

// calibrateDeadline derives the slow ranks' overhead and the deadline
// from the model hub 0 plans with, fitted to the first two runs.
func (st *assignRun) calibrateDeadline() error {
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
	st.fits = make([]affineFit, st.np)
	for r := range st.fits {
		// The LB-BSP run's shares settle: when they do not spread enough
		// to determine a rank's slope through the noise, its BSP records
		// (the even share) are added, as hub 0's fit also starts from
		// the even split's round.
		lb := st.heur.m[r][1:shareRounds(st.heur.m)]
		if st.fits[r] = fitAffine(lb); !st.fits[r].determined() {
			st.fits[r] = fitAffine(append(slices.Clone(lb), st.bsp.m[r][1:shareRounds(st.bsp.m)]...))
			st.fits[r].withEven = true
		}
	}
	speeds := make([]float64, st.np)
	for r := range speeds {
		speeds[r] = 1 / st.cost[r]
	}
	var err error
	if st.propShares, err = ps.Shares(st.batch, speeds); err != nil {
		return err
	}
	heurSpans := shareMakespans(st.heur.m, make([]float64, st.np))
	st.spread = percentile(heurSpans, 0.95) / median(heurSpans)
	st.margin = math.Max(deadlineMargin, st.spread)
	st.halfMs = median(heurSpans) * 1000 / 2
	var cal assignCalib
	st.overD = time.Duration(0)
	for o := 500 * time.Microsecond; o.Seconds()*1000 <= math.Max(st.halfMs, 0.5); o += 500 * time.Microsecond {
		c, err := st.calibrateAt(o)
		if err != nil {
			return err
		}
		if st.overD == 0 || c.tProp/c.tOpt > cal.tProp/cal.tOpt {
			cal, st.overD = c, o
		}
	}
	st.over, st.optShares, st.tOpt, st.tProp, st.deadline = cal.over, cal.opt, cal.tOpt, cal.tProp, cal.deadln
	st.separates = st.deadline < st.tProp
	st.overMs = 1000 * st.overD.Seconds()
	st.overheads = st.perRank(func(r int) string {
		if st.isSlow(r) {
			return st.overD.String()
		}
		return time.Duration(0).String()
	})
	st.overheadFlag = []string{"-overhead", ints(st.slowRanks) + ":" + st.overD.String()}
	// A slow rank at the one sample every rank takes, with the overhead:
	// how far below the deadline the model puts it (the least over the
	// slow ranks) is how much the hub's own fit of it may be off before a
	// round has no split within the deadline.
	st.slack = math.Inf(1)
	for _, r := range st.slowRanks {
		st.slack = min(st.slack, st.deadline-(st.fits[r].fixed+st.fits[r].perSample+st.over[r]))
	}
	return nil
}

// assignCalib is the model's verdict on an overhead o on each slow rank.
type assignCalib struct {
	over                []float64 // seconds per rank
	opt                 []int     // the solver's split
	tOpt, tProp, deadln float64   // the solver's and the proportional split's makespans, and the deadline
}

// calibrateAt is what the fitted model says of an overhead o on each slow
// rank: the solver's best split and its makespan, the proportional
// split's, and the deadline between them.
func (st *assignRun) calibrateAt(o time.Duration) (assignCalib, error) {
	c := assignCalib{over: make([]float64, st.np)}
	perSampleSpeed := make([]float64, st.np)
	fixedOver := make([]time.Duration, st.np)
	for r, f := range st.fits {
		if st.isSlow(r) {
			c.over[r] = o.Seconds()
		}
		perSampleSpeed[r] = 1 / f.perSample
		fixedOver[r] = time.Duration((f.fixed + c.over[r]) * float64(time.Second))
	}
	// Hub 0's kind of model offline: the per-sample parts as speeds,
	// the fixed parts added to the overheads (ShareConfig.Split).
	x, err := ps.ShareConfig{Rule: ps.ShareOptimal, Overhead: fixedOver}.Split(st.batch, perSampleSpeed, nil)
	if err != nil {
		return c, fmt.Errorf("assign: the solver on the fitted costs, overhead %v: %w", o, err)
	}
	c.opt, c.tOpt, c.tProp = x, affineMakespan(x, st.fits, c.over), affineMakespan(st.propShares, st.fits, c.over)
	c.deadln = math.Ceil(math.Max(math.Sqrt(c.tOpt*c.tProp), st.margin*c.tOpt)*1e4) / 1e4 // 0.1 ms
	return c, nil
}

// runSolvers runs the solver's three configurations and the proportional
// rule with the overhead paid.
func (st *assignRun) runSolvers() error {
	st.timeFirst = fmt.Sprintf("optimal:time=1,resource=%g,price=%s", st.wA, st.prices)
	st.resourceFirst = fmt.Sprintf("optimal:time=1,resource=%g,price=%s,cap=%s", st.wB, st.prices, st.caps)
	st.deadlineSpec = fmt.Sprintf("optimal:deadline=%s,overhead=%s", time.Duration(st.deadline*float64(time.Second)), st.overheads)
	st.solA = &assignConfig{name: "solver, time first", mode: "lbbsp", spec: st.timeFirst}
	st.solB = &assignConfig{name: "solver, resource first", mode: "lbbsp", spec: st.resourceFirst}
	st.heurOver = &assignConfig{name: "LB-BSP (proportional) + overhead", mode: "lbbsp", args: st.overheadFlag}
	st.dl = &assignConfig{name: "solver, deadline + overhead", mode: "lbbsp", spec: st.deadlineSpec, args: st.overheadFlag}
	for _, c := range []*assignConfig{st.solA, st.solB, st.heurOver, st.dl} {
		if err := st.run(c); err != nil {
			return err
		}
	}
	st.configs = []*assignConfig{st.bsp, st.heur, st.solA, st.solB, st.heurOver, st.dl}
	st.cmdOverhead = strings.Join(st.overheadFlag, " ")
	return nil
}

// objective is c's objective under weights (1, w3) and the study's
// prices: the median iteration's, and the mean.
func (st *assignRun) objective(c *assignConfig, w3 float64) (float64, float64) {
	v := shareObjective(c.m, 1, w3, st.price, nil)
	return median(v), mean(v)
}

// objA is c's time-first objective.
func (st *assignRun) objA(c *assignConfig) (float64, float64) { return st.objective(c, st.wA) }

// objB is c's resource-first objective.
func (st *assignRun) objB(c *assignConfig) (float64, float64) { return st.objective(c, st.wB) }

// objD is the deadline's objective: the measured makespan, median and
// mean.
func (st *assignRun) objD(c *assignConfig) (float64, float64) {
	v := shareBusySpans(c.m)
	return median(v), mean(v)
}

// within is the share of c's iterations whose measured makespan is within
// the deadline, and the makespan's 95th percentile.
func (st *assignRun) within(c *assignConfig) (float64, float64) {
	ms := shareBusySpans(c.m)
	n := 0
	for _, v := range ms {
		if v <= st.deadline {
			n++
		}
	}
	return float64(n) / float64(max(1, len(ms))), percentile(ms, 0.95)
}

// cell is a table cell of a median and a mean, in milliseconds.
func cell(md, mn float64) string { return fmt.Sprintf("%.2f (%.2f)", 1000*md, 1000*mn) }

// reportSetup writes the claim, the setup, the configurations and how
// the first two runs calibrated the solver's.
func (st *assignRun) reportSetup() {
	st.rep.f("# LB-BSP's optimal share rule against its heuristic\n\n")
	st.rep.f("The claim to test: package assign's solver, which hub 0 runs instead of LB-BSP's proportional split when gorun is given `--hub-share optimal:...`, ")
	st.rep.f("does at least as well as the heuristic on the objective it minimises (w1·max_i t_i + w3·Σ_i r_i·t_i) and can meet a per-iteration deadline the heuristic misses.\n\n")
	st.rep.f("Setup: the real Fashion-MNIST (first %d training samples, %d test samples), the MLP (784-256-128-10), %g epoch(s) of a global batch of %d, ", st.train, st.test, st.epochs, st.batch)
	st.rep.f("SGD with momentum 0.5 and learning rate 0.1 at the hub, seed 1; %d ranks (on %s) and one dedicated hub (`gorun --hubs 1`). ", st.np, machine(st.o))
	st.rep.f("Ranks %s are stragglers (`-straggler %s -slow %g`): the trainer's straggler sleeps %g times its compute after each layer's backward and after the rest of the step, ", ints(st.slowRanks), ints(st.slowRanks), st.slow, st.slow-1)
	st.rep.f("so it computes %g times slower, and the hub, which measures compute time (sleep included), sees it so. ", st.slow)
	st.rep.f("In the two deadline runs the same ranks also pay a fixed overhead every iteration (`%s`): a sleep after backward and before the push, as a slow link would cost, ", st.cmdOverhead)
	st.rep.f("outside the compute the hub measures and whatever the rank's share.\n\n")
	st.rep.f("Configurations: BSP splits each batch evenly (`-mode bsp`); LB-BSP (`-mode lbbsp`) asks hub 0 for its share each iteration, which the hub computes from each rank's measured speed, ")
	st.rep.f("in proportion (the default rule) or by the solver with `gorun --hub-share SPEC`:\n\n")
	st.rep.f("- time first: `%s`;\n", st.timeFirst)
	st.rep.f("- resource first: `%s`: the slow ranks also hold at most %d samples (a memory cap);\n", st.resourceFirst, st.capSlow)
	st.rep.f("- deadline: `%s` with `%s`: time only, the overhead of %g ms the slow ranks pay declared to the solver, and a deadline of %.1f ms; ", st.deadlineSpec, st.cmdOverhead, st.overMs, 1000*st.deadline)
	st.rep.f("against it the proportional rule with the same overhead paid (LB-BSP (proportional) + overhead), whose hub, measuring compute alone, splits as without it.\n\n")
	st.rep.f("The first two runs calibrate the solver's settings (printed above as they were passed). With equal shares (BSP) the ranks measured these seconds per sample: %s ms (compute over samples, from the second iteration on), ",
		st.perRank(func(r int) string { return fmt.Sprintf("%.3f", 1000*st.even[r]) }))
	st.rep.f("so a slow rank costs %.2f times a fast rank's per sample (more than %g when a step's fixed costs weigh: the straggler slows them too, and they weigh more the smaller the share). ", st.ratio, st.slow)
	st.rep.f("A fast rank's price is 1 per busy second and a slow rank's %g, a quarter of a fast rank's per sample. ", st.slowPrice)
	st.rep.f("Moving a sample from a fast rank to a slow one then lowers the resource term by (1 − %g·%.2f)·c on each slow rank and raises the slow ranks' time by %.2f·c (c: a fast rank's seconds per sample), ", st.slowPrice, st.ratio, st.ratio)
	st.rep.f("so the solver keeps the time-optimal split, the heuristic's, while the resource weight is below %.2f/(%g·(1 − %g·%.2f)) = %.2f, and above it fills the slow ranks up to their cap: ", st.ratio, st.nSlow, st.slowPrice, st.ratio, st.threshold)
	st.rep.f("time first (%g) should split as the heuristic does, resource first (%g) trade time for resources.\n\n", st.wA, st.wB)
	st.rep.f("Command: `bin/studies -np %d assign` (each job is listed at the end). ", st.np)
	st.rep.f("Six jobs of %g epoch(s) each; with 4 ranks on 2 cores the whole study takes under 2 minutes (this run's time is at the end).\n\n", st.epochs)
}

// reportRuns writes each run's time, shares, idle shares and accuracy.
func (st *assignRun) reportRuns() {
	st.rep.f("| configuration | time per epoch (s) | iterations per rank | mean share per rank | idle share per rank | test accuracy |\n| --- | --- | --- | --- | --- | --- |\n")
	for _, c := range st.configs {
		perEpoch := "—"
		acc := "failed: " + shorten(c.res.Failed, 100)
		if c.res.Failed == "" {
			perEpoch, acc = fmt.Sprintf("%.2f", c.res.Time/st.epochs), fmt.Sprintf("%.4f", c.res.Accuracy)
		}
		idle := make([]string, len(c.res.RankIdle))
		for r, v := range c.res.RankIdle {
			idle[r] = fmt.Sprintf("%.2f", v)
		}
		st.rep.f("| %s | %s | %d | %s | %s | %s |\n", c.name, perEpoch, shareRounds(c.m), shareMeans(c.m), strings.Join(idle, ", "), acc)
	}
	st.rep.f("\nThe mean share is each rank's samples per iteration, from the second iteration on; the idle share is the part of each rank's training time it spent waiting (for its share, and for the hub's answer to its push), from the trainer's result line ")
	st.rep.f("(its busy time is compute and waiting: the overhead the slow ranks pay is in neither, so it shows in the time per epoch, not in these shares).\n\n")
}

// reportObjectives writes the two weightings' objectives, from the
// measured times.
func (st *assignRun) reportObjectives() {
	st.rep.f("## The objective, from the measured times\n\n")
	st.rep.f("For the configurations without the overhead, from the per-iteration records every rank writes (`fmnist -metrics`: `batch` and `compute_ns` of each iteration), iteration k's objective under weights (w1, w3) is\n\n")
	st.rep.f("    w1 · max_i t_i,k + w3 · Σ_i r_i · t_i,k,   t_i,k = compute_i,k\n\n")
	st.rep.f("where compute_i,k is rank i's measured compute time in iteration k (the straggler's sleep included: what the hub measures) and r_i its price (%s). ", st.prices)
	st.rep.f("Iterations 1 to K−1 of every rank count (iteration 0 is split evenly in every mode, before any speed is known). ")
	st.rep.f("Each cell is the median iteration's value, in milliseconds, and in parentheses the mean, which a single slow iteration (the machine busy elsewhere) moves. ")
	st.rep.f("Time spent waiting is not in t_i: the solver's model counts busy time only.\n\n")
	st.rep.f("| configuration | time first (w1 = 1, w3 = %g) | resource first (w1 = 1, w3 = %g) |\n| --- | --- | --- |\n", st.wA, st.wB)
	for _, c := range []*assignConfig{st.bsp, st.heur, st.solA, st.solB} {
		st.rep.f("| %s | %s | %s |\n", c.name, cell(st.objA(c)), cell(st.objB(c)))
	}
}

// reportDeadline writes the measured makespans of the two runs that pay
// the overhead, against the deadline.
func (st *assignRun) reportDeadline() {
	st.rep.f("\n## The deadline, with the overhead paid\n\n")
	st.rep.f("In the two runs that pay the overhead, iteration k's makespan is measured: max_i (wall_i,k − wait_i,k), each rank's wall time in the iteration (from its share request to the end of its pull) less the time it was blocked on the hub (`-metrics`' `wall_ns` and `wait_ns`), ")
	st.rep.f("that is its compute, the overhead it paid (`overhead_ns`, timed around the sleep) and the little else it does between them. Iterations 1 to K−1 count. ")
	st.rep.f("The round's time as the ranks see it, the hub's push and pull included, is longer: it is the last column (the slowest rank's wall time, median), which the solver's model leaves out and every rule pays alike.\n\n")
	for _, c := range []*assignConfig{st.heurOver, st.dl} {
		share, p95 := st.within(c)
		st.rep.f("| %s | %s | %.0f %% | %.2f ms | %.2f | %.2f |\n", c.name, cell(st.objD(c)), 100*share, 1000*p95, 1000*sharePaid(c.m, st.slowRanks), 1000*median(shareRoundTimes(c.m)))
	}
	for _, c := range []*assignConfig{st.heurOver, st.dl} {
		if c.res.Failed != "" {
			st.rep.f("\nThe run %s failed after %d iterations: its row holds the iterations before (the checks below say why it failed).\n", c.name, shareRounds(c.m))
		}
	}
	if n := relaxedRounds(st.dl.res.Output); n > 0 {
		st.rep.f("\nIn %d of the solver's %d iterations no split met the deadline under the models hub 0 had fitted (a slow spell raises them); hub 0 split those for the least makespan instead (`miss=relax`, the default; `miss=fail` would have failed the run) and told the ranks (`relaxed=%d` on the trainer's result line).\n", n, shareRounds(st.dl.m), n)
	}
}

// reportCharts draws each rank's idle share, and the measured makespans
// against the deadline.
func (st *assignRun) reportCharts() error {
	// Charts: idle share per rank, and the measured per-iteration
	// makespan against the deadline.
	idle := &chart.Bar{Title: fmt.Sprintf("Idle share of each rank's time (ranks %s %gx slower)", ints(st.slowRanks), st.slow), YLabel: "idle / wall time"}
	for r := range st.np {
		idle.Categories = append(idle.Categories, fmt.Sprintf("rank %d", r))
	}
	for _, c := range st.configs {
		if len(c.res.RankIdle) == st.np {
			idle.Groups = append(idle.Groups, c.name)
			idle.Values = append(idle.Values, c.res.RankIdle)
		}
	}
	span := &chart.Line{Title: "Measured makespan per iteration, overhead paid", XLabel: "iteration", YLabel: "ms"}
	for _, c := range []*assignConfig{st.heurOver, st.dl} {
		ms := shareBusySpans(c.m)
		if len(ms) == 0 {
			continue
		}
		var x, y []float64
		for k, v := range ms {
			x, y = append(x, float64(k+1)), append(y, 1000*v)
		}
		span.Series = append(span.Series, chart.Series{Name: c.name, X: x, Y: y})
		if c == st.heurOver {
			span.Series = append(span.Series, chart.Series{Name: "deadline", X: []float64{1, x[len(x)-1]}, Y: []float64{1000 * st.deadline, 1000 * st.deadline}, Dashed: true})
		}
	}
	for name, p := range map[string]chart.Plot{"idle.png": idle, "makespan.png": span} {
		if err := st.rep.writeChart(name, p); err != nil {
			return err
		}
	}
	st.rep.f("\n![idle share per rank](%s/idle.png)\n\n![measured makespan per iteration](%s/makespan.png)\n\n", st.rep.name, st.rep.name)
	return nil
}

// reportCalibration writes how the overhead and the deadline were chosen.
func (st *assignRun) reportCalibration() {
	st.rep.f("## How the overhead and the deadline were chosen\n\n")
	st.rep.f("Hub 0 plans with a model of each rank's compute for a share of x samples, fixed + perSample·x, which it fits to the rank's reports by weighted least squares (package ps, \"Load balancing (LB-BSP)\"): ")
	st.rep.f("the fixed part is a step's compute that does not grow with the share (for a straggler, with the sleep that follows it). ")
	st.rep.f("The study fits the same model by least squares to the LB-BSP run's records (`batch` and `compute_ns` of iterations 1 to K−1, with the hub's clamp: the fixed part within [0, 0.99 × the mean time], the line through the means): ")
	fitText := make([]string, st.np)
	for r, f := range st.fits {
		from := "LB-BSP"
		if f.withEven {
			from = "LB-BSP and BSP"
		}
		fitText[r] = fmt.Sprintf("rank %d: %.3f + %.4f·x ms (%s, shares %d to %d, residuals' standard deviation %.2f ms)", r, 1000*f.fixed, 1000*f.perSample, from, f.lo, f.hi, 1000*f.resid)
	}
	st.rep.f("%s. ", strings.Join(fitText, "; "))
	st.rep.f("A rank marked LB-BSP and BSP is one whose LB-BSP shares, settled near the proportional split, did not spread enough to determine the slope through the noise in its times (the least-squares slope less than twice its standard error): its BSP records, at the even share, are added to the fit, as hub 0's fit too starts from the even split's round. ")
	st.rep.f("For an overhead o on each slow rank, the solver's best split of %d samples under this model (ShareConfig.Split with each rank's fixed part added to its overhead, as hub 0 adds it) has a modelled makespan T_opt = max_i (fixed_i + perSample_i·x_i + o_i), ", st.batch)
	st.rep.f("and the proportional split, by the LB-BSP run's samples per second (%s ms a sample, compute over samples; the hub measures compute alone, so it splits so with the overhead too), T_prop. ",
		st.perRank(func(r int) string { return fmt.Sprintf("%.3f", 1000*st.cost[r]) }))
	st.rep.f("Of the overheads from 0.5 ms to %g ms (half the LB-BSP run's median makespan) in steps of 0.5 ms, the model separates the two rules most (T_prop/T_opt largest) at %g ms: ", math.Floor(math.Max(st.halfMs, 0.5)*2)/2, st.overMs)
	st.rep.f("the solver's split is %v with T_opt = %.2f ms, the proportional split %v with T_prop = %.2f ms (%.2f times). ", st.optShares, 1000*st.tOpt, st.propShares, 1000*st.tProp, st.tProp/st.tOpt)
	st.rep.f("The slow ranks pay that overhead (`%s`) and the solver is told it (`overhead=%s`; the fixed parts it fits itself). ", st.cmdOverhead, st.overheads)
	st.rep.f("The deadline's margin over T_opt, %.4f, is the larger of %g and the spread of the LB-BSP run's measured makespans (95th percentile over median: %.4f), since a deadline is met when 95 %% of the iterations are within it, and no split keeps iterations that vary by more than that under a deadline closer to its makespan. ",
		st.margin, deadlineMargin, st.spread)
	st.rep.f("The deadline is the geometric mean of T_opt and T_prop, %.2f ms, and at least the margin × T_opt = %.2f ms, rounded up to 0.1 ms: %.1f ms. ",
		1000*math.Sqrt(st.tOpt*st.tProp), 1000*st.margin*st.tOpt, 1000*st.deadline)
	if st.separates {
		st.rep.f("The proportional split's modelled makespan is %.1f %% above it, so the heuristic is expected to miss the deadline and the solver to meet it. ", 100*(st.tProp/st.deadline-1))
	} else {
		st.rep.f("**The deadline does not separate the rules**: the proportional split's modelled makespan (%.2f ms) is not above it, for no overhead on the grid leaves room between %.2f × T_opt and T_prop with the costs this run measured, so the heuristic is expected to meet it as well. ", 1000*st.tProp, st.margin)
	}
	st.rep.f("A slow rank at the one sample every rank takes, overhead included, is modelled %.2f ms under the deadline: that is how far hub 0's own fit of a slow rank, made in the run from the shares the solver gives it, may be off (a slow round raises it) before a round has no split within the deadline and hub 0 relaxes it for that round. ", 1000*st.slack)
	st.rep.f("The model is only the calibration: the deadline test above is judged on the makespans the two runs measured.\n\n")
}

// reportChecks judges, from the numbers above, whether the solver
// matches or beats the heuristic and meets the deadline it misses.
func (st *assignRun) reportChecks() {
	// The checks, from the numbers above.
	st.rep.f("## Checks\n\n")
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
		c, against *assignConfig
		f          func(*assignConfig) (float64, float64)
		what       string
	}{{st.solA, st.heur, st.objA, "Time first"}, {st.solB, st.heur, st.objB, "Resource first"}, {st.dl, st.heurOver, st.objD, "Deadline (measured makespan, overhead paid)"}}
	lost := false
	for _, s := range verdicts {
		if s.c.res.Failed != "" {
			st.rep.f("- %s: the run failed (%s), so there is no objective to compare.\n", s.what, shorten(s.c.res.Failed, 160))
			lost = true
			continue
		}
		if s.against.res.Failed != "" {
			st.rep.f("- %s: the heuristic's run failed (%s), so there is no objective to compare.\n", s.what, shorten(s.against.res.Failed, 160))
			continue
		}
		sv, _ := s.f(s.c)
		hv, _ := s.f(s.against)
		v := judge(sv, hv)
		lost = lost || v == "loses to"
		st.rep.f("- %s: the median iteration's objective is %.2f ms with the solver against %.2f ms with the heuristic (%+.1f %%): the solver **%s** the heuristic on the objective it optimises (within ±%.0f %% counts as a match: runs differ by that much in their measured compute).\n",
			s.what, 1000*sv, 1000*hv, 100*(sv/hv-1), v, 100*band)
	}
	hs, hp := st.within(st.heurOver)
	switch {
	case st.heurOver.res.Failed != "":
		st.rep.f("- Deadline: the proportional rule's run with the overhead failed (%s), so there is nothing to hold the solver's against.\n", shorten(st.heurOver.res.Failed, 160))
	case st.dl.res.Failed != "":
		st.rep.f("- Deadline: the solver's run failed (%s), so the deadline test has no result.\n", shorten(st.dl.res.Failed, 160))
	default:
		ds, dp := st.within(st.dl)
		meets := func(share float64) string {
			if share >= 0.95 {
				return "meets"
			}
			return "misses"
		}
		st.rep.f("- Deadline %.1f ms (overhead paid, measured): the solver **%s** it (%.0f %% of its iterations within it, 95th percentile %.2f ms), the heuristic **%s** it (%.0f %%, 95th percentile %.2f ms); ",
			1000*st.deadline, meets(ds), 100*ds, 1000*dp, meets(hs), 100*hs, 1000*hp)
		st.rep.f("\"meets\" means at least 95 %% of the iterations, since measured compute times and sleeps vary from one iteration to the next while the solver plans with the hub's fitted models.")
		if !st.separates {
			st.rep.f(" The model expected the heuristic to meet this deadline as well (see how it was chosen): the test cannot separate the rules in this run.")
		}
		st.rep.f("\n")
		st.rep.f("- What the deadline costs: the solver's deadline run took %.2f s per epoch against %.2f s for the proportional rule paying the same overhead, and %.2f s for the proportional rule without it; the slow ranks paid %.2f and %.2f ms per iteration (measured).\n",
			st.dl.res.Time/st.epochs, st.heurOver.res.Time/st.epochs, st.heur.res.Time/st.epochs, 1000*sharePaid(st.dl.m, st.slowRanks), 1000*sharePaid(st.heurOver.m, st.slowRanks))
	}
	if lost {
		var resid, shares []string
		for _, r := range st.slowRanks {
			resid = append(resid, fmt.Sprintf("%.2f", 1000*st.fits[r].resid))
			shares = append(shares, fmt.Sprintf("%d to %d", st.fits[r].lo, st.fits[r].hi))
		}
		st.rep.f("- Where the solver lost or failed: it plans with hub 0's model of each rank, t_i = fixed_i + perSample_i·x_i + o_i, which the hub refits every round from the rank's reports by least squares, the newest weighing most (package ps, \"Load balancing (LB-BSP)\"); ")
		st.rep.f("under a deadline, a round whose models put no split within it fails every rank's share request (the error lists the models hub 0 held). ")
		st.rep.f("The model is a line through noisy times: fitted to the LB-BSP run, the slow ranks' residuals have a standard deviation of %s ms (the machine is shared, and a straggler sleeps %g times whatever its compute took, a delay included), so one slow round can raise the fixed part the hub fits for a slow rank by milliseconds; ", strings.Join(resid, " and "), st.slow-1)
		st.rep.f("and a line fitted to the shares a rank has held (the slow ranks' %s samples in the records the study fitted) need not hold at the one or two samples a deadline leaves it. ", strings.Join(shares, " and "))
		st.rep.f("In the study's model a slow rank at one sample with the overhead was %.2f ms under the %.1f ms deadline: a hub model of it that much higher makes the round infeasible. ", 1000*st.slack, 1000*st.deadline)
		st.rep.f("The mean shares in the first table show where each run settled; the proportional rule, by contrast, settles where every rank takes the same time, whatever the shape of its cost (its fixed point: x_i proportional to x_i/t_i).\n")
	}
	if st.solA.res.Failed == "" && st.solB.res.Failed == "" {
		st.rep.f("- The trade: resource first spends %.2f s per epoch against time first's %.2f s (%.2f×), for a price-weighted busy time per iteration (median) of %.2f against %.2f ms.\n",
			st.solB.res.Time/st.epochs, st.solA.res.Time/st.epochs, st.solB.res.Time/math.Max(st.solA.res.Time, 1e-9), 1000*median(shareObjective(st.solB.m, 0, 1, st.price, nil)), 1000*median(shareObjective(st.solA.m, 0, 1, st.price, nil)))
	}
	st.rep.f("- Equal shares (BSP) against LB-BSP: %.2f against %.2f s per epoch, median makespan %.2f against %.2f ms.\n",
		st.bsp.res.Time/st.epochs, st.heur.res.Time/st.epochs, 1000*median(shareMakespans(st.bsp.m, make([]float64, st.np))), 1000*median(shareMakespans(st.heur.m, make([]float64, st.np))))
}

// reportJobs lists the jobs the study ran.
func (st *assignRun) reportJobs() {
	st.rep.f("\n## Jobs\n\n")
	for _, c := range st.configs {
		st.rep.f("- %s: `%s`\n", c.name, c.res.Command)
	}
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
