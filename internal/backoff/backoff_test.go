package backoff

import (
	"testing"
	"time"
)

func TestRetryPause(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		attempt   int
		step, max time.Duration
		want      time.Duration
	}{
		{0, 20 * ms, 500 * ms, 20 * ms},
		{1, 20 * ms, 500 * ms, 40 * ms},
		{23, 20 * ms, 500 * ms, 480 * ms},
		{24, 20 * ms, 500 * ms, 500 * ms},
		{1 << 30, 20 * ms, 500 * ms, 500 * ms}, // no overflow
		{0, 30 * ms, 20 * ms, 20 * ms},
		{3, 0, 20 * ms, 20 * ms},
	} {
		if got := Pause(c.attempt, c.step, c.max); got != c.want {
			t.Errorf("Pause(%d, %v, %v) = %v, want %v", c.attempt, c.step, c.max, got, c.want)
		}
	}
}
