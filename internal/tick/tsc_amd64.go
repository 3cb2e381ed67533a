package tick

import (
	"os"
	"strings"
)

func rdtsc() uint64

// tscUsable: the CPU's time-stamp counter runs at a constant rate and does
// not stop (constant_tsc, nonstop_tsc), so that ticks map to time by one
// rate measured over the run.
func tscUsable() bool {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return false
	}
	s := string(b)
	if i := strings.Index(s, "\n\n"); i >= 0 {
		s = s[:i] // the first CPU's entry: the flags are the same on all
	}
	return strings.Contains(s, " constant_tsc") && strings.Contains(s, " nonstop_tsc")
}
