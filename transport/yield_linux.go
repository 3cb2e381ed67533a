package transport

import "syscall"

// osYield gives this thread's core to another runnable thread, if any.
func osYield() { _, _, _ = syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
