// Package cpu tells the transports' waits whether spinning pays: whether
// the host is too busy for a waiting receive to hold a core
// (TooBusyToSpin), and how to give the core away between polls (Yield).
package cpu

import (
	"runtime"
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

// loadCache holds whether the host was too busy to spin when last looked
// at, and when that was (unix nanoseconds).
var loadCache struct {
	at   atomic.Int64
	busy atomic.Bool
}

// loadRefresh is how long a look at the host's load holds.
const loadRefresh = 50 * time.Millisecond

// TooBusyToSpin reports whether the host has more than
// spinOverloadPerCPU runnable tasks per CPU, as of at most loadRefresh
// ago (false where the count cannot be read).
func TooBusyToSpin() bool {
	now := time.Now().UnixNano()
	at := loadCache.at.Load()
	if now-at < int64(loadRefresh) {
		return loadCache.busy.Load()
	}
	if !loadCache.at.CompareAndSwap(at, now) {
		return loadCache.busy.Load() // another goroutine is looking
	}
	runnable, ok := Runnable()
	busy := ok && busyToSpin(runnable, runtime.NumCPU())
	loadCache.busy.Store(busy)
	return busy
}

// busyToSpin is the rule: more than spinOverloadPerCPU runnable tasks per
// CPU.
func busyToSpin(runnable, cpus int) bool { return runnable > spinOverloadPerCPU*max(cpus, 1) }
