// Command fmnist trains a model on Fashion-MNIST data-parallel: through
// the ring, or through the hub under BSP, SSP, ASP and LB-BSP, with or
// without stragglers, for a fixed wall-clock budget or a number of
// iterations. Rank 0 prints one result line: samples trained, test
// accuracy and loss, and how much of the workers' time went to waiting.
//
//	gorun -np 4 ./fmnist -mode ring -model mlp
//	gorun -np 4 --strategy hub ./fmnist -mode bsp -straggler 3 -slow 4
//	gorun -np 4 --strategy hub ./fmnist -mode lbbsp -straggler 2,3 -slow 4
//	gorun -np 4 --strategy hub ./fmnist -mode lbbsp -straggler 2,3 -overhead 2,3:20ms
//	gorun -np 4 --hubs 2 --strategy hub ./fmnist -mode asp -model cnn
//	gorun -np 4 ./fmnist -standardize -filter 2.5 -sampling resample
//	gorun -np 4 ./fmnist -mode ring -model mlp -wire bf16
//	gorun -np 4 ./fmnist -mode ring -model mlp -wire float32
//	gorun -np 4 --strategy hub ./fmnist -mode bsp -model mlp -compress topk:0.01
//	gorun -np 4 --strategy hub ./fmnist -mode ssp -model mlp -compress randk:0.1,noef
//	gorun -np 4 ./fmnist -mode ring -model cnn -powersgd 2 -powersgd-start 10
//	examples/fmnist/study.sh      # every mode, with and without a straggler
//
// Models (-model): softmax regression, an MLP (784-256-128-10, ReLU) and a
// small CNN (two 5x5 convolutions with max-pooling, then dense), on
// gonum's BLAS. Data (-data): the original gzipped IDX files, by default
// from /usr/share/datasets/fashion-mnist (Debian's dataset-fashion-mnist);
// -data synthetic trains on a generated stand-in of the same shape.
//
// The data goes through package pipeline: pipeline.ReadIDX reads the
// files (or the generated set becomes a pipeline.Dataset), every rank
// runs Prepare over its Comm at the same point (-standardize: every
// pixel standardized with its mean and variance over all ranks' blocks,
// the test set with the same statistics; -filter TOL: the training
// samples within TOL standard deviations of the mean in every pixel
// dropped, and rank 0's result line ends with dropped=N), and each
// epoch's order (-sampling: shuffle, a new permutation every epoch;
// resample, draws with replacement; fixed, epoch 0's permutation every
// epoch) is dealt round-robin to the view's ranks, N mod ranks samples
// left out for the epoch. Every rank takes the same steps per epoch, the
// last short when its share does not divide, so the ring and hub BSP
// train the same weights from the same seed; LB-BSP draws the share the
// hub asks for from its rank's part, on into the next epoch. After an
// elastic view change the survivors take the view's first rank's place in
// the epoch with its weights, and deal the rest of the epoch to the new
// view (Part.Resume), weighing a shorter last batch by its samples. A
// rank that gorun --max-restarts brought back prepares alone, before it
// joins: its peers are training.
//
// The ring mode sums the gradients layer by layer while backward goes on
// (collective.Bucketer, as PyTorch DDP does): the layers' gradients go in
// buckets of at most -bucket-mb MiB (the first, which holds the last
// layers, ready soonest, at most -first-bucket-mb), and each bucket's
// all-reduce starts as soon as backward has finished its layers.
// -overlap=false starts every bucket after backward instead: the same
// buckets and, bit for bit, the same sums, without the overlap. The
// defaults (0.25 and 0.1 MiB) suit these small models: the softmax (61
// KiB of gradient) is one bucket, the MLP (1.8 MiB) four and the CNN (424
// KiB) three, whose second (the dense layer's 393 KiB) is reduced while
// backward runs through both convolutions; PyTorch's 25 and 1 MiB would
// make the CNN one bucket, with nothing to overlap. In an elastic job
// (gorun --elastic) a view change fails every bucket of the step with
// ErrViewChanged on every survivor, which then resyncs and redoes it.
// A straggler (-straggler, one rank or a list) sleeps after each layer's
// backward, so its gradients come late layer by layer, as on a slower
// machine.
//
// -overhead RANKS:DURATION[;RANKS:DURATION...] (e.g. 2,3:20ms, or
// 0:5ms;2,3:20ms) makes each listed rank spend a fixed time every
// iteration whatever its share, as a slow link or a synchronisation
// would: it sleeps that long after backward and before its push (the
// hub modes) or before the last bucket of its all-reduce, the one with
// the stop vote, starts (the ring; with -overlap the buckets whose
// layers are done go on during the sleep, and the peers wait for the
// last in theirs). The time is outside the compute the rank measures:
// not in compute_ms, not in what LB-BSP's Client.Share tells the hub,
// nor in -metrics' compute_ns, nor in sync_ms; it is in the iteration's
// time (iter_ms, -csv's wall_s), so the hub's share rule sees only
// compute, as LB-BSP's model t = x/v + overhead has it
// (gorun --hub-share optimal:...,overhead=). Ranks are job ranks, each at
// most once (a rank outside the job is an error before training), the
// durations Go durations of 0 or more (0: nothing paid); a straggler's
// -slow does not multiply it. The sleep ends early when the job does.
// Given, rank 0's result line ends with overhead_ms: the time paid, as
// measured around the sleeps, per iteration on average over every rank's
// iterations, as compute_ms (2 of 4 ranks paying 20 ms give about 10).
// -metrics' JSON lines (the hub modes: ps.Metrics from Client.Tick)
// carry each iteration's wall_ns and overhead_ns beside.
//
// Under -mode lbbsp with gorun --hub-share optimal:deadline=D, rank 0's
// result line ends with relaxed=N when hub 0 split N iterations without
// the deadline because no split met it (ps.ShareConfig.Miss).
//
// -wire fp16|bf16 (ring only) sends the gradients as 2-byte elements:
// the same buckets, as float32 buffers of a Bucketer[float32] on a Comm
// whose Config.Wire is the format, each layer's gradient divided by the
// number of ranks as it is copied in (so that the sum is the average,
// and fp16 cannot overflow where the average does not), still overlapped
// with backward. -wire float32 takes the same path with Config.Wire at
// WireFull: plain float32, 4 bytes an element, the baseline the 2-byte
// formats are measured against (-wire full, the default, sends the
// float64 gradients). -powersgd R (ring only) averages the gradients by
// package collective/powersgd at rank R after backward, once
// -powersgd-start plain iterations are done: weights as out x fan-in
// matrices (a convolution's out x in·k·k), biases exact, error feedback
// and warm start. With any of these rank 0's result line ends with
// wire_B, the bytes each rank sent per iteration on average, computed
// from the buffers' sizes as a ring all-reduce moves them.
//
// -compress SPEC (the hub modes only) makes the pushes sparse: the key
// is declared with KeyConfig.Sparse from ps.ParseSparse(SPEC), so that
// each push sends, of each partition of n elements, k = ⌈ratio·n⌉:
// topk:RATIO the largest magnitudes with their indices, randk:RATIO
// elements drawn alike on every worker and the hub (values alone), as
// float64; the pulls stay dense. Error feedback is on (ps keeps what a
// push did not send and adds it to the next) unless ",noef";
// ",codec=raw|varint|s2|zstd" and ",seed=N" follow ps.ParseSparse.
// After an elastic change ps's rule holds: a removed worker takes its
// residual with it, the others keep theirs. "none" (the default) pushes
// dense. Given (none included), rank 0's result line ends with push_B,
// the payload bytes each worker pushed per iteration on average, as ps
// counts them (Client.Tick; frame headers left out).
//
// For the ring, the result line ends with each rank's communication time
// summed over the buckets, each from its start to its end, waiting for
// slower peers included (comm_s), the part of it that training waited
// for after backward (exposed_s; sync_ms counts it too), and the share
// it did not wait for (hidden: behind backward, and behind the buckets
// before, which run at once); a second line gives the buckets' sizes.
//
//	gorun -np 2 ./fmnist -mode ring -model cnn -overlap=false
//	gorun -np 2 ./fmnist -mode ring -model cnn -bucket-mb 0.05 -first-bucket-mb 0.01
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gorun/gorun/collective"
	"github.com/gorun/gorun/examples/fmnist/nn"
	"github.com/gorun/gorun/pipeline"
	"github.com/gorun/gorun/ps"
	"github.com/gorun/gorun/reduce"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout)) }

