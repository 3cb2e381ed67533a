// Command studies runs the studies behind gorun on the real Fashion-MNIST
// and writes each as a Markdown report with tables and PNG charts (each
// with an SVG copy beside it):
//
//	studies paramhub        ParamHub paper, Fig. 4: training time and test
//	                        accuracy against training-set size, for one
//	                        process, the ring, and hub BSP with 1 and K hubs
//	studies orchestration   Orchestration paper, Figs. 5-6: BSP, SSP, ASP
//	                        and LB-BSP with a straggler 1, 2 and 4 times
//	                        slower: test loss and RMSE against wall-clock
//	                        time, SD of iteration times, idle time per rank
//	studies horovod         time for 12 epochs against ranks, local and on
//	                        test hosts (-hosts), measured and projected
//	studies ringtmp         ring against parameter server: idle share,
//	                        loss per iteration, kill/freeze drills, the
//	                        largest model under a memory limit
//	studies accuracy        each model's test accuracy on the whole set
//	                        against the targets; ring against hub BSP
//	studies assign          LB-BSP's optimal share rule (gorun --hub-share)
//	                        against its proportional heuristic and equal
//	                        shares, with two ranks slowed: time per epoch,
//	                        idle shares, the solver's objective, a deadline
//	studies pipeline        the data pipeline's -standardize, -filter and
//	                        -sampling: accuracy and loss over several seeds
//	studies compress        the CNN's gradients as float32, fp16, bf16,
//	                        PowerSGD, top-k + error feedback and float64:
//	                        accuracy against time and steps, time to 0.85
//	                        and 0.88, bytes per iteration (on test hosts:
//	                        RATE=100mbit examples/studies/testnet.sh compress)
//
// Every run is a real job: `gorun [-launch flags] -np N fmnist ...`, so a
// study runs on your own hosts with -launch '--ssh "ssh -F cfg" -hostfile
// hosts'. Build first (make build; go build -o bin/fmnist ./examples/fmnist;
// go build -o bin/studies ./examples/studies), then for example
//
//	bin/studies -np 4 -out results/studies/paramhub paramhub
//	bin/studies -np 4 -out results/studies/orchestration orchestration
//
// Each writes STUDY-DATE.md and its charts in STUDY-DATE/ under -out
// (default results). results/studies/STUDY/ keeps each study's runs,
// named DATE-COMMIT.md (the commit that added the run) with their charts
// in DATE-COMMIT/: rename a new run, and its chart links, to that form
// when you keep it.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/gorun/gorun/internal/chart"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

type options struct {
	gorun, trainer, out, date string
	launch                    []string
	hosts                     []string // gorun flags for the multi-host runs (horovod)
	np                        int
	quick                     bool // a small version for tests
	log                       io.Writer
}

func run(args []string, stdout, stderr io.Writer) int {
	var o options
	var launch string
	fs := flag.NewFlagSet("studies", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.gorun, "gorun", "bin/gorun", "the gorun binary")
	fs.StringVar(&o.trainer, "trainer", "bin/fmnist", "the Fashion-MNIST trainer (go build -o bin/fmnist ./examples/fmnist)")
	fs.StringVar(&o.out, "out", "results", "directory for the report and its charts")
	fs.StringVar(&launch, "launch", "", `extra gorun flags for every job, e.g. '--ssh "ssh -F cfg" -hostfile hosts'`)
	var hosts string
	fs.StringVar(&hosts, "hosts", "", `gorun flags that put one rank on each test host, for horovod's multi-host runs (examples/studies/testnet.sh sets them)`)
	fs.IntVar(&o.np, "np", 4, "ranks of the distributed runs")
	fs.StringVar(&o.date, "date", time.Now().Format("2006-01-02"), "date in the report's name")
	fs.BoolVar(&o.quick, "quick", false, "a small, fast version (for tests)")
	epochs := fs.Float64("epochs", 0, "compress: epochs every method trains (0: the study's default, 2)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: studies [flags] paramhub|orchestration|horovod|ringtmp|accuracy|assign|pipeline|compress")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var err error
	if o.launch, err = splitFlags(launch); err != nil {
		fmt.Fprintln(stderr, "studies: -launch:", err)
		return 2
	}
	if o.hosts, err = splitFlags(hosts); err != nil {
		fmt.Fprintln(stderr, "studies: -hosts:", err)
		return 2
	}
	o.log = stderr
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	var path string
	switch fs.Arg(0) {
	case "paramhub":
		path, err = paramHub(o)
	case "orchestration":
		path, err = orchestration(o)
	case "horovod":
		path, err = horovod(o)
	case "ringtmp":
		path, err = ringTMP(o)
	case "accuracy":
		path, err = accuracy(o)
	case "assign":
		path, err = assignStudy(o)
	case "pipeline":
		path, err = pipelineStudy(o)
	case "compress":
		path, err = compressEpochs(o, *epochs)
	default:
		fs.Usage()
		return 2
	}
	if err != nil {
		fmt.Fprintln(stderr, "studies:", err)
		return 1
	}
	fmt.Fprintln(stdout, path)
	return 0
}

