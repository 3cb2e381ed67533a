package transport

import (
	"testing"
	"time"
)

func TestScaledConfirm(t *testing.T) {
	for _, c := range []struct {
		runnable, cpus int
		want           time.Duration
	}{
		{0, 2, time.Second},
		{2, 2, time.Second},
		{4, 2, time.Second},
		{6, 2, 1500 * time.Millisecond},
		{16, 2, 4 * time.Second},
		{256, 2, 64 * time.Second},
		{1024, 2, MaxConfirmScale * time.Second},
		{5, 0, time.Second},
	} {
		if got := scaledConfirm(time.Second, c.runnable, c.cpus); got != c.want {
			t.Errorf("scaledConfirm(1s, %d, %d) = %v, want %v", c.runnable, c.cpus, got, c.want)
		}
	}
}
