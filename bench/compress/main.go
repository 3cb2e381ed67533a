// Command compress measures whether lossless compression of frames
// pays: what real gradients, parameters and sparse payloads compress to
// with s2 and zstd (github.com/klauspost/compress), how fast one core
// compresses and decompresses them, and below which link speed
// compressing costs less than sending the raw bytes.
//
// It trains the Fashion-MNIST MLP and CNN of examples/fmnist/nn in this
// process with plain SGD, snapshots each model's gradient and parameters
// early, in the middle and late, and encodes every snapshot as frames:
// float64 (the model's type), float32, fp16 and bf16 (package reduce's
// wire codecs), and the gradient's top-k at 1 % and 10 % in this
// command's own stand-in encoding (float32 values, then the indices as
// sorted uint32 or as delta uvarints; not package ps's sparse pushes).
// Every payload goes through every codec, is checked to decompress to its
// own bytes, and is timed on one core (GOMAXPROCS=1): the best of a few
// runs of a loop of calls. The break-even link speed of a payload and a
// codec is (raw − compressed)·8 / (compress + decompress time) when
// nothing overlaps, raw·8 / compress time when compression streams
// alongside the link (pipelined chunks).
//
//	go run ./bench/compress -out report.md [-tsv rows.tsv] [-steps 300] ...
//	bash bench/compress.sh     # writes results/compress/<date>-<commit>.md and .tsv
//
// Without -out the Markdown report goes to standard output. With -render
// ROWS.tsv it measures nothing and rewrites -out's verdict and tables
// from that TSV (the same run's), keeping the text before the verdict:
// for a change of wording without a new run.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Config chooses the data, the training, the payloads and the timing.
type Config struct {
	// The IDX files (raw or gzipped). TrainN and TestN take the first so
	// many images (TrainN 0: all; TestN 0: no test set).
	TrainImages, TrainLabels string
	TestImages, TestLabels   string
	TrainN, TestN            int
	// Synthetic draws 8x8 images instead of reading files.
	Synthetic bool

	Models    []string // "mlp", "cnn"
	MLPHidden []int    // the MLP's hidden widths (nn.New's: 256, 128)
	CNN       [3]int   // the CNN's channels and dense units (nn.New's: 8, 16, 64)
	Steps     int      // SGD steps a model trains
	Batch     int      // images a step
	LR        float64  // learning rate
	Seed      uint64   // weights and batch order
	Snapshots []int    // steps (from 1, increasing) whose gradient and parameters are measured
	TopK      []float64

	Codecs     []string      // of codecNames; empty: all
	Runs       int           // timing: best of this many runs
	MinTime    time.Duration // timing: a run repeats the call until it took this long
	Links      []float64     // link speeds, bit/s, at which to say whether it pays
	SingleCore bool          // time with GOMAXPROCS=1
}

// DefaultConfig is the full measurement: both models on Fashion-MNIST,
// 300 steps of 64 images, snapshots at steps 1, 150 and 300.
func DefaultConfig() Config {
	dir := "/usr/share/datasets/fashion-mnist"
	return Config{
		TrainImages: filepath.Join(dir, "train-images-idx3-ubyte.gz"),
		TrainLabels: filepath.Join(dir, "train-labels-idx1-ubyte.gz"),
		TestImages:  filepath.Join(dir, "t10k-images-idx3-ubyte.gz"),
		TestLabels:  filepath.Join(dir, "t10k-labels-idx1-ubyte.gz"),
		TestN:       2000,
		Models:      []string{"mlp", "cnn"},
		MLPHidden:   []int{256, 128},
		CNN:         [3]int{8, 16, 64},
		Steps:       300,
		Batch:       64,
		LR:          0.1,
		Seed:        1,
		Snapshots:   []int{1, 150, 300},
		TopK:        []float64{1, 10},
		Runs:        5,
		MinTime:     10 * time.Millisecond,
		Links:       []float64{100e6, 1e9, 10e9},
		SingleCore:  true,
	}
}

