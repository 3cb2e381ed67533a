package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gorun/gorun/internal/chart"
	"github.com/gorun/gorun/ps"
)

// assignStudy is issue 37's test of LB-BSP's optimal share rule: the MLP
// through one dedicated hub, with the upper half of the ranks slowed
// down, under equal shares (BSP), LB-BSP's proportional heuristic, and
// package assign's solver (gorun --hub-share optimal:...) with two
// time/resource weightings and with a deadline. For every configuration
// it reports the time per epoch, each rank's idle share, and the final
// test accuracy; for the two weightings the solver's objective computed
// from the measured per-iteration compute times (-metrics); and for the
// deadline, which the slow ranks' fixed per-iteration overhead makes
// binding, each iteration's measured makespan. Then it checks, in words
// from the data, that the solver matches or beats the heuristic on the
// objective it optimises and meets a deadline the heuristic misses.
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
// The heuristic's run calibrates the solver's: the slow ranks' price,
// the two resource weights (either side of the weight at which the
// solver starts trading time for resources), the overhead and the
// deadline all follow from the per-sample costs it measured, so that
// the tests mean the same on a fast or a slow machine.
//
// Run time: six jobs of one epoch of 20000 samples (157 iterations of a
// global batch of 128) on -np ranks and a hub: with -np 4 on 2 shared
// cores the whole study took 28 s (a job alone up to 12 s when the cores
// were busier), so under 2 minutes, well within the 15 minutes allowed
// on a quiet 2-core machine.
func assignStudy(o options) (string, error) {
	np := o.np
	if np < 2 {
		return "", fmt.Errorf("assign: -np %d: the study slows half of the ranks, it needs 2 or more", np)
	}
	train, test, epochs, batch, slow := 20000, 5000, 1.0, 128, 4.0
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
	// alike: half the heuristic's median makespan, in whole milliseconds
	// (more would leave a slow rank too little time under the deadline
	// for even the one sample it must take, once a step's fixed costs
	// count). The deadline lies between the solver's makespan and the
	// heuristic's with that overhead (geometric mean), and above the
	// largest the solver would have needed in any round of the two runs
	// with the speeds the hub had then.
	overMs := math.Ceil(1000 * median(shareMakespans(heur.m, make([]float64, np))) / 2)
	overD := time.Duration(overMs) * time.Millisecond
	over := make([]float64, np)
	for _, r := range slowRanks {
		over[r] = overD.Seconds()
	}
	overheads := perRank(func(r int) string {
		if isSlow(r) {
			return overD.String()
		}
		return time.Duration(0).String()
	})
	overheadFlag := []string{"-overhead", ints(slowRanks) + ":" + overD.String()}
	speeds := make([]float64, np)
	for r := range speeds {
		speeds[r] = 1 / cost[r]
	}
	probe, err := ps.ParseShareConfig("optimal:overhead=" + overheads)
	if err != nil {
		return "", err
	}
	optShares, err := probe.Split(batch, speeds, nil)
	if err != nil {
		return "", fmt.Errorf("assign: the solver on the measured costs: %w", err)
	}
	propShares, err := ps.Shares(batch, speeds)
	if err != nil {
		return "", err
	}
	tOpt, tProp := modelMakespan(optShares, cost, over), modelMakespan(propShares, cost, over)
	// The rounds of both runs: the deadline run's first split follows an
	// even one, as every BSP round does.
	worstRound := 0.0
	rounds := shareEWMA(heur.m, ps.DefaultHubConfig().SpeedAlpha)
	rounds = append(rounds, shareEWMA(bsp.m, ps.DefaultHubConfig().SpeedAlpha)[1:]...)
	for k, sp := range rounds {
		if k == 0 {
			continue // split evenly, before any speed is known
		}
		if x, err := probe.Split(batch, sp, nil); err == nil {
			c := make([]float64, np)
			for r := range c {
				c[r] = 1 / sp[r]
			}
			worstRound = max(worstRound, modelMakespan(x, c, over))
		}
	}
	deadline := math.Max(math.Sqrt(tOpt*tProp), 1.1*worstRound)
	deadline = math.Ceil(deadline*1e4) / 1e4 // 0.1 ms

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

	rep.f("# LB-BSP's optimal share rule against its heuristic (issue 37)\n\n")
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
	rep.f("- deadline: `%s` with `%s`: time only, the overhead of %.0f ms the slow ranks pay declared to the solver, and a deadline of %.1f ms; ", deadlineSpec, cmdOverhead, overMs, 1000*deadline)
	rep.f("against it the proportional rule with the same overhead paid (LB-BSP (proportional) + overhead), whose hub, measuring compute alone, splits as without it.\n\n")
	rep.f("The first two runs calibrate the solver's settings (printed above as they were passed). With equal shares (BSP) the ranks measured these seconds per sample: %s ms (compute over samples, from the second iteration on), ",
		perRank(func(r int) string { return fmt.Sprintf("%.3f", 1000*even[r]) }))
	rep.f("so a slow rank costs %.2f times a fast rank's per sample (more than %g when a step's fixed costs weigh: the straggler slows them too, and they weigh more the smaller the share). ", ratio, slow)
	rep.f("A fast rank's price is 1 per busy second and a slow rank's %g, a quarter of a fast rank's per sample. ", slowPrice)
	rep.f("Moving a sample from a fast rank to a slow one then lowers the resource term by (1 − %g·%.2f)·c on each slow rank and raises the slow ranks' time by %.2f·c (c: a fast rank's seconds per sample), ", slowPrice, ratio, ratio)
	rep.f("so the solver keeps the time-optimal split, the heuristic's, while the resource weight is below %.2f/(%g·(1 − %g·%.2f)) = %.2f, and above it fills the slow ranks up to their cap: ", ratio, nSlow, slowPrice, ratio, threshold)
	rep.f("time first (%g) should split as the heuristic does, resource first (%g) trade time for resources.\n\n", wA, wB)
	rep.f("Command: `bin/studies -np %d assign` (each job's command is in the report's source). ", np)
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
	rep.f("The overhead is %.0f ms on each slow rank, half the LB-BSP run's median makespan, rounded up (with more, a slow rank would have too little time left under the deadline for the one sample every rank takes); ", overMs)
	rep.f("the slow ranks pay it (`%s`) and the solver is told it (`overhead=%s`). ", cmdOverhead, overheads)
	rep.f("With the LB-BSP run's costs per sample (%s ms), the solver's split of %d samples is %v with a makespan of %.2f ms in its model, the proportional split %v with %.2f ms. ",
		perRank(func(r int) string { return fmt.Sprintf("%.3f", 1000*cost[r]) }), batch, optShares, 1000*tOpt, propShares, 1000*tProp)
	rep.f("The deadline is the geometric mean of the two, %.2f ms, raised to 1.1 times the largest makespan the solver would have needed in any round of the BSP and LB-BSP runs with the speeds the hub had then (%.2f ms), so that noise in the measured speeds does not make a round infeasible: %.1f ms. ",
		1000*math.Sqrt(tOpt*tProp), 1000*worstRound, 1000*deadline)
	rep.f("The model is only the calibration: the deadline test above is judged on the makespans the two runs measured.")
	if deadline >= tProp {
		rep.f(" The deadline is not below the proportional split's makespan: the speeds varied too much in this run for a deadline between the two, so the deadline test cannot separate the rules.")
	}
	rep.f("\n\n")

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
		rep.f("- Deadline: the solver's run failed (%s): a round in which no split met %.1f ms with the speeds the hub had measured fails every rank's share request (the hub never falls back to the proportional split).\n", shorten(dl.res.Failed, 160), 1000*deadline)
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
		rep.f("\"meets\" means at least 95 %% of the iterations, since measured compute times and sleeps vary from one iteration to the next while the solver plans with the hub's smoothed speeds.\n")
		rep.f("- What the deadline costs: the solver's deadline run took %.2f s per epoch against %.2f s for the proportional rule paying the same overhead, and %.2f s for the proportional rule without it; the slow ranks paid %.2f and %.2f ms per iteration (measured).\n",
			dl.res.Time/epochs, heurOver.res.Time/epochs, heur.res.Time/epochs, 1000*sharePaid(dl.m, slowRanks), 1000*sharePaid(heurOver.m, slowRanks))
	}
	if lost {
		rep.f("- Where the solver lost or failed: it plans with the hub's model, t_i = x_i/v_i + o_i with v_i the measured samples per second, which has no fixed part. ")
		rep.f("A step's fixed compute (which the straggler's sleep multiplies as well) makes a rank with a small share look slower per sample than it is, so a split that gives a rank few samples tends to keep it there, ")
		rep.f("and under a deadline the one sample every rank must take can cost more than the model allowed. The mean shares in the first table show where each run settled; ")
		rep.f("the proportional rule, by contrast, settles where every rank takes the same time, whatever the shape of its cost (its fixed point: x_i proportional to x_i/t_i).\n")
	}
	if solA.res.Failed == "" && solB.res.Failed == "" {
		rep.f("- The trade: resource first spends %.2f s per epoch against time first's %.2f s (%.2f×), for a price-weighted busy time per iteration (median) of %.2f against %.2f ms.\n",
			solB.res.Time/epochs, solA.res.Time/epochs, solB.res.Time/math.Max(solA.res.Time, 1e-9), 1000*median(shareObjective(solB.m, 0, 1, price, nil)), 1000*median(shareObjective(solA.m, 0, 1, price, nil)))
	}
	rep.f("- Equal shares (BSP) against LB-BSP: %.2f against %.2f s per epoch, median makespan %.2f against %.2f ms.\n",
		bsp.res.Time/epochs, heur.res.Time/epochs, 1000*median(shareMakespans(bsp.m, make([]float64, np))), 1000*median(shareMakespans(heur.m, make([]float64, np))))
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

// shareEWMA is the speeds hub 0 had when it split round k: an
// exponentially weighted mean (weight alpha on the newest) of each
// rank's samples per second in rounds 0..k−1, as ps.Speed keeps it.
func shareEWMA(m [][]shareIter, alpha float64) [][]float64 {
	n := shareRounds(m)
	out := make([][]float64, n)
	sp := make([]ps.Speed, len(m))
	for k := range n {
		out[k] = make([]float64, len(m))
		for i := range m {
			out[k][i] = sp[i].Rate()
		}
		for i := range m {
			sp[i].Alpha = alpha
			sp[i].Observe(m[i][k].batch, time.Duration(m[i][k].compute*float64(time.Second)))
		}
	}
	return out
}

// modelMakespan is max_i (x_i·c_i + o_i).
func modelMakespan(x []int, cost, over []float64) float64 {
	T := 0.0
	for i := range x {
		T = max(T, float64(x[i])*cost[i]+over[i])
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