// started is when this process started (a restarted rank reports how
// long it took to be back).
var started = time.Now()

type options struct {
	mode      string
	model     string
	data      string
	trainN    int // 0: every training sample
	testN     int
	dump      string // rank 0 writes the final weights here
	duration  time.Duration
	untilSize int
	iters     int // per worker; 0: until the duration is spent
	epochs    float64
	curve     time.Duration // rank 0 snapshots the weights this often
	partition int           // hub partition bytes (0: the library's)
	hidden    []int         // the MLP's hidden widths
	cnn       []int         // the CNN's conv1, conv2 channels and dense units
	failAt    time.Duration // -fail-rank kills or stops itself this long into training
	failRank  int
	failHow   string
	stall     time.Duration // print each longer gap between completed iterations
	csv       string        // per-iteration CSV prefix
	plot      string        // rank 0 draws its learning curve here
	samples   int           // synthetic training samples
	batch     int           // global batch per iteration
	lr, mom   float64
	decay     string
	staleness int
	straggler []int // the ranks that compute slow times slower
	slow      float64
	seed      uint64
	metrics   string
	// ring: reduce the gradients in buckets of bucketMB MiB (the first
	// firstMB), overlapped with backward unless overlap is off
	overlap           bool
	bucketMB, firstMB float64
	// the data pipeline: standardize with every rank's statistics, drop
	// the samples within filter standard deviations of the mean in every
	// pixel (0: none), and sample each epoch by shuffling, resampling
	// with replacement, or in epoch 0's order every time
	standardize bool
	filter      float64
	sampling    string
	// ring: the gradients' format on the wire (-wire as given, and the
	// Comm's Config.Wire for it), and PowerSGD at rank powersgd (0: off)
	// after powersgdStart plain iterations
	wireName      string
	wire          collective.Wire
	powersgd      int
	powersgdStart int
	// hub modes: every key's sparse pushes (-compress; the zero value is
	// dense), and whether -compress was given (the result line then
	// ends with push_B)
	compress    ps.SparseConfig
	compressSet bool
	// -overhead: the ranks that pay a fixed time every iteration outside
	// their compute, and whether the flag was given (the result line
	// then ends with overhead_ms)
	overhead    overheads
	overheadSet bool
	// sleep is how a straggler sleeps, pay how a rank pays its
	// -overhead (tests count the calls).
	sleep func(time.Duration)
	pay   func(context.Context, time.Duration) error
}

func run(args []string, out io.Writer) int {
	o, err := parseFlags(args)
	if err != nil {
		if !errors.Is(err, errUsage) {
			fmt.Fprintln(os.Stderr, "fmnist:", err)
		}
		return 2
	}
	if err := train(o, out); err != nil {
		fmt.Fprintln(os.Stderr, "fmnist:", err)
		return 1
	}
	return 0
}

// errUsage is a flag the flag package could not parse (it said why).
var errUsage = errors.New("usage")