func (c Config) validate() error {
	switch {
	case c.Steps < 1 || c.Batch < 1:
		return fmt.Errorf("compress: %d steps of %d images", c.Steps, c.Batch)
	case !(c.LR > 0):
		return fmt.Errorf("compress: learning rate %v", c.LR)
	case c.TrainN < 0 || c.TestN < 0:
		return fmt.Errorf("compress: %d training and %d test images", c.TrainN, c.TestN)
	case len(c.Models) == 0:
		return errors.New("compress: no model")
	case len(c.Snapshots) == 0:
		return errors.New("compress: no snapshot")
	case c.Runs < 1 || c.MinTime < 0:
		return fmt.Errorf("compress: timing of %d runs of %v", c.Runs, c.MinTime)
	case len(c.Links) == 0:
		return errors.New("compress: no link speed")
	}
	for i, m := range c.Models {
		if (m != "mlp" && m != "cnn") || slices.Contains(c.Models[:i], m) {
			return fmt.Errorf("compress: models %v: want mlp and/or cnn, once each", c.Models)
		}
	}
	for i, s := range c.Snapshots {
		if s < 1 || s > c.Steps || (i > 0 && s <= c.Snapshots[i-1]) {
			return fmt.Errorf("compress: snapshots %v: want increasing steps in [1, %d]", c.Snapshots, c.Steps)
		}
	}
	for _, p := range c.TopK {
		if !(p > 0 && p <= 100) {
			return fmt.Errorf("compress: top-k of %v %%", p)
		}
	}
	for _, l := range c.Links {
		if !(l > 0) {
			return fmt.Errorf("compress: link speed %v bit/s", l)
		}
	}
	for _, h := range append(slices.Clone(c.MLPHidden), c.CNN[:]...) {
		if h < 1 {
			return fmt.Errorf("compress: layer of %d units", h)
		}
	}
	return nil
}

// A report is what run measured.
type report struct {
	cfg     Config
	source  string // the data
	models  []*trained
	results []result
	elapsed time.Duration // training and timing
}

// run trains the models, builds their payloads and measures each through
// each codec. progress, if not nil, hears one line per stage.
func run(ctx context.Context, cfg Config, progress func(string)) (*report, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	say := func(format string, a ...any) {
		if progress != nil {
			progress(fmt.Sprintf(format, a...))
		}
	}
	start := time.Now()
	cs, err := newCodecs(cfg.Codecs)
	if err != nil {
		return nil, err
	}
	defer cs.Close()
	d, err := loadData(cfg)
	if err != nil {
		return nil, err
	}
	rep := &report{cfg: cfg, source: d.source}
	var all []*payload
	for _, kind := range cfg.Models {
		t0 := time.Now()
		tr, err := train(ctx, kind, cfg, d)
		if err != nil {
			return nil, err
		}
		say("%s: %d parameters, %d steps in %.1f s, test accuracy %.4f", kind, tr.params, cfg.Steps, time.Since(t0).Seconds(), tr.accuracy)
		rep.models = append(rep.models, tr)
		for _, s := range tr.snaps {
			ps, err := payloads(s, cfg.TopK)
			if err != nil {
				return nil, err
			}
			for i := range ps {
				all = append(all, &ps[i])
			}
		}
	}
	if cfg.SingleCore {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	}
	tm := timing{runs: cfg.Runs, minTime: cfg.MinTime}
	for i, p := range all {
		for _, c := range cs.list {
			r, err := measure(ctx, p, c, tm)
			if err != nil {
				return nil, err
			}
			rep.results = append(rep.results, r)
		}
		if (i+1)%12 == 0 || i == len(all)-1 {
			say("measured %d of %d payloads", i+1, len(all))
		}
	}
	rep.elapsed = time.Since(start)
	return rep, nil
}

