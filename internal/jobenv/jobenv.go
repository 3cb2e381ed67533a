// Package jobenv is the one description of the environment gorun gives a
// job's processes: the launcher writes it (Job, Peers, Rank, Hub), and
// ranks and hubs read it back with a Reader (collective.ConfigFromEnv,
// ps.HubConfigFromEnv). Every GORUN_* name a rank or hub reads is spelled
// here; the variables of the launcher's own modes are spelled beside them
// (a per-node start's in cmd/gorun, an srun step's in launcher/srun.go,
// Open MPI's PMI clique in launcher/agent), and the Python package's own
// (GORUN_LIBRARY, GORUN_TORCH_*, GORUN_HVD_*) in python/gorun.
package jobenv

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The variables gorun sets, and the ones users may set to tune a rank.
const (
	RankVar       = "GORUN_RANK"
	SizeVar       = "GORUN_SIZE"
	LocalRankVar  = "GORUN_LOCAL_RANK"
	LocalSizeVar  = "GORUN_LOCAL_SIZE"
	NodeRankVar   = "GORUN_NODE_RANK"
	JobIDVar      = "GORUN_JOB_ID"
	SecretVar     = "GORUN_JOB_SECRET"
	PeersVar      = "GORUN_PEERS"       // every rank's gossip address, in rank order
	AddrVar       = "GORUN_ADDR"        // the address other ranks reach this one at
	GossipPortVar = "GORUN_GOSSIP_PORT" // where this rank's gossip listens
	StrategyVar   = "GORUN_STRATEGY"    // ring or hub
	HubsVar       = "GORUN_HUBS"        // dedicated hubs' addresses (gorun --hubs K)
	HubElasticVar = "GORUN_HUB_ELASTIC" // 1: hubs go on without a lost rank
	HubIndexVar   = "GORUN_HUB_INDEX"   // a dedicated hub's number
	HubPortVar    = "GORUN_HUB_PORT"    // where a dedicated hub listens
	HubStatsVar   = "GORUN_HUB_STATS"   // 1: dedicated hubs report their traffic (gorun -v)
	HubShareVar   = "GORUN_HUB_SHARE"   // how hub 0 splits an LB-BSP batch (gorun --hub-share; ps.ParseShareConfig)
	ElasticVar    = "GORUN_ELASTIC"     // 1: the ring goes on without a lost rank (gorun --elastic)
	ControlFDVar  = "GORUN_CONTROL_FD"  // an elastic rank's line channel to its agent: views down, suspects up
	// RestartCountVar is k on the k-th restart of a rank (gorun
	// --max-restarts); unset (0) on a rank's first start.
	RestartCountVar = "GORUN_RESTART_COUNT"
	// Set by users (exported or with -x).
	ColocatedHubsVar = "GORUN_COLOCATED_HUBS"
	SpinVar          = "GORUN_SPIN"
	AlgorithmVar     = "GORUN_ALGORITHM"     // auto, ring, direct, doubling, halving or hierarchical
	WireVar          = "GORUN_WIRE"          // full, fp16 or bf16: float32 all-reduces' wire format (gorun --wire)
	ExactVar         = "GORUN_EXACT"         // 1: float sums whose bits do not depend on the algorithm (gorun --exact)
	ShmVar           = "GORUN_SHM"           // 0: no shared memory between ranks on one host
	StatusFileVar    = "GORUN_STATUS_FILE"   // the rank's status page (internal/inspect)
	TimelineFileVar  = "GORUN_TIMELINE_FILE" // where the rank writes its timeline at Close (gorun --timeline)
	TimingVar        = "GORUN_TIMING"        // 1: the rank times its collectives on its status page (gorun --metrics)
)

// Job is what every process of a job is told.
type Job struct {
	ID         string
	Secret     []byte
	Size       int
	Strategy   string // "" leaves GORUN_STRATEGY unset
	HubElastic bool
	Elastic    bool // GORUN_ELASTIC=1 (gorun --elastic with the ring strategy)
	HubStats   bool
}

// Env is the job-wide part of the environment, with the Open MPI and
// torchrun spellings of the size.
func (j Job) Env() []string {
	env := []string{
		JobIDVar + "=" + j.ID, SecretVar + "=" + string(j.Secret),
		kv(SizeVar, j.Size), kv("WORLD_SIZE", j.Size), kv("OMPI_COMM_WORLD_SIZE", j.Size),
	}
	if j.Strategy != "" {
		env = append(env, StrategyVar+"="+j.Strategy)
	}
	if j.HubElastic {
		env = append(env, HubElasticVar+"=1")
	}
	if j.Elastic {
		env = append(env, ElasticVar+"=1")
	}
	if j.HubStats {
		env = append(env, HubStatsVar+"=1")
	}
	return env
}

// Peers is the part known once every host has reserved its ports: every
// rank's gossip address, the dedicated hubs' addresses, and torchrun's
// rendezvous on rank 0's host.
func Peers(peers, hubs []string, masterAddr string, masterPort int) []string {
	env := []string{PeersVar + "=" + strings.Join(peers, ","), "MASTER_ADDR=" + masterAddr, kv("MASTER_PORT", masterPort)}
	if len(hubs) > 0 {
		env = append(env, HubsVar+"="+strings.Join(hubs, ","))
	}
	return env
}

// Rank is one rank's own part.
type Rank struct {
	Rank, LocalRank, LocalSize, NodeRank int
	Addr                                 string
	GossipPort                           int
}

