package collective

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/gorun/gorun/internal/jobenv"
	"github.com/gorun/gorun/internal/jobsecret"
	"github.com/gorun/gorun/membership"
	"github.com/gorun/gorun/ps"
	"github.com/gorun/gorun/reduce"
	"github.com/gorun/gorun/transport/shm"
	"github.com/gorun/gorun/transport/tcp"
	"github.com/gorun/gorun/transport/wire"
)

// Algorithm picks how AllReduce, Reduce and Broadcast move data (and,
// for Hierarchical or Auto, ReduceScatter and AllGather).
type Algorithm int

const (
	// Auto uses Ring above Config.SmallBytes (Hierarchical when ranks
	// share hosts across several hosts, Halving while the buffer is small
	// for the number of ranks, see Halving); below, Doubling on a power of
	// two from 4 ranks or on more than 8 ranks, and Direct otherwise.
	Auto Algorithm = iota
	// Ring is the bandwidth-optimal pipelined ring (chain for Broadcast).
	Ring
	// Direct is the one-round exchange: every rank sends its buffer to
	// every other rank.
	Direct
	// Doubling is recursive doubling: log2(N) rounds of one message each.
	Doubling
	// Hierarchical is node-aware: the all-reduce is a reduce-scatter among
	// the ranks of each host (shared memory), an all-reduce of each slice
	// across hosts and an all-gather on each host; ReduceScatter and
	// AllGather run their cross-host stage between the ranks at the same
	// place on each host, so that every rank's links carry a share of the
	// data. Auto picks it above SmallBytes when
	// the job spans several hosts with the same number of ranks (at least
	// two) on each; Ring forces the flat ring.
	Hierarchical
	// Halving is recursive halving and doubling (Rabenseifner): the ring's
	// bytes in 2·log2(N) steps instead of 2(N−1). Auto picks it above
	// SmallBytes when N is a power of two from 4 up and the buffer is at
	// most N × 32 KiB, or N is 8 or more and the buffer at most N × 8 KiB
	// (ring.HalvingWins), and for the cross-host stage of Hierarchical on
	// the same terms for the number of hosts.
	Halving
)

var algorithmNames = []string{Auto: "auto", Ring: "ring", Direct: "direct", Doubling: "doubling", Hierarchical: "hierarchical", Halving: "halving"}

// String is the algorithm's name, as GORUN_ALGORITHM takes it.
func (a Algorithm) String() string {
	if a >= 0 && int(a) < len(algorithmNames) {
		return algorithmNames[a]
	}
	return fmt.Sprintf("Algorithm(%d)", int(a))
}

// ParseAlgorithm returns the algorithm of a name: auto, ring, direct,
// doubling, halving or hierarchical.
func ParseAlgorithm(name string) (Algorithm, error) {
	for a, n := range algorithmNames {
		if n == name {
			return Algorithm(a), nil
		}
	}
	return Auto, fmt.Errorf("unknown algorithm %q (want one of %s)", name, strings.Join(algorithmNames, ", "))
}

// Strategies.
const (
	StrategyRing = "ring"
	StrategyHub  = "hub"
)