// parseFlags reads the command line into options, checking every value
// that does not need the job (a straggler's rank does: train checks it).
func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("fmnist", flag.ContinueOnError)
	fs.StringVar(&o.mode, "mode", "ring", "ring, bsp, ssp, asp or lbbsp")
	fs.StringVar(&o.model, "model", "softmax", "softmax, mlp or cnn")
	fs.StringVar(&o.data, "data", DefaultData, `directory with the Fashion-MNIST .gz files, or "synthetic"`)
	fs.IntVar(&o.trainN, "train", 0, "use the first N training samples (0: all)")
	fs.IntVar(&o.testN, "test", 0, "use the first N test samples (0: all)")
	fs.StringVar(&o.dump, "dump", "", "rank 0 writes the final weights to FILE (float64, little-endian)")
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "training time budget")
	fs.IntVar(&o.iters, "iters", 0, "stop each worker after this many iterations (0: run for -duration)")
	fs.IntVar(&o.untilSize, "until-size", 0, "with -duration, train on past it until the view has this many ranks again (a restarted rank is back), for at most "+untilSizeWait.String()+" more")
	fs.Float64Var(&o.epochs, "epochs", 0, "stop after this many passes over the training set (sets -iters from -batch)")
	fs.DurationVar(&o.curve, "curve", 0, "rank 0 keeps the weights this often and prints the test loss, RMSE and accuracy of each (a learning curve)")
	fs.IntVar(&o.samples, "samples", 12000, "training samples of -data synthetic")
	fs.IntVar(&o.batch, "batch", 256, "global batch per iteration, split over the ranks")
	fs.Float64Var(&o.lr, "lr", 0.1, "learning rate")
	fs.Float64Var(&o.mom, "momentum", 0.5, "momentum")
	fs.StringVar(&o.decay, "lr-decay", "none", "none, or cosine: scale iteration i's gradient by (1+cos(pi*i/iters))/2, with -iters or -epochs (ring and hub modes alike)")
	fs.IntVar(&o.staleness, "staleness", 2, "SSP staleness bound")
	straggler := fs.String("straggler", "-1", "ranks that compute -slow times slower, as 3 or 2,3 (-1: none)")
	fs.Float64Var(&o.slow, "slow", 4, "slow-down of each straggler")
	fs.Uint64Var(&o.seed, "seed", 1, "seed shared by every rank")
	fs.IntVar(&o.partition, "partition", 0, "bytes of a key's partition on one hub (a key is spread over the hubs in partitions; 0: the library's 4 MiB)")
	hidden := fs.String("hidden", "256,128", "the MLP's hidden layer widths")
	cnnWidths := fs.String("cnn", "8,16,64", "the CNN's channels of its two 5x5 convolutions and the units of its dense layer")
	fs.DurationVar(&o.failAt, "fail-at", 0, "with -fail-rank: when that rank fails (a resilience drill)")
	fs.IntVar(&o.failRank, "fail-rank", -1, "rank that fails at -fail-at")
	fs.StringVar(&o.failHow, "fail-how", "kill", "kill (SIGKILL) or stop (SIGSTOP) itself")
	fs.DurationVar(&o.stall, "stall", 0, "print every gap longer than this between two completed iterations of a rank, each rank's longest, and the drill's failure, with wall-clock times (the resilience study)")
	fs.StringVar(&o.csv, "csv", "", "write per-iteration metrics of each rank to FILE.RANK.csv and rank 0's learning curve to FILE.curve.csv")
	fs.StringVar(&o.plot, "plot", "", "rank 0 draws test loss and accuracy against time into FILE.png")
	fs.StringVar(&o.metrics, "metrics", "", "write per-iteration metrics as JSON lines to FILE.RANK")
	fs.BoolVar(&o.overlap, "overlap", true, "ring: start each bucket's all-reduce during backward, as soon as its layers' gradients are final (false: every bucket after backward; the same buckets and result)")
	fs.Float64Var(&o.bucketMB, "bucket-mb", 0.25, "ring: MiB a gradient bucket holds at most (a larger layer is a bucket of its own)")
	fs.Float64Var(&o.firstMB, "first-bucket-mb", 0.1, "ring: MiB the first bucket (the last layers', ready first) holds at most")
	fs.BoolVar(&o.standardize, "standardize", false, "standardize every pixel with its mean and variance over the training set, computed by every rank together (package pipeline; the test set with the same statistics); off, the pixels are scaled to [0, 1]")
	fs.Float64Var(&o.filter, "filter", 0, "with -standardize: drop the training samples whose every pixel lies within this many standard deviations of its mean (pipeline's filter; rank 0's result line then ends with dropped=N); 0: none")
	fs.StringVar(&o.sampling, "sampling", "shuffle", "each epoch's order: shuffle (a new permutation every epoch), resample (draws with replacement) or fixed (epoch 0's permutation every epoch); dealt round-robin to the ranks")
	fs.StringVar(&o.wireName, "wire", "full", "ring: the format the gradients cross the ring in: full (float64), float32 (float32 buffers and sums, 4 bytes an element), or fp16 or bf16 (float32 sums, 2 bytes an element on the wire); float32, fp16 and bf16 pre-divide by the ranks; overrides gorun --wire. With float32, fp16, bf16 or -powersgd, rank 0's result line ends with wire_B, the bytes each rank sent per iteration, computed from the buffers' sizes as a ring all-reduce moves them (2(N-1)/N of each), not counted by the collective")
	compress := fs.String("compress", "none", "hub modes: sparse pushes of every key (package ps): none (dense), or topk:RATIO or randk:RATIO (error feedback on), then ,noef ,codec=raw|varint|s2|zstd ,seed=N, e.g. topk:0.01 or randk:0.1,noef. Given, rank 0's result line ends with push_B, the payload bytes each worker pushed per iteration on average, as package ps counts them")
	fs.IntVar(&o.powersgd, "powersgd", 0, "ring: average the gradients by PowerSGD at this rank (error feedback, warm start; weights as matrices, biases exact); 0: off")
	overhead := fs.String("overhead", "none", "ranks that spend a fixed time every iteration outside their compute, after backward and before the push or all-reduce (as a slow link or a synchronisation would): RANKS:DURATION[;RANKS:DURATION...], e.g. 2,3:20ms or 0:5ms;2,3:20ms; none: no rank. Not in compute_ms nor in the compute reported to the hub, in iter_ms; given, rank 0's result line ends with overhead_ms")
	fs.IntVar(&o.powersgdStart, "powersgd-start", 10, "with -powersgd: iterations of plain averaging first (PyTorch's start_powerSGD_iter)")
	if err := fs.Parse(args); err != nil {
		return o, errUsage
	}
	var err error
	if o.straggler, err = parseStragglers(*straggler); err != nil {
		return o, err
	}
	if o.wire, err = parseWire(o.wireName); err != nil {
		return o, err
	}
	if o.compress, err = parseCompress(*compress); err != nil {
		return o, err
	}
	if o.overhead, err = parseOverhead(*overhead); err != nil {
		return o, err
	}
	fs.Visit(func(f *flag.Flag) {
		o.compressSet = o.compressSet || f.Name == "compress"
		o.overheadSet = o.overheadSet || f.Name == "overhead"
	})
	if err := checkPipeline(o); err != nil {
		return o, err
	}
	if err := checkExchange(o); err != nil {
		return o, err
	}
	for _, f := range strings.Split(*hidden, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return o, fmt.Errorf("-hidden %q: want widths like 256,128", *hidden)
		}
		o.hidden = append(o.hidden, n)
	}
	for _, f := range strings.Split(*cnnWidths, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			o.cnn = nil
			break
		}
		o.cnn = append(o.cnn, n)
	}
	if len(o.cnn) != 3 {
		return o, fmt.Errorf("-cnn %q: want three widths like 8,16,64", *cnnWidths)
	}
	if (o.csv != "" || o.plot != "") && o.curve == 0 {
		o.curve = -1 // a snapshot every twentieth of the run (see snap)
	}
	if o.failHow != "kill" && o.failHow != "stop" {
		return o, fmt.Errorf("-fail-how %q: want kill or stop", o.failHow)
	}
	for _, b := range []struct {
		name string
		mb   float64
	}{{"bucket-mb", o.bucketMB}, {"first-bucket-mb", o.firstMB}} {
		if !(b.mb > 0 && b.mb <= 1<<20) {
			return o, fmt.Errorf("-%s %v: want MiB above 0 (e.g. 0.25)", b.name, b.mb)
		}
	}
	if o.decay != "none" && o.decay != "cosine" {
		return o, fmt.Errorf("-lr-decay %q: want none or cosine", o.decay)
	}
	if o.decay == "cosine" && o.iters == 0 && o.epochs == 0 {
		return o, errors.New("-lr-decay cosine needs -iters or -epochs (the schedule's length)")
	}
	return o, nil
}