func main() {
	cfg := DefaultConfig()
	def := DefaultConfig()
	out := flag.String("out", "", "write the Markdown report here (default: standard output)")
	tsv := flag.String("tsv", "", "write the rows as TSV here (default: beside -out, .tsv)")
	commit := flag.String("commit", "", "the commit the binary was built from, for the report's header")
	machine := flag.String("machine", "", "more about the machine, for the report's header")
	dataDir := flag.String("data", filepath.Dir(def.TrainImages), "directory of the Fashion-MNIST IDX files")
	flag.BoolVar(&cfg.Synthetic, "synthetic", false, "train on synthetic 8x8 images instead of -data")
	flag.IntVar(&cfg.TrainN, "train-n", def.TrainN, "use the first N training images (0: all)")
	flag.IntVar(&cfg.TestN, "test-n", def.TestN, "test accuracy on the first N test images (0: none)")
	models := flag.String("models", strings.Join(def.Models, ","), "models: mlp, cnn")
	hidden := flag.String("mlp-hidden", joinInts(def.MLPHidden), "the MLP's hidden widths")
	cnn := flag.String("cnn", joinInts(def.CNN[:]), "the CNN's conv1 and conv2 channels and dense units")
	flag.IntVar(&cfg.Steps, "steps", def.Steps, "SGD steps per model")
	flag.IntVar(&cfg.Batch, "batch", def.Batch, "images a step")
	flag.Float64Var(&cfg.LR, "lr", def.LR, "learning rate (plain SGD)")
	flag.Uint64Var(&cfg.Seed, "seed", def.Seed, "seed of the weights and the batch order")
	snaps := flag.String("snapshots", joinInts(def.Snapshots), "steps whose gradient and parameters are measured (early, middle, late)")
	topk := flag.String("topk", "1,10", "top-k percentages of the gradient")
	codecsFlag := flag.String("codecs", strings.Join(codecNames, ","), "codecs")
	flag.IntVar(&cfg.Runs, "runs", def.Runs, "timing: best of this many runs")
	flag.DurationVar(&cfg.MinTime, "min-time", def.MinTime, "timing: a run repeats the call until it took this long")
	links := flag.String("links", "100e6,1e9,10e9", "link speeds in bit/s")
	render := flag.String("render", "", "measure nothing: rewrite -out's verdict and tables from this TSV (of the same run), keeping -out's text before the verdict")
	flag.Parse()
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "compress:", err)
		os.Exit(1)
	}
	if *render != "" {
		if err := rerender(*render, *out, *commit); err != nil {
			fail(err)
		}
		return
	}
	var err error
	cfg.TrainImages = filepath.Join(*dataDir, filepath.Base(def.TrainImages))
	cfg.TrainLabels = filepath.Join(*dataDir, filepath.Base(def.TrainLabels))
	cfg.TestImages = filepath.Join(*dataDir, filepath.Base(def.TestImages))
	cfg.TestLabels = filepath.Join(*dataDir, filepath.Base(def.TestLabels))
	cfg.Models = splitList(*models)
	cfg.Codecs = splitList(*codecsFlag)
	if cfg.MLPHidden, err = parseInts(*hidden); err != nil {
		fail(fmt.Errorf("-mlp-hidden: %w", err))
	}
	c, err := parseInts(*cnn)
	if err != nil || len(c) != 3 {
		fail(fmt.Errorf("-cnn %q: want three numbers", *cnn))
	}
	copy(cfg.CNN[:], c)
	if cfg.Snapshots, err = parseInts(*snaps); err != nil {
		fail(fmt.Errorf("-snapshots: %w", err))
	}
	if cfg.TopK, err = parseFloats(*topk); err != nil {
		fail(fmt.Errorf("-topk: %w", err))
	}
	if cfg.Links, err = parseFloats(*links); err != nil {
		fail(fmt.Errorf("-links: %w", err))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep, err := run(ctx, cfg, func(s string) { fmt.Fprintln(os.Stderr, "compress:", s) })
	if err != nil {
		fail(err)
	}
	meta := header{
		when:    time.Now().UTC(),
		commit:  *commit,
		machine: describeMachine(*machine),
		flags:   setFlags("out", "tsv", "commit", "machine"),
	}
	if *out == "" {
		if err := writeMarkdown(os.Stdout, rep, meta); err != nil {
			fail(err)
		}
	} else {
		if err := writeFile(*out, func(w io.Writer) error { return writeMarkdown(w, rep, meta) }); err != nil {
			fail(err)
		}
		if *tsv == "" {
			*tsv = strings.TrimSuffix(*out, filepath.Ext(*out)) + ".tsv"
		}
	}
	if *tsv != "" {
		if err := writeFile(*tsv, func(w io.Writer) error { return writeTSV(w, rep) }); err != nil {
			fail(err)
		}
	}
}

// rerender rewrites the report at out from its verdict on, from the rows
// in tsv, keeping out's text before the verdict.
func rerender(tsv, out, commit string) error {
	if out == "" {
		return errors.New("-render needs -out, the report to rewrite")
	}
	old, err := os.ReadFile(out)
	if err != nil {
		return err
	}
	head, _, ok := strings.Cut(string(old), "## Verdict")
	if !ok {
		return fmt.Errorf("%s: no verdict section", out)
	}
	f, err := os.Open(tsv)
	if err != nil {
		return err
	}
	defer f.Close()
	results, links, err := readTSV(f)
	if err != nil {
		return fmt.Errorf("%s: %w", tsv, err)
	}
	if commit == "" {
		commit = "unknown"
	}
	note := fmt.Sprintf("This section and the tables were rewritten from the run's TSV by commit %s (`-render`): the figures are the run's, the wording newer.", commit)
	return writeFile(out, func(w io.Writer) error {
		if _, err := io.WriteString(w, head); err != nil {
			return err
		}
		return writeBody(w, results, links, note)
	})
}

// writeFile creates path and writes it with write.
func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// setFlags lists the flags set on the command line, but for those named.
func setFlags(except ...string) string {
	var s []string
	flag.Visit(func(f *flag.Flag) {
		if !slices.Contains(except, f.Name) {
			s = append(s, "-"+f.Name+" "+f.Value.String())
		}
	})
	if len(s) == 0 {
		return "none"
	}
	return "`" + strings.Join(s, " ") + "`"
}

// describeMachine is the CPU model, core count, OS, kernel and Go
// version, and extra if given.
func describeMachine(extra string) string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	s := fmt.Sprintf("%s, %d logical CPUs, %s/%s", cpu, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH)
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		s += " (kernel " + strings.TrimSpace(string(b)) + ")"
	}
	s += ", " + runtime.Version()
	if extra != "" {
		s += "; " + extra
	}
	return s
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

func parseFloats(s string) ([]float64, error) {
	var out []float64
	for _, f := range splitList(s) {
		x, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return out, nil
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}
