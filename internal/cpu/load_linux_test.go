package cpu

import "testing"

func TestParseLoadavg(t *testing.T) {
	for s, want := range map[string]struct {
		run int
		avg float64
	}{"0.50 0.40 0.30 3/612 4242\n": {3, 0.5}, "1 1 1 129/700 1": {129, 1}, "12.25 3 1 2/90 7": {2, 12.25}} {
		if n, avg, ok := parseLoadavg(s); !ok || n != want.run || avg != want.avg {
			t.Errorf("parseLoadavg(%q) = %d %v %v, want %v", s, n, avg, ok, want)
		}
	}
	for _, s := range []string{"", "0.5 0.4 0.3", "0.5 0.4 0.3 x/1 2", "0.5 0.4 0.3 12 2", "x 0.4 0.3 1/2 3", "-1 0 0 1/2 3", "NaN 0 0 1/2 3"} {
		if _, _, ok := parseLoadavg(s); ok {
			t.Errorf("parseLoadavg(%q) accepted", s)
		}
	}
	if _, ok := Runnable(); !ok {
		t.Error("no running count in /proc/loadavg")
	}
	if n, ok := Lately(); !ok || n < 0 {
		t.Errorf("Lately() = %d %v", n, ok)
	}
}
