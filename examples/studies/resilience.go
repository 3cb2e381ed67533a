package main

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gorun/gorun/internal/chart"
)

// What the trainer prints with -stall (examples/fmnist: progress, step):
// the drill's failure on the victim, each view change as a rank went
// through it (at its first completed iteration after), each gap between
// two completed iterations longer than -stall, and each rank's longest.
var (
	failLineRE  = regexp.MustCompile(`\[(\d+)\] fail how=(\w+) t=([0-9.]+) unix_ms=(\d+) iter=(\d+)`)
	viewLineRE  = regexp.MustCompile(`\[(\d+)\] view epoch=(\d+) ranks=([0-9,]+) joined=([0-9,-]+) t=([0-9.]+) prev_ms=(\d+) err_ms=(\d+) back_ms=(\d+) resync_ms=([0-9.]+) redone=(-?\d+) iter=(\d+) restart=(\d+) up_ms=(\d+)`)
	stallLineRE = regexp.MustCompile(`\[(\d+)\] stall ms=([0-9.]+) start_ms=(\d+) end_ms=(\d+) t=([0-9.]+) iter=(\d+)`)
	longestRE   = regexp.MustCompile(`\[(\d+)\] longest_iter ms=([0-9.]+) t=([0-9.]+) iter=(\d+)`)
)

// viewLine is one rank's view change; times are Unix milliseconds.
type viewLine struct {
	rank, epoch     int
	ranks, joined   string
	t               float64 // seconds into training, on that rank's clock
	prev, err, back int64
	resyncMs        float64
	redone, restart int
	upMs            int64
	iter            int
}

// longest is a rank's longest iteration and when it ended (seconds into
// training on its clock).
type longest struct{ ms, t float64 }

type stallLine struct {
	rank       int
	ms         float64
	start, end int64
}

// drillRun is what one drill's job printed.
type drillRun struct {
	r       result
	code    int
	failMs  int64 // when the victim failed (0: no failure)
	views   []viewLine
	stalls  []stallLine
	longest map[int]longest // each rank's
}

func parseDrill(r result, code int) drillRun {
	d := drillRun{r: r, code: code, longest: map[int]longest{}}
	if m := failLineRE.FindStringSubmatch(r.Output); m != nil {
		d.failMs = int64(atoi64(m[4]))
	}
	for _, m := range viewLineRE.FindAllStringSubmatch(r.Output, -1) {
		d.views = append(d.views, viewLine{rank: atoi(m[1]), epoch: atoi(m[2]), ranks: m[3], joined: m[4], t: atof(m[5]),
			prev: atoi64(m[6]), err: atoi64(m[7]), back: atoi64(m[8]), resyncMs: atof(m[9]), redone: atoi(m[10]),
			iter: atoi(m[11]), restart: atoi(m[12]), upMs: atoi64(m[13])})
	}
	for _, m := range stallLineRE.FindAllStringSubmatch(r.Output, -1) {
		d.stalls = append(d.stalls, stallLine{rank: atoi(m[1]), ms: atof(m[2]), start: atoi64(m[3]), end: atoi64(m[4])})
	}
	for _, m := range longestRE.FindAllStringSubmatch(r.Output, -1) {
		// A restarted rank prints its own line after its first one died:
		// the last one of a rank is its latest process's.
		d.longest[atoi(m[1])] = longest{ms: atof(m[2]), t: atof(m[3])}
	}
	return d
}

func atoi64(s string) int64 { v, _ := strconv.ParseInt(s, 10, 64); return v }

// rankViews are rank's view changes in order.
func (d drillRun) rankViews(rank int) []viewLine {
	var vs []viewLine
	for _, v := range d.views {
		if v.rank == rank {
			vs = append(vs, v)
		}
	}
	return vs
}

// recoverMs is the time from the victim's failure to rank 0's first
// completed iteration after it: from its first view change after the
// failure, or else from its gap (a stall line) that holds the failure.
// ok is false when rank 0 printed neither (no gap longer than -stall).
func (d drillRun) recoverMs() (float64, bool) {
	for _, v := range d.rankViews(0) {
		if v.back >= d.failMs {
			return float64(v.back - d.failMs), true
		}
	}
	for _, s := range d.stalls {
		if s.rank == 0 && s.start <= d.failMs && d.failMs <= s.end {
			return float64(s.end - d.failMs), true
		}
	}
	return 0, false
}

