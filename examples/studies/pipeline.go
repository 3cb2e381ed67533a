package main

import (
	"encoding/csv"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/gorun/gorun/internal/chart"
)

// pipelineStudy tests the survey's second proposal, the data pipeline
// (package pipeline through examples/fmnist): the same ring-trained MLP
// with and without -standardize, with -filter at two tolerances, and with
// -sampling resample and fixed against shuffle, over several seeds. It
// reports each run's samples dropped, final test accuracy and loss, the
// mean and spread over seeds, the learning curves (-csv's FILE.curve.csv)
// as charts, and, from those numbers, whether the survey's claim that
// preprocessing makes training "more robust and accurate" holds on this
// data.
func pipelineStudy(o options) (string, error) {
	train, test, epochs, seeds := 60000, 10000, 5.0, []int{1, 2, 3}
	tolA, tolB := 2.0, 3.0
	if o.quick {
		train, test, epochs, seeds = 1000, 300, 1.0, []int{1, 2}
	}
	type variant struct {
		name, base string // base: the variant it is compared with ("" none)
		args       []string
	}
	variants := []variant{
		{name: "raw pixels, shuffle", args: []string{"-sampling", "shuffle"}},
		{name: "standardized, shuffle", base: "raw pixels, shuffle", args: []string{"-standardize", "-sampling", "shuffle"}},
		{name: fmt.Sprintf("standardized, filter %g", tolA), base: "standardized, shuffle", args: []string{"-standardize", "-filter", fmt.Sprint(tolA)}},
		{name: fmt.Sprintf("standardized, filter %g", tolB), base: "standardized, shuffle", args: []string{"-standardize", "-filter", fmt.Sprint(tolB)}},
		{name: "standardized, resample", base: "standardized, shuffle", args: []string{"-standardize", "-sampling", "resample"}},
		{name: "standardized, fixed order", base: "standardized, shuffle", args: []string{"-standardize", "-sampling", "fixed"}},
	}
	rep, err := newReport(o, "pipeline")
	if err != nil {
		return "", err
	}
	type run struct {
		seed    int
		res     result
		dropped int
		curve   []pipePoint
	}
	runs := make([][]run, len(variants))
	for vi, v := range variants {
		for _, seed := range seeds {
			prefix := filepath.Join(rep.dir, fmt.Sprintf("%s-seed%d", strings.NewReplacer(" ", "-", ",", "").Replace(v.name), seed))
			args := append([]string{"-mode", "ring", "-model", "mlp", "-train", strconv.Itoa(train), "-test", strconv.Itoa(test),
				"-epochs", fmt.Sprint(epochs), "-batch", "128", "-lr", "0.02", "-momentum", "0.9", "-seed", strconv.Itoa(seed), "-csv", prefix}, v.args...)
			r, err := o.job(o.np, nil, args...)
			if err != nil {
				return "", err
			}
			curve, err := readPipeCurve(prefix + ".curve.csv")
			if err != nil {
				return "", err
			}
			// The study reads only the curve: the per-rank files
			// (megabytes each) are not kept.
			for r := range o.np {
				_ = os.Remove(fmt.Sprintf("%s.%d.csv", prefix, r))
			}
			dropped := 0
			if m := droppedRE.FindStringSubmatch(r.Output); m != nil {
				dropped = atoi(m[1])
			}
			runs[vi] = append(runs[vi], run{seed, r, dropped, curve})
		}
	}

	rep.f("# The data pipeline: standardization, filtering and sampling\n\n")
	rep.f("The claim to test (the survey on distributed preprocessing): standardizing, filtering and resampling the data make training \"more robust and accurate\". ")
	rep.f("Setup: the real Fashion-MNIST (first %d training samples, %d test samples), the MLP (784-256-128-10) trained through the ring on %d ranks (on %s), ", train, test, o.np, machine(o))
	rep.f("%g epoch(s) of a global batch of 128, SGD with momentum 0.9 and learning rate 0.02, seeds %s (the seed draws the initial weights and the epochs' order). ", epochs, intsOf(seeds))
	rep.f("The trainer's data goes through package pipeline: `-standardize` standardizes every pixel with its mean and variance over all ranks' samples (the test set with the same statistics; without it the pixels are scaled to [0, 1]); ")
	rep.f("`-filter TOL` then drops the training samples whose every pixel lies within TOL standard deviations of its mean; `-sampling` deals each epoch as a new permutation (shuffle), as draws with replacement (resample), or in epoch 0's order every epoch (fixed).\n\n")
	rep.f("Command: `bin/studies -np %d pipeline` (each variant's job is listed at the end).\n\n", o.np)

	rep.f("## Every run\n\n| variant | seed | training samples dropped | time (s) | final test loss | final test accuracy |\n| --- | --- | --- | --- | --- | --- |\n")
	for vi, v := range variants {
		for _, r := range runs[vi] {
			rep.f("| %s | %d | %d | %.1f | %.4f | %.4f |\n", v.name, r.seed, r.dropped, r.res.Time, r.res.Loss, r.res.Accuracy)
		}
	}

	// Per variant: mean and spread over seeds, and the largest fall of
	// test accuracy from one snapshot to the next (how unsteady the
	// curve is), averaged over seeds.
	type summary struct {
		acc, accSD, loss, lossSD, fall, dropped float64
		n                                       int
	}
	sums := map[string]summary{}
	rep.f("\n## Mean and spread over %d seeds\n\n| variant | dropped | test accuracy, mean ± SD | test loss, mean ± SD | largest fall of test accuracy between snapshots (mean) |\n| --- | --- | --- | --- | --- |\n", len(seeds))
	for vi, v := range variants {
		var acc, loss, fall, drop []float64
		for _, r := range runs[vi] {
			acc, loss, drop = append(acc, r.res.Accuracy), append(loss, r.res.Loss), append(drop, float64(r.dropped))
			worst := 0.0
			for i := 1; i < len(r.curve); i++ {
				worst = math.Max(worst, r.curve[i-1].acc-r.curve[i].acc)
			}
			fall = append(fall, worst)
		}
		s := summary{acc: mean(acc), accSD: sd(acc), loss: mean(loss), lossSD: sd(loss), fall: mean(fall), dropped: mean(drop), n: len(acc)}
		sums[v.name] = s
		rep.f("| %s | %.0f | %.4f ± %.4f | %.4f ± %.4f | %.4f |\n", v.name, s.dropped, s.acc, s.accSD, s.loss, s.lossSD, s.fall)
	}
	rep.f("\nSD is the sample standard deviation over the seeds (0 with one seed). A snapshot is rank 0's weights at one of about twenty points of the run (`-csv`'s FILE.curve.csv), evaluated on the test set after training.\n\n")

	// Curves: test accuracy and loss against epochs, the mean over seeds
	// at each snapshot.
	accChart := &chart.Line{Title: "Test accuracy against epochs (mean over seeds)", XLabel: "epoch", YLabel: "test accuracy"}
	lossChart := &chart.Line{Title: "Test loss against epochs (mean over seeds)", XLabel: "epoch", YLabel: "test loss"}
	for vi, v := range variants {
		n := math.MaxInt
		for _, r := range runs[vi] {
			n = min(n, len(r.curve))
		}
		var x, a, l []float64
		for i := range n {
			var ex, ea, el float64
			for _, r := range runs[vi] {
				ex, ea, el = ex+r.curve[i].epoch, ea+r.curve[i].acc, el+r.curve[i].loss
			}
			k := float64(len(runs[vi]))
			if !finite(ea/k) || !finite(el/k) {
				continue
			}
			x, a, l = append(x, ex/k), append(a, ea/k), append(l, el/k)
		}
		if len(x) == 0 {
			continue
		}
		accChart.Series = append(accChart.Series, chart.Series{Name: v.name, X: x, Y: a})
		lossChart.Series = append(lossChart.Series, chart.Series{Name: v.name, X: x, Y: l})
	}
	for name, p := range map[string]chart.Plot{"accuracy.png": accChart, "loss.png": lossChart} {
		if err := rep.writeChart(name, p); err != nil {
			return "", err
		}
	}
	rep.f("![test accuracy](%s/accuracy.png)\n\n![test loss](%s/loss.png)\n\n", rep.name, rep.name)

	// The answer, from the numbers above: each step against the variant
	// it changes. A difference in mean accuracy counts when it exceeds
	// twice its standard error over the seeds (or, with one seed, 0.005).
	rep.f("## Answer\n\n")
	var held, shaky, flat, lost []string // more accurate and not less robust; more accurate but less robust; within the noise; less accurate
	for _, v := range variants {
		if v.base == "" {
			continue
		}
		s, b := sums[v.name], sums[v.base]
		d := s.acc - b.acc
		noise := 2 * math.Sqrt(s.accSD*s.accSD/float64(s.n)+b.accSD*b.accSD/float64(b.n))
		if s.n < 2 || b.n < 2 {
			noise = 0.005
		}
		noise = math.Max(noise, 1e-4)
		accurate := "as accurate (within the seeds' noise)"
		switch {
		case d > noise:
			accurate = "more accurate"
		case d < -noise:
			accurate = "less accurate"
		}
		robust := "as robust"
		switch {
		case s.accSD < b.accSD*0.8 && s.fall <= b.fall:
			robust = "more robust"
		case s.accSD > b.accSD*1.25 || s.fall > b.fall+0.01:
			robust = "less robust"
		}
		rep.f("- %s against %s: test accuracy %+.4f (noise band ±%.4f): **%s**; spread over seeds %.4f against %.4f and largest fall %.4f against %.4f: **%s**.\n",
			v.name, v.base, d, noise, accurate, s.accSD, b.accSD, s.fall, b.fall, robust)
		switch {
		case accurate == "more accurate" && robust != "less robust":
			held = append(held, v.name)
		case accurate == "more accurate":
			shaky = append(shaky, v.name)
		case accurate == "less accurate":
			lost = append(lost, v.name)
		default:
			flat = append(flat, v.name)
		}
	}
	rep.f("\nA difference in mean accuracy counts when it exceeds twice its standard error over the seeds (0.005 with one seed). ")
	rep.f("\"More robust\" means a smaller spread of the final accuracy over seeds (by a fifth) and no larger falls along the curve; \"less robust\" a spread a quarter larger or falls 0.01 larger; with %d seeds the spread is itself a rough estimate. ", len(seeds))
	rep.f("The filters' rows also count the samples they dropped (%s and %s standard deviations: %.0f and %.0f of %d).\n\n",
		fmt.Sprint(tolA), fmt.Sprint(tolB), sums[variants[2].name].dropped, sums[variants[3].name].dropped, train)
	list := func(v []string) string {
		if len(v) == 0 {
			return "none"
		}
		return strings.Join(v, "; ")
	}
	switch {
	case len(shaky)+len(flat)+len(lost) == 0:
		rep.f("**On this data the survey's claim holds**: every step was more accurate than the variant it changes, and none less robust.\n")
	case len(held)+len(shaky) == 0:
		rep.f("**On this data the survey's claim does not hold**: no step was more accurate beyond the seeds' noise (within it: %s; less accurate: %s).\n", list(flat), list(lost))
	default:
		rep.f("**On this data the survey's claim holds only in part**: more accurate and not less robust: %s; more accurate but less robust: %s; within the seeds' noise: %s; less accurate: %s.\n",
			list(held), list(shaky), list(flat), list(lost))
	}
	rep.f("\n## Jobs\n\nThe first seed's job of each variant (the others differ in `-seed` and `-csv`):\n\n")
	for vi, v := range variants {
		if len(runs[vi]) > 0 {
			rep.f("- %s: `%s`\n", v.name, runs[vi][0].res.Command)
		}
	}
	return rep.write(o)
}

