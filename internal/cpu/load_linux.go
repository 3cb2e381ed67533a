package cpu

import (
	"math"
	"os"
	"strconv"
	"strings"
)

// Runnable is the number of tasks running or waiting for a CPU now,
// host-wide: the fourth field of /proc/loadavg, "running/total".
func Runnable() (int, bool) {
	n, _, ok := readLoadavg()
	return n, ok
}

// Lately is the number of tasks that want a CPU now or have lately: the
// larger of the running count and the last minute's load average
// (rounded up). A count taken at one instant can catch a busy host at a
// lull (its ranks all asleep in a wait, say); the average cannot.
func Lately() (int, bool) {
	n, avg, ok := readLoadavg()
	return max(n, int(math.Ceil(avg))), ok
}

// readLoadavg reads /proc/loadavg (parseLoadavg).
func readLoadavg() (int, float64, bool) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, 0, false
	}
	return parseLoadavg(string(b))
}

// parseLoadavg reads the running count and the last minute's load
// average out of /proc/loadavg's text.
func parseLoadavg(s string) (int, float64, bool) {
	f := strings.Fields(s)
	if len(f) < 4 {
		return 0, 0, false
	}
	run, _, ok := strings.Cut(f[3], "/")
	if !ok {
		return 0, 0, false
	}
	n, err := strconv.Atoi(run)
	avg, aerr := strconv.ParseFloat(f[0], 64)
	if err != nil || n < 0 || aerr != nil || !(avg >= 0) || avg > 1e6 {
		return 0, 0, false
	}
	return n, avg, true
}
