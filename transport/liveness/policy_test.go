package liveness

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestDefaultPolicy: ConfirmTimeout, stretched in proportion past 2
// runnable tasks per CPU, at most MaxStretch times; unstretched when the
// load is unknown; at least four times this rank's own last stall, at
// most MaxStretch times ConfirmTimeout; eight times after a short knock.
func TestDefaultPolicy(t *testing.T) {
	for _, c := range []struct {
		runnable, cpus int
		stall          time.Duration
		want           time.Duration
		shortKnock     bool
	}{
		{0, 2, 0, time.Second, false},
		{2, 2, 0, time.Second, false},
		{4, 2, 0, time.Second, false},
		{6, 2, 0, 1500 * time.Millisecond, false},
		{11, 2, 0, 2750 * time.Millisecond, false},
		{16, 2, 0, 4 * time.Second, false},
		{256, 2, 0, 64 * time.Second, false},
		{1024, 2, 0, MaxStretch * time.Second, false},
		{5, 0, 0, time.Second, false},
		{0, 0, 0, time.Second, false},
		{0, 2, 100 * time.Millisecond, time.Second, false},
		{0, 2, 250 * time.Millisecond, time.Second, false},
		{0, 2, 600 * time.Millisecond, 2400 * time.Millisecond, false},
		{16, 2, 600 * time.Millisecond, 4 * time.Second, false},
		{16, 2, 2 * time.Second, 8 * time.Second, false},
		{0, 0, time.Minute, MaxStretch * time.Second, false},
		{0, 2, 100 * time.Millisecond, time.Second, true},
		{0, 2, 200 * time.Millisecond, 1600 * time.Millisecond, true},
		{0, 2, 470 * time.Millisecond, 3760 * time.Millisecond, true},
		{16, 2, 470 * time.Millisecond, 4 * time.Second, true},
		{0, 0, 20 * time.Second, MaxStretch * time.Second, true},
	} {
		o := Observation{Base: time.Second, Load: Load{Runnable: c.runnable, CPUs: c.cpus}, Stall: c.stall, ShortKnock: c.shortKnock}
		if got := DefaultPolicy(o); got != c.want {
			t.Errorf("DefaultPolicy(1s, %d runnable, %d cpus, stall %v, short knock %v) = %v, want %v", c.runnable, c.cpus, c.stall, c.shortKnock, got, c.want)
		}
	}
}

// TestStallRules: the two rules on this rank's own stall, row by row. A
// window proves nothing when this rank stalled for a quarter of it or
// more (starved); a silent knock (half the window) proves nothing when it
// had less than four times the stall, unless the whole window was starved
// (knockTooShort), so a window of eight times the stall gives it enough.
func TestStallRules(t *testing.T) {
	for _, c := range []struct {
		stall, w          time.Duration
		starved, tooShort bool
	}{
		{0, time.Second, false, false},
		{100 * time.Millisecond, time.Second, false, false},
		{125 * time.Millisecond, time.Second, false, false},
		{126 * time.Millisecond, time.Second, false, true},
		{200 * time.Millisecond, time.Second, false, true},
		{249 * time.Millisecond, time.Second, false, true},
		{250 * time.Millisecond, time.Second, true, false},
		{time.Second, time.Second, true, false},
		{time.Millisecond, 0, true, false},
		{200 * time.Millisecond, 1600 * time.Millisecond, false, false},
		{470 * time.Millisecond, 2250 * time.Millisecond, false, true},
	} {
		if got := starved(c.stall, c.w); got != c.starved {
			t.Errorf("starved(%v, %v) = %v, want %v", c.stall, c.w, got, c.starved)
		}
		if got := knockTooShort(c.stall, c.w); got != c.tooShort {
			t.Errorf("knockTooShort(%v, %v) = %v, want %v", c.stall, c.w, got, c.tooShort)
		}
	}
}

