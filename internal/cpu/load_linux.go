package cpu

import (
	"os"
	"strconv"
	"strings"
)

// Runnable is the number of tasks running or waiting for a CPU now,
// host-wide: the fourth field of /proc/loadavg, "running/total".
func Runnable() (int, bool) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, false
	}
	return parseLoadavg(string(b))
}

// parseLoadavg reads the running count out of /proc/loadavg's text.
func parseLoadavg(s string) (int, bool) {
	f := strings.Fields(s)
	if len(f) < 4 {
		return 0, false
	}
	run, _, ok := strings.Cut(f[3], "/")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(run)
	return n, err == nil && n >= 0
}