// splitFlags splits a shell-like string into words, honouring single and
// double quotes.
func splitFlags(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	var quote rune
	in := false
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t' || r == '\n':
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated %c quote in %q", quote, s)
	}
	if in {
		out = append(out, cur.String())
	}
	return out, nil
}

// result is what rank 0 of a trainer printed.
type result struct {
	Mode, Model          string
	Time                 float64 // seconds of training
	Iterations, Samples  int
	Accuracy, Loss, RMSE float64
	Idle                 float64 // the workers' share of time waiting
	MaxStaleness         int
	IterMs, IterSdMs     float64
	RankIdle             []float64
	ComputeMs, SyncMs    float64 // per iteration per rank
	Params               int
	Stats                string // "all", or "local" when a lost rank kept the ring from summing
	Failed               string // the error rank 0 saw, when training failed
	Output               string // everything the job printed
	Exit                 int    // gorun's exit code
	Curve                []point
	Command              string
}

type point struct {
	T, Loss, RMSE, Accuracy float64
	Iter                    int // rank 0's iterations at the time
}

var (
	resultRE = regexp.MustCompile(`\[0\] mode=(\w+) model=(\w+) .* time=([0-9.]+)s iterations=(\d+) samples=(\d+) accuracy=([0-9.]+) loss=([0-9.]+) idle=([0-9.]+) max_staleness=(\d+) rmse=([0-9.]+) iter_ms=([0-9.]+) iter_sd_ms=([0-9.]+) rank_idle=([0-9.,]+) compute_ms=([0-9.]+) sync_ms=([0-9.]+) params=(\d+) stats=(\w+)`)
	curveRE  = regexp.MustCompile(`\[0\] curve t=([0-9.]+) loss=([0-9.]+) rmse=([0-9.]+) accuracy=([0-9.]+) iter=(\d+)`)
	failedRE = regexp.MustCompile(`\[0\] failed t=([0-9.]+) err=(.*)`)
)

func atof(s string) float64 { v, _ := strconv.ParseFloat(s, 64); return v }
func atoi(s string) int     { v, _ := strconv.Atoi(s); return v }

// parse reads a trainer's output.
func parse(out string) (result, error) {
	m := resultRE.FindStringSubmatch(out)
	if m == nil {
		if f := failedRE.FindStringSubmatch(out); f != nil {
			r := result{Time: atof(f[1]), Failed: f[2]}
			r.Curve = parseCurve(out)
			return r, nil
		}
		return result{}, errors.New("no result line in the job's output")
	}
	r := result{Mode: m[1], Model: m[2], Time: atof(m[3]), Iterations: atoi(m[4]), Samples: atoi(m[5]),
		Accuracy: atof(m[6]), Loss: atof(m[7]), Idle: atof(m[8]), MaxStaleness: atoi(m[9]), RMSE: atof(m[10]),
		IterMs: atof(m[11]), IterSdMs: atof(m[12])}
	for _, s := range strings.Split(m[13], ",") {
		r.RankIdle = append(r.RankIdle, atof(s))
	}
	r.ComputeMs, r.SyncMs, r.Params, r.Stats = atof(m[14]), atof(m[15]), atoi(m[16]), m[17]
	r.Curve = parseCurve(out)
	return r, nil
}

