// Package cpu tells the transports' waits how to spend a wait on this
// host (Now: poll keeping the core, or park at once), from how many tasks
// are runnable against its CPUs, and how to give the core away (Yield,
// for ranks that outnumber their host's cores). The rules (ModeFor, and
// a Gauge for ranks that outnumber the cores) are pure functions of the
// counts; Now reads the count at most every loadRefresh. Contended says
// whether the host has had other work than a job's ranks (the shared-memory
// rings then give a sender the whole ring), Lately how busy the host has
// been, and a StallMeter how long this process itself was kept from
// running. WithLockedThread marks a call whose goroutine is
// locked to its OS thread (a call from C), whose waits hand the thread
// away seldom: each hand-off there is a switch of OS threads.
package cpu

import (
	"math"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// spinOverloadPerCPU is the runnable tasks per CPU past which a waiting
// receive does not spin at all and parks at once: each spinner holds a
// core, or with SpinYield a stream of yields, that the ranks with work
// need. Up to it spinning pays (16 ranks on 2 cores: a 4 KiB all-reduce
// in 135-145 us either way, 900 us parked; at 8 per CPU it parked too
// often there and took 330-430 us); past it, it does not (64 ranks on 2
// cores as 16 test hosts of 4, each thinking itself oversubscribed only
// 2 to 1: a whole small job took 18-30 s spinning, 3.6-3.9 s parked,
// with 62 % of the CPU in the kernel while it spun).
const spinOverloadPerCPU = 16

// Mode is how a waiting receive spends the spinning part of its wait.
type Mode uint8

const (
	// Spin: poll, keeping the core, for the wait's spin time (giving it
	// away between polls only where the job's own ranks outnumber the
	// cores: the caller's choice, Config.SpinYield).
	Spin Mode = iota
	// Park: do not poll at all; sleep until woken (past
	// spinOverloadPerCPU, every poll takes a core that work needs; and,
	// for ranks that outnumber the cores, beside other work: Gauge).
	Park
)

func (m Mode) String() string {
	switch m {
	case Spin:
		return "spin"
	case Park:
		return "park"
	}
	return "mode(" + strconv.Itoa(int(m)) + ")"
}

// ModeFor is the rule, from the host's runnable tasks (running or
// waiting for a CPU, the reader of the count among them) and its CPUs:
// Park past spinOverloadPerCPU per CPU, else Spin.
//
// For ranks with a core each, other work beside them is no reason to
// give the core away between polls: the task that takes it is then most
// likely that work, for a whole time slice (Linux's EEVDF scheduler runs
// a task that yields again only after the others' slices), while the
// peer's data waits. Beside 2, 4 and 8 spinning processes on 2 cores, 2
// ranks' 4 KiB all-reduce took 0.7-4 ms a call when the wait yielded
// there, 1-240 us (mostly under 20) when it kept the core, against Open
// MPI's 1-52 us (2 ms once); results/busy says more. A wait that runs out
// of spin sleeps, and the scheduler runs a woken sleeper before the busy
// work it preempts.
func ModeFor(runnable, cpus int) Mode {
	if runnable > spinOverloadPerCPU*max(cpus, 1) {
		return Park
	}
	return Spin
}

// A Gauge tells ranks that outnumber their host's CPUs (and so give
// the core away between polls) whether the host has other work besides
// them, from its runnable count sample by sample; there they park at once
// instead. A yield then hands the core to that work for a whole time slice
// while the peer's data waits, and a parked rank leaves the cores to the
// ranks with work: 4 ranks on 2 cores beside 2 or 4 busy processes took
// 0.1-0.3 ms for a 4 KiB all-reduce parked against 3-7 ms yielding when
// those processes shared the job's session, and 14-32 ms against 25-95 ms
// for 16 MiB when they ran in sessions of their own; with nothing else on
// the host, parking cost 3.5 times the 4 KiB latency of yielding
// (results/busy).
//
// The count says how much other work there is only while the ranks spin:
// a parked rank is not runnable, and its threads' wake-ups make the count
// jump. So the gauge averages the samples taken while spinning, and parks
// for parkHold once the average exceeds the ranks by otherWork: on 2 CPUs
// that takes about two busy processes (one reads about the threshold).
// When the hold ends the ranks spin again, and the sample after the
// first look (the others are still waking then) decides alone: the
// average starts again at the threshold, so a count above it parks them
// again at once, one below lets them spin. The zero Gauge is ready.
type Gauge struct {
	avg       float64   // smoothed runnable count, from samples taken spinning
	parkUntil time.Time // parked for other work until then
	settling  bool      // the hold just ended: the next look is not a sample
}

const (
	// gaugeWeight is a new sample's weight in the average: with 50 ms
	// samples (loadRefresh) two busy processes are found in 250 ms, four
	// in 100 ms, while a single sample of 7 or 8 (the count jumps so at a
	// job's start, for 4 ranks) or a few of 5 or 6 is not enough. (At
	// twice the weight, the start's jump parked some of 4 ranks on an
	// otherwise idle host and not others, and their 4 KiB all-reduce took
	// 2.5 times as long.)
	gaugeWeight = 0.25
	// otherWork is how many runnable tasks beyond the ranks, on average,
	// are other work: 4 spinning ranks on an otherwise idle host read 3
	// or 4 (and at times 5-7), beside 1, 2 and 4 busy processes mostly 5,
	// 6 and 8.
	otherWork = 1.5
	// parkHold is how long ranks park once they found other work before
	// they spin and look again (a look costs two samples' time spinning).
	parkHold = 2 * time.Second
)

// Observe takes a sample of the host's runnable tasks (the reader
// among them) at now, with its CPUs and the job's ranks on it (0 where
// unknown), and says how a wait spends its spin: ModeFor's rule, and for
// ranks that outnumber the CPUs the gauge's.
func (g *Gauge) Observe(now time.Time, runnable, cpus, ranks int) Mode {
	if ModeFor(runnable, cpus) == Park {
		return Park
	}
	if ranks <= max(cpus, 1) {
		return Spin // ranks that have a core each keep it
	}
	if now.Before(g.parkUntil) {
		return Park
	}
	if g.settling {
		g.settling = false
		g.avg = float64(ranks) + otherWork // the next sample decides
		return Spin
	}
	if g.avg == 0 {
		g.avg = float64(ranks) // no other work until seen
	}
	g.avg += gaugeWeight * (float64(runnable) - g.avg)
	if g.avg > float64(ranks)+otherWork {
		g.parkUntil, g.settling = now.Add(parkHold), true
		return Park
	}
	return Spin
}

// loadCache holds the mode of the host's load when last looked at, and
// when that was (nanoseconds on the monotonic clock since loadEpoch), the
// runnable count's average then (Contended), and the gauge and the Load
// that averages (under mu, held by the goroutine that looks). One gauge serves the process: its
// waits pass one count of ranks, their job's.
var loadCache struct {
	at    atomic.Int64
	mode  atomic.Uint32
	avg   atomic.Uint64 // the Load's average runnable count, float64 bits
	mu    sync.Mutex
	gauge Gauge
	load  Load
}

// loadEpoch is where loadCache's stamps count from.
var loadEpoch = time.Now()

// loadRefresh is how long a look at the host's load holds.
const loadRefresh = 50 * time.Millisecond

// Now is the mode of the host's load as of at most loadRefresh ago (Spin
// where the count cannot be read), for a wait of a job with ranks of its
// ranks on this host (0 where unknown; see Gauge).
func Now(ranks int) Mode {
	now := time.Now()
	stamp := int64(now.Sub(loadEpoch))
	at := loadCache.at.Load()
	if stamp-at < int64(loadRefresh) || !loadCache.mu.TryLock() {
		return Mode(loadCache.mode.Load()) // fresh, or another goroutine is looking
	}
	defer loadCache.mu.Unlock()
	if loadCache.at.Load() != at {
		return Mode(loadCache.mode.Load()) // looked at meanwhile
	}
	m := Spin
	if runnable, ok := Runnable(); ok {
		m = loadCache.gauge.Observe(now, runnable, runtime.NumCPU(), ranks)
		loadCache.avg.Store(math.Float64bits(loadCache.load.Observe(runnable)))
	}
	loadCache.mode.Store(uint32(m))
	loadCache.at.Store(stamp)
	return m
}

// Contended reports whether the host has had other work than a job's
// ranks (ranks of them on this host, 0 where unknown) lately: whether on
// average over its recent looks (Now) its runnable tasks exceeded both
// its CPUs and the ranks by otherWork (ContendedFor). Then a rank's peer
// is often not running, and a shared-memory ring's producer gives it the
// whole ring rather than keep to the part the caches hold
// (transport/internal/shmem). False where the count cannot be read.
func Contended(ranks int) bool {
	avg := math.Float64frombits(loadCache.avg.Load())
	return ContendedFor(avg, runtime.NumCPU(), ranks)
}

// ContendedFor is Contended's rule: avg runnable tasks (the reader among
// them) exceed max(cpus, ranks) by otherWork. Two ranks polling on 2
// CPUs read 2 or 3, beside two busy processes 4 to 6; four ranks on 2
// CPUs read 3 to 5, and more beside other work.
func ContendedFor(avg float64, cpus, ranks int) bool {
	return avg > float64(max(cpus, ranks, 1))+otherWork
}

// A Load is the average of the host's runnable count, sample by sample,
// each weighing loadWeight: with 50 ms looks two busy processes beside two
// ranks are found in about 200 ms, and their end as soon, while one stray
// sample of 7 (a job's start) is not enough. The zero Load is ready: its
// first sample sets the average.
type Load struct {
	avg  float64
	seen bool
}

// loadWeight is a new sample's weight in a Load's average.
const loadWeight = 0.125

// Observe adds a sample of the host's runnable tasks and returns the
// average.
func (l *Load) Observe(runnable int) float64 {
	if !l.seen {
		l.avg, l.seen = float64(runnable), true
	}
	l.avg += loadWeight * (float64(runnable) - l.avg)
	return l.avg
}

// Host is this host's load as a liveness window reads it: the tasks that
// want a CPU now or lately (Lately) and the CPUs there are; both zero
// where the load cannot be read.
func Host() (runnable, cpus int) {
	n, ok := Lately()
	if !ok {
		return 0, 0
	}
	return n, runtime.NumCPU()
}
