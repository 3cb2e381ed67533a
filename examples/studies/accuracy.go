package main

import (
	"fmt"
	"math"
	"path/filepath"
	"strconv"

	"github.com/gorun/gorun/internal/chart"
)

// accuracy trains each model on the whole training set through the ring
// for a number of epochs and reports test accuracy against the targets
// (MLP 0.88, CNN 0.91), the wall time, and the share of time the ranks
// spent waiting; then the MLP once more through the ring and through hub
// BSP with the same seed, whose accuracies must agree.
func accuracy(o options) (string, error) {
	type run struct {
		model   string
		epochs  float64
		target  float64
		lr, mom string
	}
	runs := []run{{"softmax", 5, 0, "0.1", "0.5"}, {"mlp", 15, 0.88, "0.02", "0.9"}, {"cnn", 6, 0.91, "0.02", "0.9"}}
	train, test, same := 0, 0, 2.0
	if o.quick {
		runs, train, test, same = []run{{"mlp", 1, 0.5, "0.05", "0.9"}}, 2000, 500, 0.5
	}
	rep, err := newReport(o, "accuracy")
	if err != nil {
		return "", err
	}
	data := func(a []string) []string {
		if train > 0 {
			a = append(a, "-train", strconv.Itoa(train), "-test", strconv.Itoa(test))
		}
		return a
	}
	rep.f("# Accuracy on the real Fashion-MNIST\n\n")
	rep.f("The whole training set (60,000) and test set (10,000) unless said otherwise; %d ranks through the ring on %s; global batch 128; SGD with momentum. ", o.np, machine(o))
	rep.f("Command: `bin/studies -np %d accuracy`.\n\n", o.np)
	rep.f("| model | parameters | epochs | lr, momentum | wall time (s) | test accuracy | target | met | waiting share |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	acc := &chart.Line{Title: "Test accuracy against time, ring", XLabel: "seconds", YLabel: "test accuracy"}
	for _, r := range runs {
		res, err := o.job(o.np, nil, data([]string{"-mode", "ring", "-model", r.model, "-epochs", fmt.Sprint(r.epochs), "-batch", "128",
			"-lr", r.lr, "-momentum", r.mom, "-seed", "1", "-plot", filepath.Join(rep.dir, r.model+".png")})...)
		if err != nil {
			return "", err
		}
		target, met := "-", "-"
		if r.target > 0 {
			target, met = fmt.Sprintf("%.2f", r.target), map[bool]string{true: "yes", false: "no"}[res.Accuracy >= r.target]
		}
		rep.f("| %s | %d | %g | %s, %s | %.0f | %.4f | %s | %s | %.2f |\n", r.model, res.Params, r.epochs, r.lr, r.mom, res.Time, res.Accuracy, target, met, res.Idle)
		var x, y []float64
		for _, p := range res.Curve {
			x, y = append(x, p.T), append(y, p.Accuracy)
		}
		acc.Series = append(acc.Series, chart.Series{Name: r.model, X: x, Y: y})
	}
	if err := rep.writeChart("accuracy.png", acc); err != nil {
		return "", err
	}
	rep.f("\n![accuracy against time](%s/accuracy.png)\n\n", rep.name)
	rep.f("Each model's own curve (test loss and accuracy, drawn by the trainer's `-plot`): ")
	for i, r := range runs {
		if i > 0 {
			rep.f(", ")
		}
		rep.f("[%s](%s/%s.png)", r.model, rep.name, r.model)
	}
	rep.f(". The waiting share is the ranks' time in the all-reduce over their wall time: with %d ranks sharing this machine's cores it includes waiting for the slowest rank's compute.\n\n", o.np)

	// Ring and hub BSP, same seed.
	var ra, ha result
	for _, m := range []struct {
		mode  string
		gorun []string
		dst   *result
	}{{"ring", nil, &ra}, {"bsp", []string{"--strategy", "hub"}, &ha}} {
		r, err := o.job(o.np, m.gorun, data([]string{"-mode", m.mode, "-model", "mlp", "-epochs", fmt.Sprint(same), "-batch", "128", "-lr", "0.02", "-momentum", "0.9", "-seed", "7"})...)
		if err != nil {
			return "", err
		}
		*m.dst = r
	}
	d := math.Abs(ra.Accuracy - ha.Accuracy)
	rep.f("Ring against hub BSP, the MLP for %g epochs from the same seed: test accuracy %.4f and %.4f, difference %.4f (target ±0.002: %s); wall time %.0f s and %.0f s.\n",
		same, ra.Accuracy, ha.Accuracy, d, map[bool]string{true: "met", false: "missed"}[d <= 0.002], ra.Time, ha.Time)
	return rep.write(o)
}