// Env is the rank's environment under gorun's, torchrun's and Open MPI's
// names.
func (r Rank) Env() []string {
	return []string{
		kv(RankVar, r.Rank), kv(LocalRankVar, r.LocalRank), kv(LocalSizeVar, r.LocalSize), kv(NodeRankVar, r.NodeRank),
		kv("RANK", r.Rank), kv("LOCAL_RANK", r.LocalRank), kv("LOCAL_WORLD_SIZE", r.LocalSize), kv("GROUP_RANK", r.NodeRank),
		kv("OMPI_COMM_WORLD_RANK", r.Rank), kv("OMPI_COMM_WORLD_LOCAL_RANK", r.LocalRank),
		// Open MPI's node rank is the rank's place on its node (what
		// torchrun calls the local rank), not the node's number.
		kv("OMPI_COMM_WORLD_LOCAL_SIZE", r.LocalSize), kv("OMPI_COMM_WORLD_NODE_RANK", r.LocalRank),
		AddrVar + "=" + r.Addr, kv(GossipPortVar, r.GossipPort),
	}
}

// Hub is a dedicated hub process's own part; node is its host's number,
// as ranks get it, so that it shares memory with the ranks of its host.
func Hub(index, port, node int) []string {
	return []string{kv(HubIndexVar, index), kv(HubPortVar, port), kv(NodeRankVar, node)}
}

// NodeName is the name of host number node of a job, from which ranks
// and hubs find who shares their host: processes with the same name (and
// the same kernel boot) share memory.
func NodeName(node string) string { return "node-" + node }

// HostKey is what a job's processes compare to find who is on their host:
// the host's name within the job ("" for none: the hostname decides).
func HostKey(jobID, name string) string {
	if name == "" {
		return ""
	}
	return jobID + "/" + name
}

func kv(k string, v int) string { return k + "=" + strconv.Itoa(v) }

// Reader reads variables through a lookup function (os.LookupEnv in a real
// process) and collects what is missing or malformed, so that one error
// names every problem.
type Reader struct {
	lookup  func(string) (string, bool)
	missing []string
	bad     []error
}

// NewReader reads through lookup.
func NewReader(lookup func(string) (string, bool)) *Reader { return &Reader{lookup: lookup} }

// Lookup returns a variable's value and whether it is set and not empty.
func (r *Reader) Lookup(name string) (string, bool) {
	v, ok := r.lookup(name)
	return v, ok && v != ""
}

// String returns a required variable, recording it as missing if unset.
func (r *Reader) String(name string) string {
	v, ok := r.Lookup(name)
	if !ok {
		r.missing = append(r.missing, name)
	}
	return v
}

// Int returns a required integer variable.
func (r *Reader) Int(name string) int {
	v, ok := r.Lookup(name)
	if !ok {
		r.missing = append(r.missing, name)
		return 0
	}
	return r.parseInt(name, v)
}

// OptionalInt returns an integer variable, or def if it is unset.
func (r *Reader) OptionalInt(name string, def int) int {
	v, ok := r.Lookup(name)
	if !ok {
		return def
	}
	return r.parseInt(name, v)
}

func (r *Reader) parseInt(name, v string) int {
	n, err := strconv.Atoi(v)
	if err != nil {
		r.bad = append(r.bad, fmt.Errorf("%s=%q: not an integer", name, v))
	}
	return n
}

// List returns a comma-separated variable's items (nil if unset).
func (r *Reader) List(name string) []string {
	v, ok := r.Lookup(name)
	if !ok {
		return nil
	}
	return strings.Split(v, ",")
}

// Switch returns a variable set to 1/true or 0/false, or def if unset.
func (r *Reader) Switch(name string, def bool) bool {
	v, ok := r.Lookup(name)
	switch {
	case !ok:
		return def
	case v == "1" || v == "true":
		return true
	case v == "0" || v == "false":
		return false
	}
	r.bad = append(r.bad, fmt.Errorf("%s=%q: want 0 or 1", name, v))
	return def
}

// Flag reports whether a variable is set to 1 or true.
func (r *Reader) Flag(name string) bool {
	v, _ := r.Lookup(name)
	return v == "1" || v == "true"
}

// Duration returns a duration variable (any Go duration), or def if unset.
func (r *Reader) Duration(name string, def time.Duration) time.Duration {
	v, ok := r.Lookup(name)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		r.bad = append(r.bad, fmt.Errorf("%s=%q: not a duration (e.g. 2ms)", name, v))
		return def
	}
	return d
}

// Err is nil if every required variable was set and every value parsed;
// otherwise it names them all. hint says how the process should have been
// started.
func (r *Reader) Err(hint string) error {
	var errs []error
	if len(r.missing) > 0 {
		errs = append(errs, fmt.Errorf("%s not set: %s", strings.Join(r.missing, ", "), hint))
	}
	return errors.Join(append(errs, r.bad...)...)
}

// The job's files in shared memory. Every file gorun makes there (the
// transport's segments, the ranks' status pages) is named ShmPrefix, the
// job's id made safe for a file name, "-" and a name of its own, so that
// one glob (ShmPattern) finds a job's files: the agents remove a job's
// leftovers with it when its ranks are gone.
const (
	ShmPrefix = "gorun-"
	ShmDir    = "/dev/shm" // unless a transport is configured otherwise
)

// ShmName is the name of the job's file called name ("" gives the prefix
// every one of the job's files starts with).
func ShmName(jobID, name string) string { return ShmPrefix + FileSafe(jobID) + "-" + name }

// ShmPattern is the glob of the job's files in dir.
func ShmPattern(dir, jobID string) string { return dir + "/" + ShmName(jobID, "*") }

// FileSafe maps s to letters, digits and '_'.
func FileSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' {
			return r
		}
		return '_'
	}, s)
}