// survivorStall is the longest iteration of any rank but the victim,
// and whose it is.
func (d drillRun) survivorStall(victim int) (longest, int, bool) {
	best, who := longest{ms: -1}, -1
	for r, l := range d.longest {
		if r != victim && l.ms > best.ms {
			best, who = l, r
		}
	}
	return best, who, who >= 0
}

// resilience runs the drills of the RingTMP study's Resilience section:
// N ranks train the MLP; rank N-1 is SIGKILLed or frozen with SIGSTOP
// partway: the plain ring, the elastic ring (gorun --elastic), the
// elastic ring whose lost rank gorun restarts (--max-restarts 1), and
// the elastic hub (--hub-elastic), beside runs without a failure.
func resilience(o options, rep *report, base []string) error {
	n, failAt, dur, curve, stall := 4, 6*time.Second, 18*time.Second, 500*time.Millisecond, 40*time.Millisecond
	hows := []string{"kill", "stop"}
	if o.quick {
		// Kills only: a frozen rank costs a detection of seconds.
		n, failAt, dur, curve = 2, time.Second, 3*time.Second, 250*time.Millisecond
		hows = []string{"kill"}
	}
	victim := n - 1
	batch := atoi(argValue(base, "-batch"))
	type strategy struct {
		name, mode string
		gorun      []string
	}
	ring := strategy{"ring", "ring", nil}
	elastic := strategy{"elastic ring", "ring", []string{"--elastic"}}
	rejoin := strategy{"elastic ring + rejoin", "ring", []string{"--elastic", "--max-restarts", "1"}}
	hub := strategy{"elastic hub BSP", "bsp", []string{"--strategy", "hub", "--hub-elastic"}}
	type drill struct {
		s   strategy
		how string // "": no failure
	}
	drills := []drill{{ring, ""}, {hub, ""}}
	for _, s := range []strategy{ring, elastic, rejoin, hub} {
		for _, how := range hows {
			drills = append(drills, drill{s, how})
		}
	}
	sig := map[string]string{"": "none", "kill": "SIGKILL", "stop": "SIGSTOP"}

	rep.f("## Resilience\n\n")
	rep.f("%d ranks train the MLP for %s; rank %d is SIGKILLed, or frozen with SIGSTOP, at %s (at its first step after it). ", n, dur, victim, failAt)
	rep.f("Without `--elastic` a lost rank ends a ring job. With `--elastic` gorun sends the survivors a view without it (a frozen rank is first found by gossip and killed); their all-reduce returns `ErrViewChanged`, they take the weights, the momentum and the step count from rank 0 (`Resync`), redo the interrupted step on %d ranks, and re-divide the training set among themselves (the global batch stays about %d: %d samples per rank). ", n-1, batch/(n-1)*(n-1), batch/(n-1))
	rep.f("With `--max-restarts 1` gorun also starts the lost rank again; it loads its data, joins at the survivors' next all-reduce, takes their state and trains on (it does not fail again; the survivors train on past the run's time until it is back, at most 10 s more). ")
	rep.f("The elastic hub (`--strategy hub --hub-elastic`, BSP, one hub in rank 0) finishes each round with the workers it still has; the lost worker's share of the training set (1/%d) is no longer used, and the global batch falls to the survivors' %d samples (%d each).\n\n", n, batch/n*(n-1), batch/n)
	rep.f("Times: the victim prints the moment it fails and every rank each gap of over %s between two of its completed iterations, on the shared wall clock. ", stall)
	rep.f("*Recover*: from the failure to rank 0's first completed iteration after it. *Longest stall*: the longest time between two completed iterations of any survivor (the first iteration, which sets up the connections, not counted), when it ended (on that rank's clock) and which rank's; the runs without a failure show what this shared machine's noise alone gives. *Work lost*: steps computed but not applied. *Back*: from the failure to the restarted rank's first completed iteration (and from its process's start).\n\n")
	rep.f("| strategy | failure | gorun exit | what rank 0 saw | accuracy before | accuracy at the end | recover | work lost | survivors' longest stall | restarted rank back |\n")
	rep.f("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")

	runs := map[string]drillRun{} // by strategy and failure
	key := func(d drill) string { return d.s.name + "/" + d.how }
	for _, d := range drills {
		args := append([]string{"-mode", d.s.mode, "-duration", dur.String(), "-curve", curve.String(), "-stall", stall.String()}, base...)
		if d.how != "" {
			args = append(args, "-fail-rank", strconv.Itoa(victim), "-fail-at", failAt.String(), "-fail-how", d.how)
		}
		if d.s.name == rejoin.name {
			// On a busy machine the restart may take longer than the run:
			// train on until it is back (at most 10 s more).
			args = append(args, "-until-size", strconv.Itoa(n))
		}
		// A worker frozen under the hub never exits: --timeout ends the
		// job once the others are done (gorun cannot tell frozen from busy).
		timeout := (dur + 15*time.Second).String()
		r, code, err := o.jobMayFail(n, append([]string{"--grace", "10s", "--timeout", timeout}, d.s.gorun...), args...)
		if err != nil && len(r.Curve) == 0 {
			return err
		}
		run := parseDrill(r, code)
		runs[key(d)] = run

		before, end := "-", "-"
		if d.how != "" {
			for _, p := range r.Curve {
				if p.T < failAt.Seconds() {
					before = fmt.Sprintf("%.4f (%.1f s)", p.Accuracy, p.T)
				}
			}
		}
		switch {
		case r.Failed == "" && r.Mode != "":
			end = fmt.Sprintf("%.4f (%.1f s)", r.Accuracy, r.Time)
		case len(r.Curve) > 0:
			last := r.Curve[len(r.Curve)-1]
			end = fmt.Sprintf("%.4f (%.1f s)", last.Accuracy, last.T)
		}

		var saw []string
		for _, v := range run.rankViews(0) {
			s := fmt.Sprintf("view %d at %.1f s: ranks %s", v.epoch, v.t, v.ranks)
			if v.joined != "-" {
				s += ", rank " + v.joined + " back"
			}
			saw = append(saw, s)
		}
		switch {
		case r.Failed != "":
			saw = append(saw, fmt.Sprintf("failed after %.1f s: %s", r.Time, shorten(r.Failed, 110)))
		case r.Stats == "local":
			saw = append(saw, fmt.Sprintf("trained on to the end without rank %d (%d iterations of its own)", victim, r.Iterations))
		case len(saw) > 0:
			saw = append(saw, "trained on to the end")
		default:
			saw = append(saw, fmt.Sprintf("trained to the end (%d iterations per rank)", r.Iterations/n))
		}

		recov, lost, back := "-", "-", "-"
		if d.how != "" {
			switch ms, ok := run.recoverMs(); {
			case r.Failed != "":
				recov = "never (the job ended)"
			case run.failMs == 0:
				recov = "? (the victim did not say when it failed)"
			case ok:
				recov = fmt.Sprintf("%.2f s", ms/1000)
			default:
				recov = fmt.Sprintf("under %s (no longer gap)", stall)
			}
			switch vs := run.rankViews(0); {
			case r.Failed != "":
				lost = fmt.Sprintf("the rest of the run (%.1f of %s)", dur.Seconds()-r.Time, dur)
			case len(vs) > 0:
				redone := 0
				for _, v := range vs {
					redone += v.redone
				}
				lost = fmt.Sprintf("%d step(s) redone by every survivor (%d view change(s))", redone, len(vs))
			case d.s.name == hub.name:
				lost = fmt.Sprintf("none redone (the round went on without rank %d's gradient)", victim)
			}
			for _, v := range run.rankViews(victim) {
				if v.restart > 0 && back == "-" && run.failMs > 0 {
					back = fmt.Sprintf("%.2f s (%.2f s after its start)", float64(v.back-run.failMs)/1000, float64(v.upMs)/1000)
				}
			}
			if d.s.name == rejoin.name && back == "-" {
				back = "never"
			}
		}
		stallCell := "-"
		if l, who, ok := run.survivorStall(victim); ok {
			stallCell = fmt.Sprintf("%.2f s at %.1f s (rank %d)", l.ms/1000, l.t, who)
			if r0, ok := run.longest[0]; ok && who != 0 {
				stallCell += fmt.Sprintf("; rank 0 %.2f s at %.1f s", r0.ms/1000, r0.t)
			}
		}
		rep.f("| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s |\n", d.s.name, sig[d.how], code, strings.Join(saw, "; "), before, end, recov, lost, stallCell, back)
	}

	// Test accuracy against time, the kill drills beside the runs without
	// a failure.
	acc := &chart.Line{Title: fmt.Sprintf("Test accuracy, %d ranks, rank %d killed at %s", n, victim, failAt), XLabel: "seconds", YLabel: "test accuracy"}
	ylo := 1.0
	for _, run := range runs {
		for _, p := range run.r.Curve {
			if p.T >= failAt.Seconds()/2 {
				ylo = math.Min(ylo, p.Accuracy)
			}
		}
	}
	ylo = math.Floor(ylo*20) / 20
	yhi := 0.0
	for _, run := range runs {
		for _, p := range run.r.Curve {
			yhi = math.Max(yhi, p.Accuracy)
		}
	}
	yhi = math.Ceil(yhi*20) / 20
	for _, d := range []drill{{ring, ""}, {ring, "kill"}, {elastic, "kill"}, {rejoin, "kill"}, {hub, "kill"}, {hub, ""}} {
		name := d.s.name + ", killed"
		if d.how == "" {
			name = d.s.name + ", no failure"
		}
		if d.s.name == ring.name && d.how != "" {
			name = "ring (no --elastic), killed"
		}
		var x, y []float64
		for _, p := range runs[key(d)].r.Curve {
			x, y = append(x, p.T), append(y, p.Accuracy) // what is below ylo is clipped
		}
		acc.Series = append(acc.Series, chart.Series{Name: name, X: x, Y: y})
	}
	acc.Series = append(acc.Series, chart.Series{Name: "the kill", X: []float64{failAt.Seconds(), failAt.Seconds()}, Y: []float64{ylo, yhi}, Dashed: true})
	acc.YMin, acc.YMax = ylo, yhi

	// The survivors' longest stall.
	bar := &chart.Bar{Title: "The survivors' longest time between two iterations", YLabel: "seconds",
		Categories: []string{"no failure"}, Groups: []string{elastic.name, rejoin.name, hub.name}}
	for _, how := range hows {
		bar.Categories = append(bar.Categories, sig[how])
	}
	for _, s := range []strategy{elastic, rejoin, hub} {
		var vs []float64
		for _, how := range append([]string{""}, hows...) {
			d := drill{s, how}
			if how == "" && s.name != hub.name {
				d = drill{ring, ""} // the same ring when nothing fails
			}
			l, _, ok := runs[key(d)].survivorStall(victim)
			if !ok {
				l.ms = 0
			}
			vs = append(vs, l.ms/1000)
		}
		bar.Values = append(bar.Values, vs)
	}
	for name, p := range map[string]chart.Plot{"resilience-accuracy.png": acc, "resilience-stall.png": bar} {
		if err := rep.writeChart(name, p); err != nil {
			return err
		}
	}
	rep.f("\n![test accuracy against time in the kill drills](%s/resilience-accuracy.png)\n\n", rep.name)
	rep.f("![the survivors' longest stall](%s/resilience-stall.png)\n\n", rep.name)
	rep.f("The stall chart's \"no failure\" bars of both elastic rings are the plain ring's run without a failure (nothing differs while no rank fails); a bar at 0 is a run whose survivors did not report.\n\n")
	return nil
}

// argValue is flag's value in args.
func argValue(args []string, flag string) string {
	if i := slices.Index(args, flag); i >= 0 && i+1 < len(args) {
		return args[i+1]
	}
	return ""
}
