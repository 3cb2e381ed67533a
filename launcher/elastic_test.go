package launcher

import (
	"strings"
	"testing"

	"github.com/gorun/gorun/internal/jobenv"
)

// TestElasticConfig: --elastic is the ring's sequencer unless the
// strategy is hub, where it is --hub-elastic; the ranks' environment and
// the hosts' spec say which; --min-np needs one of them and fits -np;
// --max-restarts needs the ring's --elastic and reaches the hosts' spec.
func TestElasticConfig(t *testing.T) {
	for _, tc := range []struct {
		strategy                      string
		elastic, hubFlag              bool
		want                          elasticity
		ringEnv, hubEnv, controlSpecs bool
	}{
		{"", false, false, notElastic, false, false, false},
		{"", true, false, ringElastic, true, false, true},
		{"ring", true, false, ringElastic, true, false, true},
		{"hub", true, false, hubElastic, false, true, false},
		{"hub", false, true, hubElastic, false, true, false},
		{"", false, true, hubElastic, false, true, false},
	} {
		cfg := DefaultConfig()
		cfg.Strategy, cfg.Elastic, cfg.HubElastic = tc.strategy, tc.elastic, tc.hubFlag
		env := strings.Join(jobEnv(cfg, "id", []byte("secret"), 4), " ")
		j := &job{cfg: cfg, np: 4}
		if got := cfg.elasticity(); got != tc.want ||
			strings.Contains(env, jobenv.ElasticVar+"=1") != tc.ringEnv || strings.Contains(env, jobenv.HubElasticVar+"=1") != tc.hubEnv ||
			j.baseSpec([]byte("secret")).Elastic != tc.controlSpecs {
			t.Errorf("strategy %q elastic %v hub-elastic %v: %v, env %q, spec elastic %v", tc.strategy, tc.elastic, tc.hubFlag, got, env, j.baseSpec([]byte("secret")).Elastic)
		}
	}
	for _, tc := range []struct {
		np, minNP        int
		elastic, hubFlag bool
		want             string
	}{
		{4, 2, false, false, "--min-np 2 needs --elastic (or --hub-elastic)"},
		{4, 5, true, false, "--min-np 5 is more than the job's 4 ranks"},
		{4, -1, true, false, "--min-np -1: want at least 1"},
		{4, 4, true, false, ""},
		{0, 9, true, false, ""}, // -np from the slots: checked by Run
		{4, 2, false, true, ""},
	} {
		cfg := DefaultConfig()
		cfg.Program, cfg.Gorun = "true", "/bin/true"
		cfg.NP, cfg.MinNP, cfg.Elastic, cfg.HubElastic = tc.np, tc.minNP, tc.elastic, tc.hubFlag
		err := cfg.validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("np %d min-np %d: %v, want %q", tc.np, tc.minNP, err, tc.want)
		}
	}
	for _, tc := range []struct {
		maxRestarts      int
		elastic, hubFlag bool
		strategy         string
		want             string
	}{
		{1, false, false, "", "--max-restarts 1 needs --elastic with the ring strategy"},
		{2, false, true, "", "--max-restarts 2 needs --elastic with the ring strategy"},
		{1, true, false, "hub", "--max-restarts 1 needs --elastic with the ring strategy"},
		{-1, true, false, "", "--max-restarts -1: want 0 or more"},
		{0, false, false, "", ""},
		{3, true, false, "ring", ""},
		{3, true, false, "", ""},
	} {
		cfg := DefaultConfig()
		cfg.Program, cfg.Gorun, cfg.NP = "true", "/bin/true", 4
		cfg.MaxRestarts, cfg.Elastic, cfg.HubElastic, cfg.Strategy = tc.maxRestarts, tc.elastic, tc.hubFlag, tc.strategy
		err := cfg.validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("max-restarts %d elastic %v hub-elastic %v strategy %q: %v, want %q", tc.maxRestarts, tc.elastic, tc.hubFlag, tc.strategy, err, tc.want)
		}
		if err == nil {
			j := &job{cfg: cfg, np: 4}
			if got := j.baseSpec([]byte("secret")).MaxRestarts; got != tc.maxRestarts {
				t.Errorf("max-restarts %d: the hosts' spec says %d", tc.maxRestarts, got)
			}
		}
	}
	cfg := DefaultConfig()
	cfg.Program, cfg.Gorun, cfg.Elastic, cfg.MinNP = "true", "/bin/true", true, 3
	cfg.Hosts = []Host{{Name: "localhost", Slots: 2}}
	if _, err := Run(t.Context(), cfg); err == nil || !strings.Contains(err.Error(), "--min-np 3 is more than the job's 2 ranks") {
		t.Fatalf("--min-np over the slots: %v", err)
	}
}