// TestPolicySeesWhatWasObserved: the policy is asked for every window,
// with what the machine saw: the host's load, whether the check runs on a
// connection, its round, the time since it began, the frames of the
// window just over, the reader's inbox, and the last ping's round trip.
// Its answer is the window (and the one the loss names).
func TestPolicySeesWhatWasObserved(t *testing.T) {
	var seen []Observation
	cfg := DefaultConfig()
	cfg.Rank, cfg.Size = 0, 4
	cfg.Policy = func(o Observation) time.Duration {
		seen = append(seen, o)
		return o.Base * time.Duration(1+o.Round) // longer each round
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	load := Load{Runnable: 3, CPUs: 2}
	m.Step(at(0), HostLoad{load})
	m.Step(at(0), Connected{Peer: 1, Conn: 1})
	// A first check answered in 40 ms: the round trip.
	m.Step(at(0), Verdict{Peer: 1, Reason: "v"})
	m.Step(at(0), Progress{Peer: 1, Conn: 1})
	m.Step(at(40*time.Millisecond), Pong{Peer: 1, Conn: 1})
	// A second: frames in its first window, none in its second.
	m.Step(at(time.Second), Verdict{Peer: 1, Reason: "v"})
	m.Step(at(time.Second), Progress{Peer: 1, Conn: 1, Reads: 10})
	m.Step(at(2*time.Second), Tick{})
	m.Step(at(2*time.Second), Progress{Peer: 1, Conn: 1, Reads: 15, Stuck: true})
	m.Step(at(3*time.Second), ProbeDone{Peer: 1, Seq: 1}) // its process does not answer the knock either
	m.Step(at(4*time.Second), Tick{})
	acts := m.Step(at(4*time.Second), Progress{Peer: 1, Conn: 1, Reads: 15})
	want := []Observation{
		{Base: time.Second, Load: load, Connected: true},
		{Base: time.Second, Load: load, Connected: true, RTT: 40 * time.Millisecond},
		{Base: time.Second, Load: load, Connected: true, Round: 1, Elapsed: time.Second, Reads: 5, Stuck: true, RTT: 40 * time.Millisecond},
	}
	if !slices.Equal(seen, want) {
		t.Fatalf("the policy saw\n%+v\nwant\n%+v", seen, want)
	}
	if len(acts) != 1 || acts[0].String() != "lost 1 gen=0 fail-job: v, and no answer on its data connection for 2s, nor to a connection" {
		t.Fatalf("got %v, want the loss naming the second round's window", acts)
	}
	// Checks by connecting see Connected false; a doubted peer's dials,
	// the time since the first failure and the longest stall in any.
	seen = nil
	cfg.WatchAll = true
	m, _ = New(cfg)
	m.Step(at(0), Verdict{Peer: 2, Reason: "v"})
	cfg.WatchAll = false
	m2, _ := New(cfg)
	m2.Step(at(0), Verdict{Peer: 3, Reason: "v"})
	m2.Step(at(0), DialFailed{Peer: 3, Err: errors.New("refused")})
	m2.Step(at(300*time.Millisecond), DialFailed{Peer: 3, Err: errors.New("refused"), Stall: 200 * time.Millisecond})
	m2.Step(at(400*time.Millisecond), DialFailed{Peer: 3, Err: errors.New("refused")})
	want = []Observation{
		{Base: time.Second},
		{Base: time.Second},
		{Base: time.Second, Elapsed: 300 * time.Millisecond, Stall: 200 * time.Millisecond},
		{Base: time.Second, Elapsed: 400 * time.Millisecond, Stall: 200 * time.Millisecond}, // the longest so far
	}
	if !slices.Equal(seen, want) {
		t.Fatalf("the policy saw\n%+v\nwant\n%+v", seen, want)
	}
}

// TestConfigValidate: New refuses a configuration that makes no sense,
// naming the field.
func TestConfigValidate(t *testing.T) {
	for name, tweak := range map[string]func(*Config){
		"rank":           func(c *Config) { c.Rank = 4 },
		"size":           func(c *Config) { c.Size = 0 },
		"ConfirmTimeout": func(c *Config) { c.ConfirmTimeout = -1 },
		"ExplainWait":    func(c *Config) { c.ExplainWait = -1 },
		"ConnectTimeout": func(c *Config) { c.ConnectTimeout = 0 },
	} {
		cfg := DefaultConfig()
		cfg.Rank, cfg.Size = 0, 4
		tweak(&cfg)
		if _, err := New(cfg); err == nil || !containsFold(err.Error(), name) {
			t.Errorf("%s: got %v, want an error naming it", name, err)
		}
	}
	cfg := DefaultConfig()
	cfg.Rank, cfg.Size, cfg.Policy = 0, 1, nil
	if _, err := New(cfg); err != nil {
		t.Errorf("a job of one, DefaultPolicy by default: %v", err)
	}
}

func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}
