package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/gorun/gorun/examples/fmnist/nn"
	"github.com/gorun/gorun/internal/chart"
)

// ringTMP is the RingTMP study, ring against parameter server: the idle
// share of each worker for N = 2, 4, 8; loss progress per iteration;
// resilience to a rank killed and a rank frozen mid-training (the ring,
// and an elastic hub); and the largest model each strategy holds under a
// memory limit per process.
func ringTMP(o options) (string, error) {
	ns := []int{2, 4, 8}
	dur, curve, train, test := 10*time.Second, time.Second, 20000, 5000
	widths := []int{1024, 2048, 3072, 4096, 6144}
	limit := int64(1 << 30)
	if o.quick {
		ns, dur, curve, train, test = []int{2}, 2*time.Second, 500*time.Millisecond, 1000, 300
		widths, limit = []int{64, 4096}, 600<<20
	}
	rep, err := newReport(o, "ringtmp")
	if err != nil {
		return "", err
	}
	base := []string{"-model", "mlp", "-train", strconv.Itoa(train), "-test", strconv.Itoa(test), "-batch", "128", "-lr", "0.1", "-seed", "1"}
	strategies := []struct {
		name, mode string
		gorun      []string
	}{{"ring", "ring", nil}, {"hub BSP", "bsp", []string{"--strategy", "hub"}}}

	// 1. Idle share and loss per iteration.
	idle := map[string]map[int]result{}
	for _, s := range strategies {
		idle[s.name] = map[int]result{}
		for _, n := range ns {
			r, err := o.job(n, s.gorun, append([]string{"-mode", s.mode, "-duration", dur.String(), "-curve", curve.String()}, base...)...)
			if err != nil {
				return "", err
			}
			idle[s.name][n] = r
		}
	}
	rep.f("# RingTMP study: ring against parameter server\n\n")
	rep.f("Setup: the real Fashion-MNIST (first %d training samples, %d test), the MLP (784-256-128-10) unless said otherwise, global batch 128, SGD with momentum 0.5, lr 0.1, seed 1, on %s. ", train, test, machine(o))
	rep.f("Hub BSP runs with one hub colocated in rank 0. Command: `bin/studies ringtmp`.\n\n")
	rep.f("## Idle share of each worker\n\nEach run trains for %s; a worker's idle share is its time waiting on synchronisation over its wall time.\n\n", dur)
	rep.f("| strategy | N | iterations per worker | idle share per rank | mean idle share | test accuracy |\n| --- | --- | --- | --- | --- | --- |\n")
	bar := &chart.Bar{Title: "Mean idle share of the workers", YLabel: "idle / wall time"}
	for _, n := range ns {
		bar.Categories = append(bar.Categories, fmt.Sprintf("N = %d", n))
	}
	lossIter := &chart.Line{Title: fmt.Sprintf("Test loss against rank 0's iterations, N = %d", ns[len(ns)-1]), XLabel: "iteration", YLabel: "test loss"}
	for _, s := range strategies {
		var means []float64
		for _, n := range ns {
			r := idle[s.name][n]
			var parts []string
			mean := 0.0
			for _, v := range r.RankIdle {
				parts = append(parts, fmt.Sprintf("%.2f", v))
				mean += v / float64(len(r.RankIdle))
			}
			means = append(means, mean)
			rep.f("| %s | %d | %d | %s | %.2f | %.4f |\n", s.name, n, r.Iterations/n, strings.Join(parts, " "), mean, r.Accuracy)
		}
		bar.Groups, bar.Values = append(bar.Groups, s.name), append(bar.Values, means)
		var x, y []float64
		for _, p := range idle[s.name][ns[len(ns)-1]].Curve {
			x, y = append(x, float64(p.Iter)), append(y, p.Loss)
		}
		lossIter.Series = append(lossIter.Series, chart.Series{Name: s.name, X: x, Y: y})
	}
	for name, p := range map[string]chart.Plot{"idle.png": bar, "loss-per-iteration.png": lossIter} {
		if err := rep.writeChart(name, p); err != nil {
			return "", err
		}
	}
	rep.f("\n![idle](%s/idle.png)\n\n![loss per iteration](%s/loss-per-iteration.png)\n\n", rep.name, rep.name)
	rep.f("Per iteration the two make the same progress (synchronous updates are the same arithmetic); per second they differ by what each iteration's synchronisation costs.\n\n")

	// 2. Resilience.
	if err := resilience(o, rep, base); err != nil {
		return "", err
	}

	// 3. The largest model.
	rep.f("## The largest model each strategy holds\n\n")
	rep.f("Every process of the job (launcher, agents, ranks, hub) runs under a data limit of %d MiB (`prlimit --data`: the heap a Go program can map; the trainer is built with CGO_ENABLED=0 so that thread stacks come from that heap too); the MLP's two hidden layers grow until a process fails (2,000 training samples, so that the model is most of the memory). ", limit>>20)
	rep.f("A ring rank holds the whole model several times over (weights, gradient, momentum, the all-reduce buffer); with a dedicated hub (`--hubs 1`) the hub holds the weights, their momentum and the round's sum, and each worker its weights and gradient.\n\n")
	rep.f("| hidden widths | parameters | MiB per copy (float64) | ring, 2 ranks | hub BSP, 2 workers + 1 hub |\n| --- | --- | --- | --- | --- |\n")
	for _, w := range widths {
		params := nn.MLPParams(784, []int{w, w}, 10)
		row := []string{}
		for _, s := range []struct {
			mode  string
			gorun []string
		}{{"ring", nil}, {"bsp", []string{"--strategy", "hub", "--hubs", "1"}}} {
			args := append([]string{"-mode", s.mode, "-iters", "2", "-hidden", fmt.Sprintf("%d,%d", w, w)}, base...)
			args = replaceArg(replaceArg(replaceArg(args, "-batch", "32"), "-train", "2000"), "-test", "500")
			r, code, _ := o.jobWith([]string{"prlimit", fmt.Sprintf("--data=%d", limit)}, 2, s.gorun, args...)
			switch {
			case code == 0 && r.Failed == "" && r.Params > 0:
				row = append(row, "ok")
			default:
				row = append(row, "fails ("+failure(code, r.Output)+")")
			}
		}
		rep.f("| %d,%d | %d | %.1f | %s | %s |\n", w, w, params, float64(params)*8/(1<<20), row[0], row[1])
	}
	return rep.write(o)
}

