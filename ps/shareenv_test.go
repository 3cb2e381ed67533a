package ps

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/assign"
	"github.com/gorun/gorun/internal/jobenv"
)

// sameShare compares two configurations field by field (an empty list and
// none are the same).
func sameShare(a, b ShareConfig) bool {
	return a.Rule == b.Rule && a.Deadline == b.Deadline && a.Miss == b.Miss && a.Weights == b.Weights &&
		slices.Equal(a.Overhead, b.Overhead) && slices.Equal(a.Cap, b.Cap) && slices.Equal(a.Price, b.Price)
}

// randomShare draws a configuration ParseShareConfig accepts: either rule,
// and for the optimal one any subset of the options, lists of n workers
// (n from 1 to 9), values from 0 (dropped by String, read back as 0) to
// odd ones (fractions of a nanosecond-exact duration, tiny and huge
// floats).
func randomShare(rng *rand.Rand) ShareConfig {
	if rng.IntN(5) == 0 {
		return ShareConfig{}
	}
	c := ShareConfig{Rule: ShareOptimal}
	n := 1 + rng.IntN(9)
	f := func() float64 {
		switch rng.IntN(4) {
		case 0:
			return 0
		case 1:
			return float64(rng.IntN(10))
		case 2:
			return rng.Float64() * math.Pow(10, float64(rng.IntN(24)-12))
		}
		return rng.Float64()
	}
	d := func() time.Duration {
		switch rng.IntN(3) {
		case 0:
			return 0
		case 1:
			return time.Duration(rng.IntN(100)) * time.Millisecond
		}
		return time.Duration(rng.Int64N(int64(100 * time.Hour)))
	}
	if rng.IntN(2) == 0 {
		c.Deadline = d()
		if c.Deadline != 0 && rng.IntN(2) == 0 {
			c.Miss = MissFail
		}
	}
	if rng.IntN(2) == 0 {
		c.Weights.Time = f()
	}
	if rng.IntN(2) == 0 {
		c.Weights.Resource = f()
	}
	if rng.IntN(2) == 0 {
		c.Price = make([]float64, n)
		for i := range c.Price {
			c.Price[i] = f()
		}
	}
	if rng.IntN(2) == 0 {
		c.Cap = make([]int, n)
		for i := range c.Cap {
			c.Cap[i] = []int{0, 1, rng.IntN(1000), assign.MaxSamples}[rng.IntN(4)]
		}
	}
	if rng.IntN(2) == 0 {
		c.Overhead = make([]time.Duration, n)
		for i := range c.Overhead {
			c.Overhead[i] = d()
		}
	}
	return c
}

// TestShareConfigRoundTrip: String's text reads back as the same
// configuration, and reading it again writes the same text, for random
// configurations of both rules.
func TestShareConfigRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		c := randomShare(rng)
		s := c.String()
		got, err := ParseShareConfig(s)
		if err != nil {
			t.Fatalf("%+v: String %q does not read back: %v", c, s, err)
		}
		if !sameShare(got, c) {
			t.Fatalf("%q read back as %+v, want %+v", s, got, c)
		}
		if s2 := got.String(); s2 != s {
			t.Fatalf("%q read back and written again is %q", s, s2)
		}
		// Every configuration the text gives is one a hub of that many
		// workers takes.
		n := max(1, len(c.Price), len(c.Cap), len(c.Overhead))
		if err := got.Validate(n); err != nil {
			t.Fatalf("%q: a hub of %d workers refuses it: %v", s, n, err)
		}
	}
}

