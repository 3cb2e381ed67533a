package transport

import (
	"runtime"
	"sync/atomic"
	"time"
)

// MaxConfirmScale caps how far an overloaded host stretches
// ConfirmTimeout (see TCP.confirmWindow).
const MaxConfirmScale = 120

// overloadPerCPU is the runnable tasks per CPU past which a host counts
// as overloaded: up to it, ranks get a core often enough to answer. (It
// was 4: at 10 runnable tasks on 2 cores, under the race detector, a rank
// answered no handshake for 2.5 s while alive.)
const overloadPerCPU = 2

// confirmWindow is how long a rank that gossip declared dead gets to
// answer: ConfirmTimeout, stretched by how overloaded this host is right
// now (runnable tasks per CPU over overloadPerCPU, from 1 to
// MaxConfirmScale). On an
// overloaded host every process, the suspect included, waits its turn
// for a core: 256 ranks on 2 cores missed gossip's probes and a 1 s
// confirmation while alive. A stopped or cut-off rank never answers, so a
// longer window only delays naming it; a killed one is named by its
// connection's end, not here.
func (t *TCP) confirmWindow() time.Duration {
	runnable, ok := runnableTasks()
	if !ok {
		return t.cfg.ConfirmTimeout
	}
	return scaledConfirm(t.cfg.ConfirmTimeout, runnable, runtime.NumCPU())
}

// scaledConfirm is base × runnable/(overloadPerCPU × cpus), the factor
// clamped to [1, MaxConfirmScale].
func scaledConfirm(base time.Duration, runnable, cpus int) time.Duration {
	if cpus < 1 || runnable <= overloadPerCPU*cpus {
		return base
	}
	scale := min(float64(runnable)/float64(overloadPerCPU*cpus), MaxConfirmScale)
	return time.Duration(float64(base) * scale)
}

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

// loadCache holds whether the host was too busy to spin when last looked
// at, and when that was (unix nanoseconds).
var loadCache struct {
	at   atomic.Int64
	busy atomic.Bool
}

// loadRefresh is how long a look at the host's load holds.
const loadRefresh = 50 * time.Millisecond

// tooBusyToSpin reports whether the host has more than
// spinOverloadPerCPU runnable tasks per CPU, as of at most loadRefresh
// ago (false where the count cannot be read).
func tooBusyToSpin() bool {
	now := time.Now().UnixNano()
	at := loadCache.at.Load()
	if now-at < int64(loadRefresh) {
		return loadCache.busy.Load()
	}
	if !loadCache.at.CompareAndSwap(at, now) {
		return loadCache.busy.Load() // another goroutine is looking
	}
	runnable, ok := runnableTasks()
	busy := ok && busyToSpin(runnable, runtime.NumCPU())
	loadCache.busy.Store(busy)
	return busy
}

// busyToSpin is the rule: more than spinOverloadPerCPU runnable tasks per
// CPU.
func busyToSpin(runnable, cpus int) bool { return runnable > spinOverloadPerCPU*max(cpus, 1) }
