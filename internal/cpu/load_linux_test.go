package cpu

import "testing"

func TestParseLoadavg(t *testing.T) {
	for s, want := range map[string]int{"0.50 0.40 0.30 3/612 4242\n": 3, "1 1 1 129/700 1": 129} {
		if got, ok := parseLoadavg(s); !ok || got != want {
			t.Errorf("parseLoadavg(%q) = %d %v, want %d", s, got, ok, want)
		}
	}
	for _, s := range []string{"", "0.5 0.4 0.3", "0.5 0.4 0.3 x/1 2", "0.5 0.4 0.3 12 2"} {
		if _, ok := parseLoadavg(s); ok {
			t.Errorf("parseLoadavg(%q) accepted", s)
		}
	}
	if _, ok := Runnable(); !ok {
		t.Error("no running count in /proc/loadavg")
	}
}
