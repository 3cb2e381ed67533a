package main

import (
	"fmt"
	"strconv"

	"github.com/gorun/gorun/internal/chart"
)

// horovod is the Horovod study's "time for 12 epochs against cores": the
// MLP trained through the ring for a fixed number of epochs with a fixed
// batch per rank (as Horovod scales: the global batch grows with the
// ranks, the iterations shrink), on 1, 2 and 4 local ranks and, with
// -hosts, on 2 and 4 test hosts with one rank each. The local ranks share
// this machine's cores, and so do the test hosts, so each run's compute
// and synchronisation per iteration are measured apart, and the report
// shows the measured time beside a projection with a core per rank:
// iterations x (the one-rank compute per iteration + the run's measured
// synchronisation per iteration).
func horovod(o options) (string, error) {
	epochs, train, test, perRank := 12.0, 10000, 2000, 64
	local, remote := []int{1, 2, 4}, []int{2, 4}
	if o.quick {
		epochs, train, test, local, remote = 1, 1000, 300, []int{1, 2}, nil
	}
	if len(o.hosts) == 0 {
		remote = nil
	}
	rep, err := newReport(o, "horovod")
	if err != nil {
		return "", err
	}
	type run struct {
		where string
		n     int
		r     result
	}
	var runs []run
	job := func(where string, n int, launch []string) error {
		saved := o.launch
		o.launch = launch
		defer func() { o.launch = saved }()
		r, err := o.job(n, nil, "-mode", "ring", "-model", "mlp", "-train", strconv.Itoa(train), "-test", strconv.Itoa(test),
			"-epochs", fmt.Sprint(epochs), "-batch", strconv.Itoa(perRank*n), "-lr", "0.1", "-seed", "1")
		if err != nil {
			return err
		}
		runs = append(runs, run{where, n, r})
		return nil
	}
	for _, n := range local {
		if err := job("local", n, o.launch); err != nil {
			return "", err
		}
	}
	for _, n := range remote {
		if err := job("test hosts", n, o.hosts); err != nil {
			return "", err
		}
	}
	one := runs[0].r // 1 local rank: the compute reference
	oneCompute := one.ComputeMs
	rep.f("# Horovod study: time for %g epochs against ranks\n\n", epochs)
	rep.f("Setup: the real Fashion-MNIST (first %d training samples, %d test), the MLP (784-256-128-10), %g epochs, ", train, test, epochs)
	rep.f("%d samples per rank per iteration (global batch %d·N, as Horovod scales), ring all-reduce of the float64 gradient (%d parameters) every iteration, SGD with momentum. ", perRank, perRank, mlpParams)
	rep.f("Local runs: N ranks on this machine (%s). ", machine(o))
	if len(remote) > 0 {
		rep.f("Test hosts: N hosts of `scripts/testhosts.sh` with 1 Gbit/s links (`%s`), one rank each; they are network namespaces on this same machine, so they share its cores too. ", joinWords(o.hosts))
	} else {
		rep.f("(No test hosts in this run: pass -hosts with their gorun flags.) ")
	}
	rep.f("\n\nCommand: `bash examples/studies/testnet.sh horovod` (brings the test hosts up and runs `bin/studies -hosts ... horovod`).\n\n")
	rep.f("Measured columns are what the job did. The projected time gives every rank a core of its own: iterations × (compute per iteration of the 1-rank run, %.1f ms, + this run's measured synchronisation per iteration); it is labelled as a projection everywhere.\n\n", oneCompute)
	rep.f("| where | N | iterations per rank | measured time (s) | compute / iter (ms) | sync / iter (ms) | projected time (s) | measured speedup | projected speedup | projected efficiency | test accuracy |\n")
	rep.f("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	chartM := chart.Series{Name: "measured"}
	chartP := chart.Series{Name: "projected (a core per rank)", Dashed: true}
	chartI := chart.Series{Name: "ideal (T1 / N)", Dashed: true}
	var chartR, chartRP chart.Series
	chartR.Name, chartRP.Name, chartRP.Dashed = "test hosts, measured", "test hosts, projected", true
	for _, ru := range runs {
		r := ru.r
		perIter := float64(r.Iterations) / float64(ru.n)
		proj := perIter * (oneCompute + r.SyncMs) / 1000
		projOne := float64(one.Iterations) * (oneCompute + one.SyncMs) / 1000
		rep.f("| %s | %d | %.0f | %.1f | %.1f | %.1f | %.1f | %.2f | %.2f | %.2f | %.4f |\n", ru.where, ru.n, perIter, r.Time, r.ComputeMs, r.SyncMs, proj,
			one.Time/r.Time, projOne/proj, projOne/proj/float64(ru.n), r.Accuracy)
		if ru.where == "local" {
			chartM.X, chartM.Y = append(chartM.X, float64(ru.n)), append(chartM.Y, r.Time)
			chartP.X, chartP.Y = append(chartP.X, float64(ru.n)), append(chartP.Y, proj)
			chartI.X, chartI.Y = append(chartI.X, float64(ru.n)), append(chartI.Y, one.Time/float64(ru.n))
		} else {
			chartR.X, chartR.Y = append(chartR.X, float64(ru.n)), append(chartR.Y, r.Time)
			chartRP.X, chartRP.Y = append(chartRP.X, float64(ru.n)), append(chartRP.Y, proj)
		}
	}
	series := []chart.Series{chartM, chartP, chartI}
	if len(chartR.X) > 0 {
		series = append(series, chartR, chartRP)
	}
	c := &chart.Line{Title: fmt.Sprintf("Time for %g epochs against ranks", epochs), XLabel: "ranks (N)", YLabel: "seconds", Series: series}
	if err := rep.writeChart("time.png", c); err != nil {
		return "", err
	}
	rep.f("\n![time for the epochs](%s/time.png)\n\n", rep.name)
	rep.f("## Can the speedup be superlinear?\n\n")
	rep.f("Not from the parallelism itself: with a fixed batch per rank and a fixed number of epochs, every configuration computes the same gradients' worth of work (the same samples, %g passes), and the ring only adds synchronisation. ", epochs)
	rep.f("The projected speedup is N·(compute)/(compute + sync) at best, below N. A superlinear figure needs the work per sample to get cheaper as N grows, for example when each rank's share of the data and activations starts to fit in its caches, ")
	rep.f("or a comparison that is not like for like (fewer iterations to a target accuracy thanks to the larger global batch, or a baseline that ran short of memory). ")
	rep.f("Here the measured compute per iteration at N ranks against the 1-rank run: ")
	for i, ru := range runs[1:] {
		if i > 0 {
			rep.f(", ")
		}
		rep.f("%s N=%d %.2f×", ru.where, ru.n, ru.r.ComputeMs/oneCompute)
	}
	rep.f(" (above 1: the ranks share the cores; below 1 would be the cache effect).\n")
	return rep.write(o)
}

func joinWords(w []string) string {
	s := ""
	for i, x := range w {
		if i > 0 {
			s += " "
		}
		s += x
	}
	return s
}