// Config says how a rank joins its job. Build it with DefaultConfig (then
// set the job's identity) or ConfigFromEnv.
type Config struct {
	Rank, Size int
	JobID      string
	Secret     []byte // the per-job secret; at least 16 bytes
	Strategy   string // "ring" (default) or "hub"

	// Hubs are the addresses of dedicated ParamHub processes (gorun
	// --hubs K starts them and sets GORUN_HUBS). Without them the hub
	// strategy runs ColocatedHubs hubs inside ranks 0..ColocatedHubs-1:
	// 1 is a classic parameter server on rank 0, Size a shard in every
	// rank (GORUN_COLOCATED_HUBS).
	Hubs          []string
	ColocatedHubs int
	// HubPartitionBytes is the largest piece of a buffer one hub handles
	// in one message; partitions are spread over the hubs
	// (ps.ClientConfig.PartitionBytes).
	HubPartitionBytes int
	// HubRoundPartitions is about how many partitions per hub a
	// collective round is cut into, none larger than HubPartitionBytes
	// (ps.ClientConfig.RoundPartitionsPerHub); 0 cuts every round into
	// partitions of exactly HubPartitionBytes. HubWindow is how many of a
	// round's partitions a rank has outstanding on one hub reached over
	// the network (ps.ClientConfig.RoundWindow); 0 sends them all at once.
	HubRoundPartitions int
	HubWindow          int
	// HubTimeout: a hub that stays silent this long while owing an answer
	// is lost (ps.ClientConfig.HubTimeout).
	//
	// DefaultConfig takes these four from ps.DefaultClientConfig.
	HubTimeout time.Duration
	// HubElastic (GORUN_HUB_ELASTIC=1, gorun --hub-elastic): colocated
	// hubs finish BSP rounds without a lost rank, and a lost rank does not
	// break this rank's hub client (keyed push and pull go on; the ring
	// and the hub strategy's collectives still fail).
	HubElastic bool
	// HubShare (GORUN_HUB_SHARE, gorun --hub-share) is how hub 0 splits
	// an LB-BSP batch among the workers that ask for their share
	// (ps.Client.Share): the proportional rule by default, or
	// ps.ShareOptimal's solver with its deadline, weights, prices, caps
	// and overheads (ps.ShareConfig; ps.ParseShareConfig reads the text
	// form). It configures the colocated hubs; dedicated hubs read the
	// variable themselves. Its per-worker lists have one entry per rank.
	HubShare ps.ShareConfig

	// Seeds are the gossip addresses ("host:port") of the job's ranks,
	// one per rank, in rank order: a rank joins a few of them (see
	// membership.Config.Seeds); a list of another length is tried in full.
	Seeds []string
	// AdvertiseAddr is the address other ranks reach this one at. A
	// loopback address (a job on one host) also narrows the listeners
	// that would take any address (DataListen's default, gossip's) to it,
	// so that the job cannot be reached from the network.
	AdvertiseAddr string
	// GossipPort is where this rank's gossip member listens (0: any).
	GossipPort int
	// DataListen is where the data plane listens; its port is published
	// by gossip.
	DataListen string
	// JoinTimeout bounds New: at a job's start, finding the ranks by
	// gossip fails once this long passes with no rank appearing (a large
	// start that keeps making progress is waited for); what follows, and
	// a restarted rank's whole join, must end within it.
	JoinTimeout time.Duration
	// CloseTimeout bounds Close on a rank that hosts a hub: it keeps the
	// hub serving until every rank has left it, a rank is lost, or this
	// long has passed.
	CloseTimeout time.Duration

	// Elastic (GORUN_ELASTIC=1, gorun --elastic) keeps the ring strategy's
	// job going when a rank is lost: see View and ErrViewChanged. Control
	// is the channel to gorun's sequencer (from GORUN_CONTROL_FD), and
	// ViewTimeout how long a rank that lost a peer waits for the new view
	// before it fails as without Elastic [30 s].
	Elastic     bool
	Control     io.ReadWriteCloser
	ViewTimeout time.Duration
	// RestartCount (GORUN_RESTART_COUNT, gorun --max-restarts) is k on
	// the k-th restart of this rank, 0 on its first start. A restarted
	// elastic rank joins the running job (see Resync) instead of starting
	// one: it waits for the sequencer's current view, finds those ranks by
	// gossip, says join and starts in the view that holds it.
	RestartCount int
	Algorithm    Algorithm
	SmallBytes   int // Auto's threshold between Direct and Ring
	SegmentBytes int // pipelining unit of the ring
	MaxFrame     int // largest payload accepted from a peer
	// SpinTime is how long a receive polls its socket before it sleeps.
	// Spinning cuts small-message latency severalfold on an idle machine;
	// 0 never spins. SpinYield gives the core away between polls, which
	// is what a host with more ranks than cores needs: ConfigFromEnv
	// turns it on, with OversubscribedSpinTime, when GORUN_LOCAL_SIZE
	// exceeds the CPUs. GORUN_SPIN=<duration> overrides SpinTime.
	// HostRanks is the job's ranks on this host (GORUN_LOCAL_SIZE; 0
	// where unknown): yielding waits park at once while the host has
	// other work besides them (on 2 CPUs, about two busy processes or
	// more; docs/performance.md).
	SpinTime  time.Duration
	SpinYield bool
	HostRanks int

	// Shm (default on; GORUN_SHM=0 turns it off) moves data between ranks
	// on one host through shared memory instead of loopback TCP.
	Shm bool
	// HostKey names this rank's host for Shm: ranks share memory only with
	// ranks of an equal key on the same kernel. ConfigFromEnv sets it from
	// the launcher's placement (job and node number); "" means the
	// hostname.
	HostKey string

	// Gossip timers: a silent rank is declared dead after roughly
	// ProbeInterval * (a few + SuspicionMult). A job of more than 64 ranks
	// stretches ProbeInterval and ProbeTimeout by Size/64, at most 4 times
	// (package membership).
	ProbeInterval time.Duration
	ProbeTimeout  time.Duration
	SuspicionMult int

	// StatusFile is the status page gorun's agent made for this rank
	// (GORUN_STATUS_FILE): the Comm records in it which collective it is
	// in, so that gorun can tell a stalled job's ranks apart (--stall-warn)
	// and knows the rank is a Go program it can ask for a goroutine dump.
	// "" keeps no page.
	StatusFile string

	// Wire (GORUN_WIRE, gorun --wire) is the wire format of float32
	// all-reduces (AllReduce, GroupAllReduce and their Start forms) large
	// enough to leave the small-buffer algorithms: WireFP16 or WireBF16
	// halve the bytes sent, every sum is still taken in float32, and the
	// result is the sum rounded to the format once per ring step, or on
	// the hub strategy the float32 sum of the rounded parts rounded once
	// by the hub (bit for bit the same on every rank either way). Other
	// element types and small buffers stay at full precision. Every rank
	// must set the same: ranks that differ fail at their first such
	// all-reduce, naming the wire format. AllReduceWire picks one for a
	// single call.
	Wire Wire

	// Exact (GORUN_EXACT=1, gorun --exact) makes float32 and float64 Sum
	// and Avg reductions (AllReduce, GroupAllReduce, the Bucketer,
	// ReduceScatter and their Start forms) exact and order-independent:
	// the same bits whatever the algorithm, strategy, rank placement and
	// order, fusion and chunking, and within a stated bound of the exact
	// sum (exact.go says how and what it costs). Every rank must set the
	// same. Wire formats do not apply to them.
	Exact bool

	// Timing (GORUN_TIMING=1, set by gorun --metrics) makes the Comm also
	// record on its status page how long its collectives took and how
	// much of that it waited for peers' data (two clock reads a call).
	Timing bool

	// TimelineFile (GORUN_TIMELINE_FILE, set by gorun --timeline): the
	// Comm records every collective and every Span in memory and writes
	// them there at Close, for gorun to merge into one trace. "" records
	// nothing.
	TimelineFile string

	Logger *slog.Logger

	// onConnect is the rank mesh's tcp.Config.OnConnect (tests: which
	// peers the collectives made a rank connect to).
	onConnect func(peer int, sharedMemory bool)
}