// TestParseShareConfig reads the documented example and a few spellings,
// field by field.
func TestParseShareConfig(t *testing.T) {
	for _, c := range []struct {
		in   string
		want ShareConfig
	}{
		{"proportional", ShareConfig{}},
		{"optimal", ShareConfig{Rule: ShareOptimal}},
		{" optimal : deadline = 2s ", ShareConfig{Rule: ShareOptimal, Deadline: 2 * time.Second}},
		{"optimal:deadline=1.5s,time=1,resource=0.2,price=1/1/0.5/0.5,cap=0/0/64/64,overhead=0s/0s/20ms/20ms", ShareConfig{
			Rule: ShareOptimal, Deadline: 1500 * time.Millisecond, Weights: assign.Weights{Time: 1, Resource: 0.2},
			Price: []float64{1, 1, 0.5, 0.5}, Cap: []int{0, 0, 64, 64}, Overhead: []time.Duration{0, 0, 20 * time.Millisecond, 20 * time.Millisecond}}},
		{"optimal:overhead=1ms,cap=7", ShareConfig{Rule: ShareOptimal, Overhead: []time.Duration{time.Millisecond}, Cap: []int{7}}},
		{"optimal:deadline=20ms,miss=fail", ShareConfig{Rule: ShareOptimal, Deadline: 20 * time.Millisecond, Miss: MissFail}},
		{"optimal:miss=Relax,deadline=20ms", ShareConfig{Rule: ShareOptimal, Deadline: 20 * time.Millisecond}},
	} {
		got, err := ParseShareConfig(c.in)
		if err != nil || !sameShare(got, c.want) {
			t.Errorf("ParseShareConfig(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
}

// TestParseShareConfigErrors: every malformed spec is refused with an
// error that names the option (and the worker) at fault.
func TestParseShareConfigErrors(t *testing.T) {
	long := "optimal:cap=" + strings.Repeat("1/", assign.DefaultConfig().MaxWorkers) + "1"
	for _, c := range []struct{ in, want string }{
		{"", "no rule"},
		{"fastest", `unknown rule "fastest"`},
		{"proportional:cap=1/2", "the proportional rule takes no options"},
		{"optimal:", `option "": want key=value`},
		{"optimal:deadline", `option "deadline": want key=value`},
		{"optimal:=3", `option "=3": want key=value`},
		{"optimal:speed=3", `unknown option "speed"`},
		{"optimal:deadline=1s,deadline=2s", "deadline given twice"},
		{"optimal:deadline=1s,miss=retry", "miss=retry: want relax or fail"},
		{"optimal:miss=fail", "miss=fail without a deadline"},
		{"optimal:deadline=soon", `deadline: "soon" is not a duration`},
		{"optimal:deadline=-1s", "deadline: -1s is negative"},
		{"optimal:time=-1", "time: -1 is not in [0, 1e+12]"},
		{"optimal:time=NaN", "time: NaN is not in"},
		{"optimal:resource=Inf", "resource: +Inf is not in"},
		{"optimal:resource=2e12", "resource: 2e+12 is not in"},
		{"optimal:time=x", `time: "x" is not a number`},
		{"optimal:accuracy=1", "accuracy: an LB-BSP batch is fixed"},
		{"optimal:price=1/x/2", `price of worker 1: "x" is not a number`},
		{"optimal:price=1/-2", "price of worker 1: -2 is not in"},
		{"optimal:cap=1/2/3.5", `cap of worker 2: "3.5" is not a whole number`},
		{"optimal:cap=-1", "cap of worker 0: -1 samples is not in"},
		{"optimal:cap=" + strconv.Itoa(assign.MaxSamples+1), "cap of worker 0: 1073741825 samples is not in"},
		{"optimal:overhead=1ms/2", `overhead of worker 1: "2" is not a duration`},
		{"optimal:overhead=-1ms", "overhead of worker 0: -1ms is negative"},
		{"optimal:price=1/2/3,cap=1/2", "cap has 2 entries and price 3"},
		{"optimal:overhead=1s,price=1/2", "price has 2 entries and overhead 1"},
		{"optimal:cap=", `cap of worker 0: "" is not a whole number`},
		{long, "cap: 129 entries; the optimal rule solves for at most 128 workers"},
		{strings.Repeat("x", maxShareSpec+1), "longer than"},
	} {
		got, err := ParseShareConfig(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseShareConfig(%.60q) = %+v, %v; want an error with %q", c.in, got, err, c.want)
		}
	}
}

// TestShareConfigValidate: the lists' length is checked against the job
// only by Validate (as NewHub does).
func TestShareConfigValidate(t *testing.T) {
	c, err := ParseShareConfig("optimal:cap=0/0/64/64")
	if err != nil {
		t.Fatal(err)
	}
	for workers := 1; workers <= 6; workers++ {
		err := c.Validate(workers)
		if (err == nil) != (workers == 4) || err != nil && !strings.Contains(err.Error(), "Share.Cap has 4 entries, want one per worker") {
			t.Errorf("%d workers: %v", workers, err)
		}
	}
}

// TestHubConfigShareFromEnv: a dedicated hub reads GORUN_HUB_SHARE; a bad
// one fails its start, naming the variable and the option.
func TestHubConfigShareFromEnv(t *testing.T) {
	env := map[string]string{jobenv.JobIDVar: "job", jobenv.SecretVar: "0123456789abcdef0123", jobenv.SizeVar: "3",
		jobenv.HubIndexVar: "0", jobenv.HubPortVar: "0"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	if cfg, err := HubConfigFromEnv(lookup); err != nil || !sameShare(cfg.Share, ShareConfig{}) {
		t.Fatalf("no %s: %+v, %v", jobenv.HubShareVar, cfg.Share, err)
	}
	env[jobenv.HubShareVar] = "optimal:cap=10/10/10,deadline=1s"
	want := ShareConfig{Rule: ShareOptimal, Cap: []int{10, 10, 10}, Deadline: time.Second}
	if cfg, err := HubConfigFromEnv(lookup); err != nil || !sameShare(cfg.Share, want) {
		t.Fatalf("%s: %+v, %v", env[jobenv.HubShareVar], cfg.Share, err)
	}
	for spec, msg := range map[string]string{
		"optimal:cap=10/10":   "Share.Cap has 2 entries, want one per worker (3)",
		"optimal:cap=10/x/10": "GORUN_HUB_SHARE: ps: hub share rule \"optimal:cap=10/x/10\": cap of worker 1",
	} {
		env[jobenv.HubShareVar] = spec
		if _, err := HubConfigFromEnv(lookup); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%s: %v; want %q", spec, err, msg)
		}
	}
}

// FuzzParseShareConfig: whatever the text, ParseShareConfig returns an
// error or a configuration whose String reads back as itself (and writes
// the same text again), and which a hub of its lists' length takes.
func FuzzParseShareConfig(f *testing.F) {
	for _, s := range []string{
		"proportional", "optimal", "optimal:deadline=1.5s,time=1,resource=0.2,price=1/1/0.5/0.5,cap=0/0/64/64,overhead=0s/0s/20ms/20ms",
		"optimal:cap=1", "optimal:price=1e-300/0x1p-3", "optimal:overhead=1.000000001s/2562047h47m16.854775807s", "optimal:deadline=,",
		"optimal:time=+1,resource=00", "proportional:", ":", "optimal:cap=+5/ 6", "optimal:accuracy=0",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseShareConfig(s)
		if err != nil {
			return
		}
		text := c.String()
		back, err := ParseShareConfig(text)
		if err != nil || !sameShare(back, c) {
			t.Fatalf("%q read as %+v, written %q, read back as %+v, %v", s, c, text, back, err)
		}
		if again := back.String(); again != text {
			t.Fatalf("%q written %q, then %q", s, text, again)
		}
		if err := c.Validate(max(1, len(c.Price), len(c.Cap), len(c.Overhead))); err != nil {
			t.Fatalf("%q: %v", s, err)
		}
	})
}