// float32Ring reports whether the ring reduces float32 buffers (-wire
// float32, fp16 or bf16) instead of the float64 gradients.
func (o options) float32Ring() bool { return o.wireName != "full" }

// rankData is what a rank holds before it joins the job: the data, the
// model, and (on a restarted rank) the prepared pipeline.
type rankData struct {
	train, test *pipeline.Dataset
	source      string
	m           *nn.Model
	pipe        *pipeline.Pipeline
	rep         pipeline.Report
}

// load reads or generates the data and builds the model; a restarted
// rank also prepares the pipeline alone (see prepare).
func load(ctx context.Context, o options, restarted bool) (*rankData, error) {
	d := &rankData{source: "synthetic"}
	if o.data == "synthetic" {
		d.train, d.test = toPipeline(synthetic(o.seed, o.samples)), toPipeline(synthetic(o.seed+1, 2000))
	} else {
		var err error
		if d.train, err = readSet(o.data, "train", o.trainN); err != nil {
			return nil, err
		}
		if d.test, err = readSet(o.data, "t10k", o.testN); err != nil {
			return nil, err
		}
		d.source = "fashion-mnist"
	}
	m, err := newModelCNN(o.model, o.hidden, o.cnn, o.seed)
	if err != nil {
		return nil, err
	}
	d.m = m
	if restarted {
		// Its peers are training: they will not join a Prepare. Every
		// rank holds the whole training set, so the statistics of all of
		// it, summed here in one block, are the peers' up to the order of
		// float64 additions.
		if d.pipe, d.rep, err = prepare(ctx, o, d.train, d.test, alone{}); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// worker is one rank's training state.
type worker struct {
	o       options
	c       *collective.Comm
	cfg     collective.Config
	hub     *ps.Client
	pipe    *pipeline.Pipeline
	data    *pipeline.Dataset // the prepared training set
	feed    *feed             // this rank's samples, epoch after epoch
	ex      *exchange         // ring: how the gradients are averaged
	m       *nn.Model
	w       []float64 // the model's parameters
	g       []float64 // its gradient, and the ring's stop vote after it
	vel     []float64 // ring: the local optimizer's momentum
	resyncs int       // elastic view changes this rank went through (ring)
	x       []float64 // the batch
	y       []int
	out     io.Writer
	lag     bool // this rank is a straggler
	slowed  int  // the straggler's sleeps
	// -overhead: what this rank pays every iteration (0: nothing), how
	// many times it paid, and the time that took in all
	overhead time.Duration
	paid     int
	overTime time.Duration
	// progress (-stall and the view lines): when the last iteration
	// completed, the longest gap between two, and a view change whose
	// first completed iteration is still to come
	lastDone           time.Time
	longest, longestAt time.Duration
	longestIter        int
	completed          int // iterations this process completed
	pending            *viewChange
	// totals
	samples        int
	compute, idle  time.Duration
	comm, exposed  time.Duration // ring: the buckets' communication, and the part of it Wait was blocked on
	buckets        []int         // ring: the bytes of each bucket
	sent           int64         // ring: the bytes this rank sent, as the exchange models them
	pushed         int64         // hub modes: the payload bytes this rank pushed, as ps counts them (Tick)
	itimes         []float64     // each iteration's seconds, compute and synchronisation
	csv            *csvLog
	loss           float64 // the last batch's training loss
	t0             time.Time
	snaps          []snapshot
	iters, maxStal int
}

func train(o options, out io.Writer) error {
	// gorun ends a job that lost a rank with SIGTERM: training stops, and
	// rank 0 still reports what it learnt before (the resilience study).
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		if _, ok := <-sigs; ok {
			cancel(errors.New("gorun ended the job (SIGTERM)"))
		}
	}()
	cfg, err := collective.ConfigFromEnv(os.LookupEnv)
	if err != nil {
		return err
	}
	if err := checkStragglers(o.straggler, cfg.Size); err != nil {
		return err
	}
	if err := checkOverhead(o.overhead, cfg.Size); err != nil {
		return err
	}
	if o.partition > 0 {
		cfg.HubPartitionBytes = o.partition
	}
	// -wire decides the float32 all-reduces' format (the ring's float32
	// buckets, PowerSGD's factors), whatever gorun --wire says.
	cfg.Wire = o.wire
	// The data and the model first: a rank that gorun --max-restarts
	// brought back joins the running job in New, and the survivors wait
	// for it from then until its first collective (loading 20000 samples
	// after New stalled them for half a second).
	d, err := load(ctx, o, cfg.RestartCount > 0)
	if err != nil {
		return err
	}
	c, err := collective.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = runRank(ctx, o, c, cfg, d, out)
	return err
}

// runRank trains this rank of the job on c (whose Config is cfg) and
// reports; it returns the worker, for tests.
func runRank(ctx context.Context, o options, c *collective.Comm, cfg collective.Config, d *rankData, out io.Writer) (*worker, error) {
	if d.pipe == nil {
		// Collective: every rank standardizes with the statistics of
		// every rank's block, and checks that the filter dropped as many
		// samples everywhere. (A rank that New brought back into a running
		// job did this alone, in load.)
		var err error
		if d.pipe, d.rep, err = prepare(ctx, o, d.train, d.test, pipeline.FromComm(c)); err != nil {
			return nil, err
		}
	}
	testSet := fromPipeline(d.test)
	if o.epochs > 0 {
		o.iters = int(math.Ceil(o.epochs * float64(d.rep.N) / float64(o.batch)))
	}
	params := len(d.m.Params)
	wk := &worker{o: o, c: c, cfg: cfg, pipe: d.pipe, data: d.pipe.Data(), m: d.m, w: d.m.Params, g: make([]float64, params+1), out: out,
		lag: slices.Contains(o.straggler, c.Rank()) && o.slow > 1, overhead: o.overhead.of(c.Rank())}
	if wk.o.sleep == nil {
		wk.o.sleep = time.Sleep
	}
	if wk.o.pay == nil {
		wk.o.pay = sleepCtx
	}
	var err error
	if wk.feed, err = newFeed(d.pipe.Sampler(), o.sampling == "fixed", c.Rank(), c.View().Ranks); err != nil {
		return wk, err
	}
	var mw io.Writer
	if o.metrics != "" {
		f, err := os.Create(fmt.Sprintf("%s.%d", o.metrics, c.Rank()))
		if err != nil {
			return wk, err
		}
		defer f.Close()
		mw = f
	}
	if o.csv != "" {
		if wk.csv, err = openCSV(o.csv, c.Rank()); err != nil {
			return wk, err
		}
		defer wk.csv.close()
	}
	t0 := time.Now()
	wk.t0 = t0
	switch o.mode {
	case "ring":
		err = wk.ring(ctx, t0)
	case "bsp", "ssp", "asp", "lbbsp":
		if wk.hub = c.Hub(); wk.hub == nil {
			return wk, errors.New("hub modes need the hub strategy: gorun --strategy hub")
		}
		err = wk.hubLoop(ctx, t0, mw)
	default:
		return wk, fmt.Errorf("-mode %q: want ring, bsp, ssp, asp or lbbsp", o.mode)
	}
	if err != nil {
		if c.Rank() == 0 {
			// What was learnt before the failure, for the resilience study.
			at := time.Since(t0)
			wk.snap(t0, true)
			wk.printCurve(out, testSet)
			fmt.Fprintf(out, "failed t=%.3f err=%v\n", at.Seconds(), err)
		}
		return wk, err
	}
	elapsed := time.Since(t0)
	wk.snap(t0, true)
	if err := wk.csv.close(); err != nil {
		return wk, err
	}
	st, err := wk.gather(ctx, elapsed)
	if err != nil {
		if !cfg.HubElastic {
			return wk, err
		}
		// An elastic job that lost a rank: the ring cannot gather the
		// totals, so each survivor reports its own.
		st = wk.local(elapsed)
	}
	tot, stale, it, shares := st.tot, st.stale, st.it, st.shares
	bucketing := ""
	if o.mode == "ring" {
		// Each rank's mean over the run.
		comm, exposed := float64(tot[4])/float64(len(shares))/1e9, float64(tot[5])/float64(len(shares))/1e9
		hidden := 0.0
		if comm > 0 {
			hidden = 1 - exposed/comm
		}
		bucketing = fmt.Sprintf(" comm_s=%.3f exposed_s=%.3f hidden=%.2f", comm, exposed, hidden)
	}
	// Appended only with the flags that ask for them, so that the line
	// stays as it was without.
	if o.filter > 0 {
		bucketing += fmt.Sprintf(" dropped=%d", d.rep.Dropped)
	}
	if o.float32Ring() || o.powersgd > 0 {
		bucketing += fmt.Sprintf(" wire_B=%d", wk.sent/int64(max(1, wk.iters)))
	}
	if o.compressSet && o.mode != "ring" {
		// Every worker's pushes over every worker's iterations.
		bucketing += fmt.Sprintf(" push_B=%d", tot[6]/max(1, tot[3]))
	}
	if o.mode == "lbbsp" && wk.hub != nil && wk.hub.DeadlineRelaxed() > 0 {
		// Iterations hub 0 split without the --hub-share deadline, which
		// no split met (the same count on every rank).
		bucketing += fmt.Sprintf(" relaxed=%d", wk.hub.DeadlineRelaxed())
	}
	if o.overheadSet {
		// Every rank's over every rank's iterations, as compute_ms.
		bucketing += fmt.Sprintf(" overhead_ms=%.2f", float64(tot[7])/float64(max(1, tot[3]))/1e6)
	}
	if o.stall > 0 {
		fmt.Fprintf(out, "longest_iter ms=%.1f t=%.3f iter=%d\n", ms(wk.longest), wk.longestAt.Seconds(), wk.longestIter)
	}
	if wk.resyncs > 0 && c.Rank() == c.View().Ranks[0] {
		v := c.View()
		fmt.Fprintf(out, "elastic: epoch %d, ranks %v, %d view change(s)\n", v.Epoch, v.Ranks, wk.resyncs)
	}
	if c.Rank() == c.View().Ranks[0] {
		acc, loss, rmse := evaluate(wk.m, testSet)
		mean := it[1] / max(1, it[0])
		sd := math.Sqrt(max(0, it[2]/max(1, it[0])-mean*mean))
		idle := make([]string, len(shares))
		for r, s := range shares {
			idle[r] = fmt.Sprintf("%.3f", s)
		}
		iters := float64(max(1, tot[3]))
		fmt.Fprintf(out, "mode=%s model=%s straggler=%q data=%s ranks=%d time=%.2fs iterations=%d samples=%d accuracy=%.4f loss=%.4f idle=%.2f max_staleness=%d rmse=%.4f iter_ms=%.2f iter_sd_ms=%.2f rank_idle=%s compute_ms=%.2f sync_ms=%.2f params=%d stats=%s\n",
			o.mode, o.model, stragglerName(o.straggler, o.slow), d.source, c.Size(), elapsed.Seconds(), tot[3], tot[0], acc, loss,
			float64(tot[2])/float64(max(1, tot[1]+tot[2])), stale, rmse, 1000*mean, 1000*sd, strings.Join(idle, ","),
			float64(tot[1])/iters/1e6, float64(tot[2])/iters/1e6, len(wk.w), st.scope+bucketing)
		if o.mode == "ring" {
			fmt.Fprintf(out, "buckets n=%d bytes=%s overlap=%t\n", len(wk.buckets), ints(wk.buckets), o.overlap)
		}
		pts := wk.printCurve(out, testSet)
		if o.csv != "" {
			if err := writeCurve(o.csv, pts); err != nil {
				return wk, err
			}
		}
		if o.plot != "" {
			if err := plotCurve(o.plot, fmt.Sprintf("%s, %s, %d ranks", o.model, o.mode, c.Size()), pts); err != nil {
				return wk, err
			}
		}
		if o.dump != "" {
			if err := os.WriteFile(o.dump, reduce.AsBytes(wk.w), 0o644); err != nil {
				return wk, err
			}
		}
	}
	return wk, nil
}

// snapshot is rank 0's weights at t after the start.
type snapshot struct {
	t     time.Duration
	iter  int     // rank 0's iterations so far
	epoch float64 // as -csv's rows count it
	w     []float64
}

// snap keeps a copy of the weights on rank 0 when -curve is set and one is
// due (or always, with force), for the learning curve. Copying is cheap
// next to an iteration; the evaluation comes after training.
func (wk *worker) snap(t0 time.Time, force bool) {
	if wk.o.curve == 0 || wk.c.Rank() != 0 {
		return
	}
	t := time.Since(t0)
	if !force && len(wk.snaps) > 0 {
		last := wk.snaps[len(wk.snaps)-1]
		if wk.o.curve > 0 && t-last.t < wk.o.curve {
			return
		}
		// -curve unset with -csv or -plot: twenty points over the run.
		if wk.o.curve < 0 && (wk.o.iters > 0 && wk.iters-last.iter < max(1, wk.o.iters/20) || wk.o.iters == 0 && t-last.t < wk.o.duration/20) {
			return
		}
	}
	wk.snaps = append(wk.snaps, snapshot{t, wk.iters, wk.epoch(), append([]float64(nil), wk.w...)})
}

// epoch is how many passes over the training set the job has made, as
// this rank sees it (its own samples times the ranks).
func (wk *worker) epoch() float64 {
	return float64(wk.samples*wk.c.Size()) / float64(max(1, wk.data.N))
}

// logIter records one iteration (wall time from its start to its end)
// for -csv.
func (wk *worker) logIter(wall, compute, idle time.Duration, bytes int64, staleness int) error {
	return wk.csv.add(iterRow{iter: wk.iters, epoch: wk.epoch(), wall: wall, compute: compute, idl: idle,
		bytes: bytes, staleness: staleness, loss: wk.loss})
}

// stats are a run's totals: samples, compute and idle nanoseconds,
// iterations, the ring's bucket communication and exposed nanoseconds,
// the hub modes' pushed bytes, and the nanoseconds spent paying
// -overhead (tot); the largest staleness; the
// count, sum and sum of squares of iteration seconds (it); each rank's
// idle share; and whether they are the job's ("all") or this rank's
// alone ("local").
type stats struct {
	tot    []int64
	stale  int64
	it     []float64
	shares []float64
	scope  string
}

// local is this rank's own stats.
func (wk *worker) local(elapsed time.Duration) stats {
	st := stats{tot: []int64{int64(wk.samples), int64(wk.compute), int64(wk.idle), int64(wk.iters), int64(wk.comm), int64(wk.exposed), wk.pushed, int64(wk.overTime)}, stale: int64(wk.maxStal),
		it: []float64{float64(len(wk.itimes)), 0, 0}, shares: []float64{wk.idle.Seconds() / elapsed.Seconds()}, scope: "local"}
	for _, d := range wk.itimes {
		st.it[1] += d
		st.it[2] += d * d
	}
	return st
}

// gather sums the ranks' stats through the ring (the hub may have
// finished some workers already).
func (wk *worker) gather(ctx context.Context, elapsed time.Duration) (stats, error) {
	c := wk.c
	st := wk.local(elapsed)
	st.scope = "all"
	if err := c.SetStrategy(collective.StrategyRing); err != nil && wk.o.mode != "ring" {
		return st, err
	}
	if err := collective.AllReduce(ctx, c, st.tot, collective.Sum); err != nil {
		return st, err
	}
	stale := []int64{st.stale}
	if err := collective.AllReduce(ctx, c, stale, collective.Max); err != nil {
		return st, err
	}
	st.stale = stale[0]
	if err := collective.AllReduce(ctx, c, st.it, collective.Sum); err != nil {
		return st, err
	}
	shares := make([]float64, c.Size())
	if err := collective.AllGather(ctx, c, st.shares, shares); err != nil {
		return st, err
	}
	st.shares = shares
	return st, nil
}

// printCurve evaluates rank 0's snapshots and prints the learning curve;
// the weights end as the last snapshot's.
func (wk *worker) printCurve(out io.Writer, test *dataset) []curvePoint {
	var pts []curvePoint
	for _, s := range wk.snaps {
		copy(wk.w, s.w)
		acc, loss, rmse := evaluate(wk.m, test)
		fmt.Fprintf(out, "curve t=%.3f loss=%.4f rmse=%.4f accuracy=%.4f iter=%d\n", s.t.Seconds(), loss, rmse, acc, s.iter)
		pts = append(pts, curvePoint{t: s.t, iter: s.iter, epoch: s.epoch, loss: loss, rmse: rmse, accuracy: acc})
	}
	if len(wk.snaps) > 0 {
		copy(wk.w, wk.snaps[len(wk.snaps)-1].w)
	}
	return pts
}

// untilSizeWait is how long past -duration -until-size waits at most.
const untilSizeWait = 10 * time.Second

// done reports whether this worker has spent its budget.
func (wk *worker) done(t0 time.Time) bool {
	if wk.o.iters > 0 {
		return wk.iters >= wk.o.iters
	}
	el := time.Since(t0)
	if wk.o.untilSize > 0 && wk.c.Size() < wk.o.untilSize && el < wk.o.duration+untilSizeWait {
		return false // a restarted rank is on its way back
	}
	return el > wk.o.duration
}

// step computes the gradient of the batch idx of training samples into
// wk.g (scaled by -lr-decay and by weight, the feed's factor for a batch
// shorter than its peers'), slowed down on a straggler, and returns the
// compute time. If ready is not nil, step calls it with each layer that
// has parameters as soon as that layer's part of wk.g is final: during
// backward, last layer first. ready's error ends the step's callbacks
// and is returned.
func (wk *worker) step(idx []int, weight float64, ready func(layer int) error) (time.Duration, error) {
	t0 := time.Now()
	n := len(idx)
	wk.x, wk.y = batch(wk.data, idx, wk.x, wk.y)
	f := decay(wk.o.decay, wk.iters, wk.o.iters) * weight
	// A straggler sleeps -slow - 1 times each stretch of its compute (up
	// to each layer's gradient, and the rest), so that its gradients
	// become ready as late as on a slower machine.
	mark := t0
	slow := func() {
		if wk.lag {
			wk.slowed++
			wk.o.sleep(time.Duration(float64(time.Since(mark)) * (wk.o.slow - 1)))
		}
	}
	var err error
	wk.loss = wk.m.GradientEach(wk.x, wk.y, n, func(layer int) {
		lo, hi := wk.m.ParamRange(layer)
		g := wk.g[lo:hi]
		copy(g, wk.m.Grads[lo:hi])
		if f != 1 {
			for j := range g {
				g[j] *= f
			}
		}
		slow()
		if ready != nil && err == nil {
			err = ready(layer)
		}
		mark = time.Now()
	})
	slow()
	d := time.Since(t0)
	wk.samples += n
	wk.compute += d
	wk.iters++
	if wk.o.failRank == wk.c.Rank() && wk.o.failAt > 0 && wk.c.Restarts() == 0 && time.Since(wk.t0) >= wk.o.failAt {
		// (A rank that gorun --max-restarts brought back does not fail
		// again.)
		sig := map[string]syscall.Signal{"kill": syscall.SIGKILL, "stop": syscall.SIGSTOP}[wk.o.failHow]
		if wk.o.stall > 0 {
			now := time.Now()
			fmt.Fprintf(wk.out, "fail how=%s t=%.3f unix_ms=%d iter=%d\n", wk.o.failHow, now.Sub(wk.t0).Seconds(), now.UnixMilli(), wk.iters)
		}
		_ = syscall.Kill(os.Getpid(), sig)
	}
	return d, err
}

// payOverhead pays this rank's -overhead once, after backward and before
// the push or all-reduce: it sleeps that long (o.pay) and returns how
// long that took, which is neither compute (step measured that already,
// and the hub hears of it alone) nor synchronisation, but part of the
// iteration's time. A rank without an overhead does nothing.
func (wk *worker) payOverhead(ctx context.Context) (time.Duration, error) {
	if wk.overhead <= 0 {
		return 0, nil
	}
	t := time.Now()
	wk.paid++
	err := wk.o.pay(ctx, wk.overhead)
	d := time.Since(t)
	wk.overTime += d
	if err != nil {
		return d, fmt.Errorf("-overhead: %w", err)
	}
	return d, nil
}

// sleepCtx sleeps d, or until ctx is done (then its cause).
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// iterMetrics is a -metrics line: the hub's record of the iteration
// (ps.Metrics, from Tick) with the iteration's wall time, from the share
// request (LB-BSP) or the batch to the end of its pull, and the time it
// paid for -overhead (0 without).
type iterMetrics struct {
	ps.Metrics
	Wall     time.Duration `json:"wall_ns"`
	Overhead time.Duration `json:"overhead_ns"`
}

// writeIterMetrics writes m as one JSON line.
func writeIterMetrics(w io.Writer, m iterMetrics) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// decay is the factor of iteration i's gradient under schedule kind over
// iters iterations: 1 for none, and for cosine (1+cos(pi*i/iters))/2,
// from 1 down towards 0. Scaling the gradient rather than the rate keeps
// the schedule in the worker, so the ring and the hub's optimizer follow
// it alike.
func decay(kind string, i, iters int) float64 {
	if kind != "cosine" || iters <= 0 {
		return 1
	}
	return (1 + math.Cos(math.Pi*float64(min(i, iters))/float64(iters))) / 2
}

// ring: average the gradients over the ranks (exchange: in buckets of a
// collective.Bucketer, each layer's as soon as backward has finished it,
// at full precision or in a wire format; or by PowerSGD after backward)
// and apply the same momentum step to the average on every rank. The
// last element of wk.g is the stop vote: rank 0 sets it when the budget
// is spent, so that every rank stops after the same iteration.
func (wk *worker) ring(ctx context.Context, t0 time.Time) error {
	params := len(wk.w)
	wk.vel = make([]float64, params)
	share := max(1, wk.o.batch/wk.c.Size())
	ex, err := newExchange(wk, wk.cfg)
	if err != nil {
		return err
	}
	wk.ex = ex
	ready := func(layer int) error { return ex.ready(ctx, layer) }
	wk.snap(t0, true)
	wk.lastDone = time.Now()
	for {
		start := time.Now()
		idx, weight, err := wk.feed.take(share, wk.c.View().Ranks)
		if err != nil {
			return err
		}
		ex.begin(wk.iters)
		d, err := wk.step(idx, weight, ready)
		if err != nil {
			return err
		}
		// -overhead: after backward, before the last bucket (the stop
		// vote's) starts, so that the peers wait for it in finish.
		if _, err := wk.payOverhead(ctx); err != nil {
			return err
		}
		wk.g[params] = 0
		if wk.c.Rank() == wk.c.View().Ranks[0] && wk.done(t0) {
			wk.g[params] = 1
		}
		t1 := time.Now()
		if err := ex.finish(ctx); err != nil {
			if !errors.Is(err, collective.ErrViewChanged) {
				return err
			}
			// gorun --elastic lost a rank (or took a restarted one back):
			// take the model and the place in the epoch from the view's
			// first rank that has them, deal the rest of the epoch to the
			// new view, and redo the step (not applied here, so not
			// counted).
			errAt, before := time.Now(), wk.iters
			wk.iters--
			elapsed, err := wk.resync(ctx, time.Since(t0), share)
			if err != nil {
				return err
			}
			if wk.c.Restarts() > 0 {
				// A restarted rank goes on with the survivors' clock.
				t0 = time.Now().Add(-elapsed)
				wk.t0 = t0
			}
			wk.pending = &viewChange{view: wk.c.View(), at: errAt.Sub(t0), err: errAt, resync: time.Since(errAt), redone: before - wk.iters, prev: wk.lastDone}
			share = max(1, wk.o.batch/wk.c.Size())
			// The step's collectives failed, and the Bucketer with them:
			// a new one (ready calls it) for the new view.
			if err := ex.renew(); err != nil {
				return err
			}
			continue
		}
		wk.feed.commit()
		synced := time.Since(t1)
		wk.idle += synced
		if st := ex.stats(); st != nil {
			wk.buckets = wk.buckets[:0]
			for _, s := range st {
				wk.comm += s.Comm
				wk.exposed += s.Exposed
				wk.buckets = append(wk.buckets, s.Bytes)
			}
		}
		inv := ex.scale()
		for j := range params {
			wk.vel[j] = wk.o.mom*wk.vel[j] + wk.g[j]*inv
			wk.w[j] -= wk.o.lr * wk.vel[j]
		}
		wk.sent += ex.sent
		wall := time.Since(start)
		if err := wk.logIter(wall, d, synced, ex.sent, 0); err != nil {
			return err
		}
		wk.itimes = append(wk.itimes, wall.Seconds())
		wk.progress(time.Now())
		wk.snap(t0, false)
		if wk.g[params] > 0 {
			return nil
		}
	}
}

// ringGrads is what the ring's Bucketer reduces, all parts of wk.g: the
// stop vote, then the gradient of each layer with parameters, in
// parameter order; of maps a layer to its place (-1: no parameters). The
// vote comes first, so that the first layout, which takes the gradients
// last first (the order backward finishes them in), puts it last: it is
// set after backward and holds no bucket before it back.
func (wk *worker) ringGrads() (grads [][]float64, of []int) {
	params := len(wk.w)
	grads = [][]float64{wk.g[params : params+1]}
	of = make([]int, len(wk.m.Layers))
	for i, l := range wk.m.Layers {
		of[i] = -1
		if l.NumParams() > 0 {
			lo, hi := wk.m.ParamRange(i)
			of[i] = len(grads)
			grads = append(grads, wk.g[lo:hi:hi])
		}
	}
	return grads, of
}

// bucketConfig is the ring's bucketing: DefaultBucketConfig with
// -bucket-mb, -first-bucket-mb and -overlap.
func bucketConfig(o options) collective.BucketConfig {
	cfg := collective.DefaultBucketConfig()
	cfg.CapBytes, cfg.FirstBytes, cfg.Overlap = mib(o.bucketMB), mib(o.firstMB), o.overlap
	return cfg
}

// mib is x MiB in bytes, at least one.
func mib(x float64) int { return max(1, int(x*(1<<20))) }

// resync, after an elastic view change, gives every rank the weights, the
// momentum, the iteration count, the training time so far and the place
// in the epoch of the view's first rank that has them (the survivors may
// disagree on whether the interrupted step was applied; a restarted rank
// has none), and deals the rest of that epoch to the live ranks
// (pipeline's Part.Resume of what every rank together consumed in the
// steps of share samples committed).
func (wk *worker) resync(ctx context.Context, elapsed time.Duration, share int) (time.Duration, error) {
	state := append(append([]float64(nil), wk.w...), wk.vel...)
	state = append(state, float64(wk.iters), elapsed.Seconds())
	state = append(state, wk.feed.state(share)...)
	if err := collective.Resync(ctx, wk.c, state); err != nil {
		return 0, err
	}
	n := len(wk.w)
	copy(wk.w, state[:n])
	copy(wk.vel, state[n:2*n])
	wk.iters = int(state[2*n])
	if err := wk.feed.resume(state[2*n+2:], wk.c.View().Ranks); err != nil {
		return 0, err
	}
	wk.resyncs++
	return time.Duration(state[2*n+1] * float64(time.Second)), nil
}

// hubLoop pushes each gradient with its sample count and pulls the
// weights, with the optimizer at the hub. A worker stops at the budget and
// says goodbye; BSP rounds then go on without it. Its samples come from
// the feed as the ring's do (the same batches, so BSP trains the same
// weights), but for LB-BSP, whose share of each global batch the hub
// sets: the worker draws that many from its part of the epoch, and on
// into the next epoch's.
func (wk *worker) hubLoop(ctx context.Context, t0 time.Time, mw io.Writer) error {
	params := len(wk.w)
	cfg := ps.KeyConfig{Len: params, Init: append([]float64(nil), wk.w...), Update: ps.SGD, LR: wk.o.lr, Momentum: wk.o.mom, Sparse: wk.o.compress}
	switch wk.o.mode {
	case "ssp":
		cfg.Staleness = wk.o.staleness
	case "asp":
		cfg.Staleness = ps.Async
	}
	if err := wk.hub.Declare(ctx, "w", cfg); err != nil {
		return err
	}
	share := max(1, wk.o.batch/wk.c.Size())
	var last time.Duration
	lastN := 0
	wk.snap(t0, true)
	wk.lastDone = time.Now()
	for !wk.done(t0) {
		start := time.Now()
		var idx []int
		var err error
		if wk.o.mode == "lbbsp" {
			var n int
			if n, err = wk.hub.Share(ctx, wk.o.batch, lastN, last); err != nil {
				return err
			}
			idx, err = wk.feed.draw(max(1, n), wk.c.View().Ranks)
		} else {
			idx, _, err = wk.feed.take(share, wk.c.View().Ranks)
			wk.feed.commit()
		}
		if err != nil {
			return err
		}
		// The hub weighs each push by its samples: no factor here.
		d, err := wk.step(idx, 1, nil)
		if err != nil {
			return err
		}
		// The hub hears of the compute alone (Share, Tick): -overhead is
		// paid after it, before the push.
		last, lastN = d, len(idx)
		over, err := wk.payOverhead(ctx)
		if err != nil {
			return err
		}
		if err := wk.hubPush(ctx, len(idx)); err != nil {
			return err
		}
		m := wk.hub.Tick(len(idx), d)
		wall := time.Since(start)
		if err := wk.logIter(wall, d, m.Wait, m.BytesSent, m.Staleness); err != nil {
			return err
		}
		wk.itimes = append(wk.itimes, wall.Seconds())
		wk.progress(time.Now())
		wk.snap(t0, false)
		wk.idle += m.Wait
		wk.pushed += m.BytesSent
		wk.maxStal = max(wk.maxStal, m.Staleness)
		if mw != nil {
			if err := writeIterMetrics(mw, iterMetrics{m, wall, over}); err != nil {
				return err
			}
		}
	}
	// Leave the hubs: rounds no longer wait for this worker.
	return wk.hub.Close()
}

// hubPush pushes this step's gradient, of samples samples, to the hubs
// and pulls the new weights into wk.w: the one place a hub mode sends a
// gradient. With -compress the key is sparse (hubLoop declares it with
// KeyConfig.Sparse) and the same PushPull sends, of each partition of n
// elements, k = ⌈ratio·n⌉ of them (ps.SparseK): top-k's largest
// magnitudes with their indices, or random-k's values alone, as float64
// (the gradient's type), the pull still dense. With error feedback (on
// unless ,noef) ps keeps on this worker what the push did not send and
// adds it to the next push, and takes back what a hub did not apply. An
// elastic change follows ps's rule: a worker removed from the job
// (gorun --hub-elastic) takes its residual with it, the survivors keep
// theirs and send it in their next pushes; nothing here resets it, and a
// rank that gorun --max-restarts brought back starts with none (a new
// Client).
func (wk *worker) hubPush(ctx context.Context, samples int) error {
	return ps.PushPull(wk.hub, "w", wk.g[:len(wk.w)], samples, wk.w).Wait(ctx)
}

// viewChange is an elastic view change as this rank went through it: the
// new view, when its ErrViewChanged came (since the start of training,
// and on the wall clock), how long the Resync took, how many of this
// rank's steps it undid, and when this rank last completed an iteration
// before it.
type viewChange struct {
	view      View
	at        time.Duration
	err, prev time.Time
	resync    time.Duration
	redone    int
}

// View is collective.View (here to keep viewChange's fields short).
type View = collective.View

// progress records an iteration completed at now: the gap since the one
// before (printed with -stall when longer than it), the longest gap after
// the first iteration, and
// the line of a view change that this iteration is the first after. A
// view line gives the times on the wall clock, in Unix milliseconds (the
// ranks of a job share a clock when they share a host): prev_ms the last
// completed iteration before the change, err_ms when ErrViewChanged came,
// back_ms this first completed one after; and up_ms, this process's age
// (a restarted rank's time from its start to its first step on the ring).
func (wk *worker) progress(now time.Time) {
	gap := now.Sub(wk.lastDone)
	wk.completed++
	// (The first iteration sets up the connections: not a stall.)
	if gap > wk.longest && wk.completed > 1 {
		wk.longest, wk.longestAt, wk.longestIter = gap, now.Sub(wk.t0), wk.iters
	}
	if wk.o.stall > 0 && gap > wk.o.stall {
		fmt.Fprintf(wk.out, "stall ms=%.1f start_ms=%d end_ms=%d t=%.3f iter=%d\n", ms(gap), wk.lastDone.UnixMilli(), now.UnixMilli(), now.Sub(wk.t0).Seconds(), wk.iters)
	}
	if v := wk.pending; v != nil {
		wk.pending = nil
		joined := "-"
		if len(v.view.Joined) > 0 {
			joined = ints(v.view.Joined)
		}
		fmt.Fprintf(wk.out, "view epoch=%d ranks=%s joined=%s t=%.3f prev_ms=%d err_ms=%d back_ms=%d resync_ms=%.1f redone=%d iter=%d restart=%d up_ms=%d\n",
			v.view.Epoch, ints(v.view.Ranks), joined, v.at.Seconds(), v.prev.UnixMilli(), v.err.UnixMilli(), now.UnixMilli(), ms(v.resync), v.redone, wk.iters,
			wk.c.Restarts(), now.Sub(started).Milliseconds())
	}
	wk.lastDone = now
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// ints is 0,1,2.
func ints(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}