// OversubscribedSpinTime is how long a yielding receive polls before it
// sleeps when ranks outnumber cores. Measured on 2 cores, 4 KiB
// all-reduce: 4 ranks 160-200 us without spinning, 75-85 us spinning 1-5 ms;
// 16 ranks 900 us without, 200 us spinning 5 ms.
const OversubscribedSpinTime = 5 * time.Millisecond

// DefaultConfig returns the defaults for everything but the job's identity.
func DefaultConfig() Config {
	gossip, hub := membership.DefaultConfig(), ps.DefaultClientConfig()
	return Config{
		Strategy:           StrategyRing,
		ColocatedHubs:      1,
		HubPartitionBytes:  hub.PartitionBytes,
		HubRoundPartitions: hub.RoundPartitionsPerHub,
		HubWindow:          hub.RoundWindow,
		HubTimeout:         hub.HubTimeout,
		AdvertiseAddr:      "127.0.0.1",
		DataListen:         "0.0.0.0:0",
		JoinTimeout:        60 * time.Second,
		CloseTimeout:       30 * time.Second,
		ViewTimeout:        30 * time.Second,
		SmallBytes:         32 << 10,
		SegmentBytes:       512 << 10,
		MaxFrame:           wire.DefaultMaxPayload,
		SpinTime:           tcp.DefaultConfig().SpinTime,
		Shm:                true,
		ProbeInterval:      gossip.ProbeInterval,
		ProbeTimeout:       gossip.ProbeTimeout,
		SuspicionMult:      gossip.SuspicionMult,
	}
}