// The Go runtime says it ran out of memory in several ways: a failed
// heap or metadata allocation ("fatal error: out of memory ..."), or a
// thread it could not create because its stack did not fit under the
// limit ("failed to create new OS thread ... errno=12"), or address
// space it could not reserve or map ("failed to reserve page summary
// memory", "cannot map pages in arena address space").
var (
	oomRE   = regexp.MustCompile(`\[(hub \d+|\d+)\] (?:fatal error: |runtime: )[^\n]*(?:out of memory|cannot allocate memory|errno=12|failed to reserve|cannot map pages)`)
	fatalRE = regexp.MustCompile(`(?m)^(?:\[[^\]]+\] )?(?:fatal error|runtime:|gorun:)[^\n]*`)
)

// failure says why a job under a memory limit failed: which process ran
// out of memory, or else the first line that says what went wrong.
func failure(code int, output string) string {
	m := oomRE.FindStringSubmatch(output)
	switch {
	case m != nil && strings.HasPrefix(m[1], "hub"):
		return fmt.Sprintf("exit %d: %s out of memory", code, m[1])
	case m != nil:
		return fmt.Sprintf("exit %d: rank %s out of memory", code, m[1])
	}
	return fmt.Sprintf("exit %d: %s", code, shorten(fatalRE.FindString(output), 120))
}

func shorten(s string, n int) string {
	s = strings.ReplaceAll(s, "|", "/")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// replaceArg sets flag's value in args.
func replaceArg(args []string, flag, value string) []string {
	out := append([]string(nil), args...)
	for i := 0; i+1 < len(out); i++ {
		if out[i] == flag {
			out[i+1] = value
		}
	}
	return out
}
