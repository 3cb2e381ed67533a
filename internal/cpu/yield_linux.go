package cpu

import (
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Yield gives this thread's core to another runnable thread, if any.
//
// It is a raw system call on purpose: through syscall.Syscall the runtime
// would mark the goroutine as in a system call, and when the yield lasts
// (with more ranks than cores it lasts a whole turn of the others) its
// monitor hands the P to another thread, wakes that thread, and takes the
// P back after: measured as a fifth of the CPU of 16 ranks on 2 cores.
// A yield never blocks, so the P can stay.
func Yield() { _, _, _ = syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }

// Current is the CPU this thread runs on (as of the call: the scheduler
// may move it at any time after), and false where that cannot be read.
func Current() (int, bool) {
	var c uint32
	if _, _, e := syscall.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&c)), 0, 0); e != 0 {
		return 0, false
	}
	return int(c), true
}

// MoveOff moves this thread off CPU c, where its affinity allows another
// CPU, and says whether it did: it narrows the thread's affinity to the
// others, which moves it at once, and sets it back, which leaves it where
// it went. A thread bound to c alone stays.
func MoveOff(c int) bool {
	// Both calls must name one thread: the goroutine stays on it between
	// them (a nested lock for a caller locked already).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var set, off unix.CPUSet
	if unix.SchedGetaffinity(0, &set) != nil {
		return false
	}
	off = set
	off.Clear(c)
	if off.Count() == 0 || unix.SchedSetaffinity(0, &off) != nil {
		return false
	}
	_ = unix.SchedSetaffinity(0, &set)
	return true
}