func (c *Config) validate() error {
	var errs []error
	if c.Size < 1 {
		errs = append(errs, fmt.Errorf("size %d: must be at least 1", c.Size))
	}
	if !c.Wire.Valid() {
		errs = append(errs, fmt.Errorf("wire format %d: want full, fp16 or bf16", c.Wire))
	}
	if c.Rank < 0 || c.Rank >= max(c.Size, 1) {
		errs = append(errs, fmt.Errorf("rank %d out of range for size %d", c.Rank, c.Size))
	}
	if c.Size > 1 {
		if c.JobID == "" {
			errs = append(errs, errors.New("no job id"))
		}
		if err := jobsecret.Check(c.Secret); err != nil {
			errs = append(errs, err)
		}
		if len(c.Seeds) == 0 {
			errs = append(errs, errors.New("no gossip seeds"))
		}
	}
	if c.Elastic && c.Strategy == StrategyHub {
		errs = append(errs, errors.New("config: Elastic is for the ring strategy; the hub strategy's is HubElastic (gorun --elastic sets the right one)"))
	}
	if c.RestartCount < 0 || c.RestartCount > 0 && (!c.Elastic || c.Control == nil) {
		errs = append(errs, fmt.Errorf("RestartCount %d: a restarted rank joins an elastic job through its control channel (gorun --elastic --max-restarts)", c.RestartCount))
	}
	if c.Elastic && c.ViewTimeout <= 0 {
		errs = append(errs, errors.New("ViewTimeout must be > 0 with Elastic"))
	}
	if c.Algorithm < Auto || c.Algorithm > Halving {
		errs = append(errs, fmt.Errorf("unknown algorithm %v", c.Algorithm))
	}
	switch c.Strategy {
	case "", StrategyRing, StrategyHub:
	default:
		errs = append(errs, fmt.Errorf("unknown strategy %q (want ring or hub)", c.Strategy))
	}
	if c.SegmentBytes < 8 || c.SegmentBytes > c.MaxFrame || c.SmallBytes < 0 || c.JoinTimeout <= 0 || c.CloseTimeout <= 0 || c.SpinTime < 0 {
		errs = append(errs, errors.New("SegmentBytes must be in [8, MaxFrame], SmallBytes >= 0, JoinTimeout and CloseTimeout > 0, SpinTime >= 0"))
	}
	if c.Strategy == StrategyHub && len(c.Hubs) == 0 && (c.ColocatedHubs < 1 || c.ColocatedHubs > c.Size) {
		errs = append(errs, fmt.Errorf("ColocatedHubs %d: must be 1 to Size (%d) when no dedicated hubs are given", c.ColocatedHubs, c.Size))
	}
	if err := c.HubShare.Validate(max(c.Size, 1)); err != nil {
		errs = append(errs, err)
	}
	if c.Strategy == StrategyHub && (c.HubPartitionBytes < 8 || c.HubPartitionBytes > c.MaxFrame || c.HubTimeout <= 0 || c.HubRoundPartitions < 0 || c.HubWindow < 0) {
		errs = append(errs, errors.New("HubPartitionBytes must be in [8, MaxFrame], HubTimeout > 0, HubRoundPartitions and HubWindow >= 0"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("collective: bad config: %w", err)
	}
	return nil
}

// ConfigFromEnv builds a Config from the environment gorun gives every
// rank (see internal/jobenv for the names: GORUN_RANK, GORUN_SIZE,
// GORUN_JOB_ID, GORUN_JOB_SECRET, GORUN_PEERS, GORUN_ADDR,
// GORUN_GOSSIP_PORT and optionally GORUN_STRATEGY, GORUN_HUBS,
// GORUN_HUB_ELASTIC, GORUN_HUB_SHARE, GORUN_ELASTIC, GORUN_CONTROL_FD, GORUN_COLOCATED_HUBS,
// GORUN_LOCAL_SIZE, GORUN_SPIN and GORUN_ALGORITHM). lookup is os.LookupEnv in a real rank. This is the only
// place a rank reads the environment.
func ConfigFromEnv(lookup func(string) (string, bool)) (Config, error) {
	cfg := DefaultConfig()
	env := jobenv.NewReader(lookup)
	cfg.Rank, cfg.Size = env.Int(jobenv.RankVar), env.Int(jobenv.SizeVar)
	cfg.JobID = env.String(jobenv.JobIDVar)
	cfg.Secret = []byte(env.String(jobenv.SecretVar))
	peers := env.String(jobenv.PeersVar)
	cfg.AdvertiseAddr = env.String(jobenv.AddrVar)
	cfg.GossipPort = env.Int(jobenv.GossipPortVar)
	if v, ok := env.Lookup(jobenv.StrategyVar); ok {
		cfg.Strategy = v
	}
	cfg.Hubs = env.List(jobenv.HubsVar)
	cfg.HubElastic = env.Flag(jobenv.HubElasticVar)
	cfg.Elastic = env.Flag(jobenv.ElasticVar)
	if fd := env.OptionalInt(jobenv.ControlFDVar, -1); fd >= 0 && cfg.Elastic {
		cfg.Control = os.NewFile(uintptr(fd), "gorun control channel")
	}
	cfg.RestartCount = env.OptionalInt(jobenv.RestartCountVar, 0)
	cfg.ColocatedHubs = env.OptionalInt(jobenv.ColocatedHubsVar, cfg.ColocatedHubs)
	cfg.HostRanks = env.OptionalInt(jobenv.LocalSizeVar, 0)
	if n := cfg.HostRanks; n > runtime.NumCPU() {
		// Oversubscribed: a plain spin would starve the peers, and
		// parking costs a sleep and a wake-up per message, so a waiting
		// rank polls and gives its core away between polls, as MPI
		// libraries do. Measured on 2 cores, 8 and 16 ranks: 4 KiB
		// all-reduce 63 and 200 us this way, 230 and 900 us parked.
		cfg.SpinTime, cfg.SpinYield = OversubscribedSpinTime, true
	}
	cfg.SpinTime = env.Duration(jobenv.SpinVar, cfg.SpinTime)
	if v, ok := env.Lookup(jobenv.AlgorithmVar); ok {
		a, err := ParseAlgorithm(v)
		if err != nil {
			return Config{}, fmt.Errorf("collective: %s: %w", jobenv.AlgorithmVar, err)
		}
		cfg.Algorithm = a
	}
	cfg.Shm = env.Switch(jobenv.ShmVar, cfg.Shm)
	if v, ok := env.Lookup(jobenv.StatusFileVar); ok {
		cfg.StatusFile = v
	}
	if v, ok := env.Lookup(jobenv.TimelineFileVar); ok {
		cfg.TimelineFile = v
	}
	cfg.Exact = env.Switch(jobenv.ExactVar, cfg.Exact)
	if v, ok := env.Lookup(jobenv.WireVar); ok {
		w, err := reduce.ParseWire(v)
		if err != nil {
			return Config{}, fmt.Errorf("collective: %s: %w", jobenv.WireVar, err)
		}
		cfg.Wire = w
	}
	if v, ok := env.Lookup(jobenv.HubShareVar); ok {
		sc, err := ps.ParseShareConfig(v)
		if err != nil {
			return Config{}, fmt.Errorf("collective: %s: %w", jobenv.HubShareVar, err)
		}
		cfg.HubShare = sc
	}
	if v, ok := env.Lookup(jobenv.TimingVar); ok {
		cfg.Timing = v == "1"
	}
	if node, ok := env.Lookup(jobenv.NodeRankVar); ok {
		cfg.HostKey = jobenv.NodeName(node)
	}
	if err := env.Err("start this program with gorun (or use collective.New with a Config)"); err != nil {
		return Config{}, fmt.Errorf("collective: %w", err)
	}
	cfg.Seeds = strings.Split(peers, ",")
	if len(cfg.Seeds) != cfg.Size {
		return Config{}, fmt.Errorf("collective: %s lists %d ranks, %s is %d", jobenv.PeersVar, len(cfg.Seeds), jobenv.SizeVar, cfg.Size)
	}
	return cfg, cfg.validate()
}

// hostKey is what the transport and the hubs compare to find ranks on
// this host: HostKey within this job ("" lets them use the hostname).
func (c *Config) hostKey() string { return jobenv.HostKey(c.JobID, c.HostKey) }

// listenHost is the host this rank's listeners bind (the data plane's,
// gossip's and a colocated hub's): DataListen's, or AdvertiseAddr where
// that is a loopback address and DataListen's host takes any address.
func (c *Config) listenHost() string {
	host, _, err := net.SplitHostPort(c.DataListen)
	if err != nil {
		host = ""
	}
	if anyAddr := host == "" || net.ParseIP(host).IsUnspecified(); anyAddr && net.ParseIP(c.AdvertiseAddr).IsLoopback() {
		return c.AdvertiseAddr
	}
	return host
}

// dataListen is DataListen at listenHost.
func (c *Config) dataListen() string {
	_, port, err := net.SplitHostPort(c.DataListen)
	if err != nil {
		return c.DataListen // New's listen reports it
	}
	return net.JoinHostPort(c.listenHost(), port)
}

// shmOptions are the shared-memory settings of this rank's connections
// to hubs, and of its colocated hub's. They do not spin: their readers
// are background goroutines, and a spinning goroutine keeps Go's
// scheduler from polling the network, which the peer's wake-ups and the
// rest of the process need.
func (c *Config) shmOptions() shm.Options {
	return shm.Options{Enabled: c.Shm, HostKey: c.hostKey()}
}
