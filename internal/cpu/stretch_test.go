package cpu

import (
	"testing"
	"time"
)

func TestStretch(t *testing.T) {
	const base = 10 * time.Second
	for _, c := range []struct {
		runnable, cpus int
		most           float64
		want           time.Duration
	}{
		{0, 0, 4, base},                     // unknown
		{100, 0, 4, base},                   // unknown CPUs
		{4, 2, 4, base},                     // at the threshold
		{5, 2, 4, 12500 * time.Millisecond}, // just past it
		{8, 2, 4, 2 * base},
		{16, 2, 4, 4 * base},
		{1000, 2, 4, 4 * base}, // capped
		{1000, 2, 120, 120 * base},
		{1000, 2, 0.5, base}, // a cap below 1 does not shorten
		{3, 1, 4, 1500 * time.Millisecond * 10},
	} {
		if got := Stretch(base, c.runnable, c.cpus, c.most); got != c.want {
			t.Errorf("Stretch(%v, %d runnable, %d CPUs, most %v) = %v, want %v", base, c.runnable, c.cpus, c.most, got, c.want)
		}
	}
}