func parseCurve(out string) []point {
	var ps []point
	for _, c := range curveRE.FindAllStringSubmatch(out, -1) {
		ps = append(ps, point{atof(c[1]), atof(c[2]), atof(c[3]), atof(c[4]), atoi(c[5])})
	}
	return ps
}

// job runs one trainer job: np ranks, gorun flags, trainer arguments.
func (o *options) job(np int, gorunFlags []string, args ...string) (result, error) {
	r, _, err := o.jobMayFail(np, gorunFlags, args...)
	if err == nil && r.Failed != "" {
		err = fmt.Errorf("%s: training failed: %s", r.Command, r.Failed)
	}
	return r, err
}

// jobMayFail runs a job that may end in failure (a drill), and returns
// what rank 0 reported, gorun's exit code and its whole output; err only
// when there is nothing to parse.
func (o *options) jobMayFail(np int, gorunFlags []string, args ...string) (result, int, error) {
	return o.jobWith(nil, np, gorunFlags, args...)
}

// jobWith runs a job with wrap (e.g. prlimit and its flags) before gorun.
func (o *options) jobWith(wrap []string, np int, gorunFlags []string, args ...string) (result, int, error) {
	cmdArgs := append(append(append([]string{"-np", strconv.Itoa(np)}, o.launch...), gorunFlags...), o.trainer)
	cmdArgs = append(cmdArgs, args...)
	argv := append(append(append([]string(nil), wrap...), o.gorun), cmdArgs...)
	cmd := exec.Command(argv[0], argv[1:]...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	line := strings.Join(append(append([]string(nil), wrap...), "gorun"), " ") + " " + strings.Join(cmdArgs, " ")
	fmt.Fprintln(o.log, "+", line)
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		return result{}, -1, fmt.Errorf("%s: %w", line, err)
	}
	r, perr := parse(out.String())
	r.Command, r.Output, r.Exit = line, out.String(), code
	if perr != nil {
		return r, code, fmt.Errorf("%s: exit %d: %w\n%s", line, code, perr, out.String())
	}
	if code != 0 && r.Failed == "" && wrap == nil {
		return r, code, fmt.Errorf("%s: exit %d\n%s", line, code, out.String())
	}
	return r, code, nil
}

// report is a Markdown file under construction, with its charts in a
// directory beside it.
type report struct {
	name, dir string
	b         strings.Builder
	start     time.Time
}

func newReport(o options, study string) (*report, error) {
	r := &report{name: fmt.Sprintf("%s-%s", study, o.date), start: time.Now()}
	r.dir = filepath.Join(o.out, r.name)
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *report) f(format string, args ...any) { fmt.Fprintf(&r.b, format, args...) }

// writeChart draws p into the report's directory as name, a .png the
// report links, and as an SVG beside it.
func (r *report) writeChart(name string, p chart.Plot) error {
	for _, n := range []string{name, strings.TrimSuffix(name, ".png") + ".svg"} {
		if err := chart.WriteFile(filepath.Join(r.dir, n), p); err != nil {
			return err
		}
	}
	return nil
}

// machine describes where the study ran.
func machine(o options) string {
	host, _ := os.Hostname()
	where := "this machine (" + host + ")"
	if len(o.launch) > 0 {
		where = "gorun " + strings.Join(o.launch, " ")
	}
	return fmt.Sprintf("%s, %d CPUs, %s/%s", where, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH)
}

// write finishes the report with its run time and writes it.
func (r *report) write(o options) (string, error) {
	r.f("\n---\nThe whole study took %s on %s.\n", time.Since(r.start).Round(time.Second), machine(o))
	path := filepath.Join(o.out, r.name+".md")
	return path, os.WriteFile(path, []byte(r.b.String()), 0o644)
}
