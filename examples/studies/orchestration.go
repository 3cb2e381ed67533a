package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/gorun/gorun/internal/chart"
)

// orchestration is the orchestration paper's Figs. 5-6: BSP, SSP, ASP and
// LB-BSP through ParamHub with one rank F times slower (F = 1, 2, 4): test
// loss and RMSE of the predicted class probabilities against wall-clock
// time, the SD of iteration times, and each rank's idle time.
func orchestration(o options) (string, error) {
	factors := []float64{1, 2, 4}
	dur, curve, train, test := 20*time.Second, time.Second, 20000, 5000
	if o.quick {
		factors, dur, curve, train, test = []float64{1, 4}, 2*time.Second, 500*time.Millisecond, 1000, 300
	}
	// Each variant: a name, the trainer's mode and extra arguments. SSP
	// and ASP also run without momentum: stale gradients act as momentum
	// of their own, and the hub's 0.5 on top made them unstable here.
	modes := []string{"bsp", "ssp", "asp", "lbbsp", "ssp0", "asp0"}
	names := map[string]string{"bsp": "BSP", "ssp": "SSP (s=2)", "asp": "ASP", "lbbsp": "LB-BSP",
		"ssp0": "SSP, momentum 0", "asp0": "ASP, momentum 0"}
	trainerMode := map[string][]string{"bsp": {"-mode", "bsp"}, "ssp": {"-mode", "ssp"}, "asp": {"-mode", "asp"}, "lbbsp": {"-mode", "lbbsp"},
		"ssp0": {"-mode", "ssp", "-momentum", "0"}, "asp0": {"-mode", "asp", "-momentum", "0"}}
	straggler := o.np - 1
	rep, err := newReport(o, "orchestration")
	if err != nil {
		return "", err
	}
	res := map[float64]map[string]result{}
	for _, f := range factors {
		res[f] = map[string]result{}
		for _, m := range modes {
			args := append(append([]string(nil), trainerMode[m]...), "-model", "mlp", "-train", strconv.Itoa(train), "-test", strconv.Itoa(test),
				"-duration", dur.String(), "-curve", curve.String(), "-batch", "128", "-lr", "0.1", "-staleness", "2", "-seed", "1")
			if f > 1 {
				args = append(args, "-straggler", strconv.Itoa(straggler), "-slow", fmt.Sprint(f))
			}
			r, err := o.job(o.np, []string{"--strategy", "hub"}, args...)
			if err != nil {
				return "", err
			}
			res[f][m] = r
		}
	}

	rep.f("# Orchestration paper, Figs. 5-6: BSP, SSP, ASP and LB-BSP with a straggler\n\n")
	rep.f("Setup: the real Fashion-MNIST (first %d training samples, %d test samples), the MLP (784-256-128-10), ", train, test)
	rep.f("global batch 128 (LB-BSP re-divides it by speed each iteration; the others split it evenly), SGD with momentum 0.5 and learning rate 0.1 at the hub, ")
	rep.f("%d ranks (on %s) with one colocated hub, %s of training per run; rank %d computes F times slower (F = 1 is no straggler). ", o.np, machine(o), dur, straggler)
	rep.f("Rank 0 keeps its weights every %s; the test loss and the RMSE of the predicted class probabilities (against one-hot labels) are computed from those copies after training.\n\n", curve)
	rep.f("Command: `bin/studies -np %d orchestration`.\n\n", o.np)

	rep.f("| straggler F | mode | iterations | samples | test accuracy | test loss | RMSE | iteration time (ms) | SD of iteration time (ms) | waiting share | max staleness |\n")
	rep.f("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, f := range factors {
		for _, m := range modes {
			r := res[f][m]
			rep.f("| %g | %s | %d | %d | %.4f | %.4f | %.4f | %.1f | %.1f | %.2f | %d |\n",
				f, names[m], r.Iterations, r.Samples, r.Accuracy, r.Loss, r.RMSE, r.IterMs, r.IterSdMs, r.Idle, r.MaxStaleness)
		}
	}
	rep.f("\n")
	for _, f := range factors {
		loss := &chart.Line{Title: fmt.Sprintf("Test loss against time, straggler F = %g", f), XLabel: "seconds", YLabel: "test loss"}
		rmse := &chart.Line{Title: fmt.Sprintf("RMSE of class probabilities against time, F = %g", f), XLabel: "seconds", YLabel: "RMSE"}
		for _, m := range modes {
			var t, l, e []float64
			for _, p := range res[f][m].Curve {
				t, l, e = append(t, p.T), append(l, p.Loss), append(e, p.RMSE)
			}
			loss.Series = append(loss.Series, chart.Series{Name: names[m], X: t, Y: l})
			rmse.Series = append(rmse.Series, chart.Series{Name: names[m], X: t, Y: e})
		}
		for kind, p := range map[string]chart.Plot{"loss": loss, "rmse": rmse} {
			name := fmt.Sprintf("%s-F%g.png", kind, f)
			if err := rep.writeChart(name, p); err != nil {
				return "", err
			}
		}
		rep.f("![loss F=%g](%s/loss-F%g.png)\n\n![RMSE F=%g](%s/rmse-F%g.png)\n\n", f, rep.name, f, f, rep.name, f)
	}
	worst := factors[len(factors)-1]
	idle := &chart.Bar{Title: fmt.Sprintf("Idle share of each rank's time, straggler F = %g (rank %d)", worst, straggler), YLabel: "idle / wall time"}
	sd := &chart.Bar{Title: "SD of iteration time", YLabel: "ms"}
	for r := range o.np {
		idle.Categories = append(idle.Categories, fmt.Sprintf("rank %d", r))
	}
	for _, f := range factors {
		sd.Categories = append(sd.Categories, fmt.Sprintf("F = %g", f))
	}
	for _, m := range modes {
		idle.Groups = append(idle.Groups, names[m])
		idle.Values = append(idle.Values, res[worst][m].RankIdle)
		sd.Groups = append(sd.Groups, names[m])
		var v []float64
		for _, f := range factors {
			v = append(v, res[f][m].IterSdMs)
		}
		sd.Values = append(sd.Values, v)
	}
	for name, p := range map[string]chart.Plot{"idle.png": idle, "iteration-sd.png": sd} {
		if err := rep.writeChart(name, p); err != nil {
			return "", err
		}
	}
	rep.f("![idle per rank](%s/idle.png)\n\n![SD of iteration time](%s/iteration-sd.png)\n\n", rep.name, rep.name)

	// Time for each mode to reach BSP's final loss, with the worst straggler.
	target := res[worst]["bsp"].Loss
	rep.f("## Reading\n\n")
	rep.f("With the straggler %g× slower, BSP ends at test loss %.4f after %s. Time each mode first reached that loss (from rank 0's copies, every %s):\n\n", worst, target, dur, curve)
	for _, m := range modes {
		at := "not reached"
		for _, p := range res[worst][m].Curve {
			if p.Loss <= target {
				at = fmt.Sprintf("%.1f s", p.T)
				break
			}
		}
		rep.f("- %s: %s\n", names[m], at)
	}
	rep.f("\nThe highest test loss on each curve (a measure of instability), straggler F = %g: ", worst)
	for i, m := range modes {
		top := 0.0
		for _, p := range res[worst][m].Curve[1:] {
			top = max(top, p.Loss)
		}
		if i > 0 {
			rep.f(", ")
		}
		rep.f("%s %.2f", names[m], top)
	}
	rep.f(". With SSP and ASP a worker computes its gradient on weights up to s rounds old; such staleness acts like momentum (Mitliagkas et al., \"Asynchrony begets momentum\", 2016), ")
	rep.f("so with the hub's momentum 0.5 on top they can overshoot; the runs without momentum show how much of their gap to BSP that explains.\n")
	b, lb := res[worst]["bsp"], res[worst]["lbbsp"]
	rep.f("\nLB-BSP against BSP with the straggler: %d against %d samples trained in the same time (%.2f×), waiting share %.2f against %.2f, SD of iteration time %.1f against %.1f ms.\n",
		lb.Samples, b.Samples, float64(lb.Samples)/float64(max(1, b.Samples)), lb.Idle, b.Idle, lb.IterSdMs, b.IterSdMs)
	return rep.write(o)
}