var droppedRE = regexp.MustCompile(`\[0\] mode=.* dropped=(\d+)`)

// pipePoint is one snapshot of fmnist -csv's FILE.curve.csv.
type pipePoint struct{ epoch, loss, acc float64 }

// readPipeCurve reads FILE.curve.csv: wall_s, iteration, epoch,
// test_loss, test_rmse, test_accuracy.
func readPipeCurve(path string) ([]pipePoint, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(rows) == 0 || len(rows[0]) < 6 || rows[0][2] != "epoch" || rows[0][3] != "test_loss" || rows[0][5] != "test_accuracy" {
		return nil, fmt.Errorf("%s: not fmnist's curve (want wall_s,iteration,epoch,test_loss,test_rmse,test_accuracy)", path)
	}
	var pts []pipePoint
	for _, r := range rows[1:] {
		if len(r) < 6 {
			return nil, fmt.Errorf("%s: short row %q", path, r)
		}
		pts = append(pts, pipePoint{epoch: atof(r[2]), loss: atof(r[3]), acc: atof(r[5])})
	}
	return pts, nil
}

// sd is the sample standard deviation (0 for fewer than two values).
func sd(v []float64) float64 {
	if len(v) < 2 {
		return 0
	}
	m, s := mean(v), 0.0
	for _, x := range v {
		s += (x - m) * (x - m)
	}
	return math.Sqrt(s / float64(len(v)-1))
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// intsOf is 1, 2, 3.
func intsOf(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}
