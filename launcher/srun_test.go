package launcher

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestSrunCommand: one task per node on exactly the nodes given, no CPU
// binding, no PMI of Slurm's, stdin closed, a lost node not killing the
// others; the user's srun options come first and gorun's agent last.
func TestSrunCommand(t *testing.T) {
	cfg := DefaultSrunConfig()
	cfg.Srun, cfg.Gorun = []string{"srun", "--partition=gpu"}, "/opt/gorun"
	cfg.Hosts = []Host{{Name: "c1", Slots: 4}, {Name: "c7", Slots: 2}, {Name: "c9", Slots: 1}}
	got := cfg.Command()
	for _, want := range []string{"--nodes=3", "--ntasks=3", "--ntasks-per-node=1", "--nodelist=c1,c7,c9", "--cpu-bind=none", "--mpi=none", "--input=none", "--kill-on-bad-exit=0", "--whole"} {
		if !slices.Contains(got, want) {
			t.Errorf("srun command lacks %s: %q", want, got)
		}
	}
	if got[0] != "srun" || got[1] != "--partition=gpu" || got[len(got)-2] != "/opt/gorun" || got[len(got)-1] != SrunAgentCommandName {
		t.Errorf("srun command %q", got)
	}
	if strings.Contains(strings.Join(got, " "), "secret") {
		t.Errorf("the command line carries a secret: %q", got)
	}
}

// TestAgentEnviron: the ranks do not see the job's secret, the step's
// addresses, or the agent's own task of the step, and keep the rest.
func TestAgentEnviron(t *testing.T) {
	in := []string{"PATH=/bin", "GORUN_JOB_SECRET=x", SrunLauncherVar + "=1.2.3.4:5", SrunStepVar + "=ab", "SLURM_JOB_ID=7", "SLURM_JOB_NODELIST=c[1-2]",
		"SLURM_PROCID=1", "SLURM_NODEID=1", "SLURM_STEP_ID=0", "SLURM_STEP_NUM_NODES=2", "SLURM_NTASKS=2", "PMI_FD=3", "PMIX_RANK=1", "SLURM_CPU_BIND=none", "HOME=/root"}
	got := AgentEnviron(in)
	want := []string{"PATH=/bin", "SLURM_JOB_ID=7", "SLURM_JOB_NODELIST=c[1-2]", "HOME=/root"}
	if !slices.Equal(got, want) {
		t.Fatalf("AgentEnviron = %q, want %q", got, want)
	}
}

func TestInSlurm(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		job  string
		want bool
	}{
		{map[string]string{"SLURM_JOB_ID": "12", "SLURM_JOB_NODELIST": "c1"}, "12", true},
		{map[string]string{"SLURM_JOB_ID": "12", "SLURM_NODELIST": "c1"}, "12", true},
		{map[string]string{"SLURM_JOB_NODELIST": "c1"}, "", false}, // a node list alone: a hand-made allocation, ssh
		{map[string]string{"SLURM_JOB_ID": "12"}, "12", false},
		{map[string]string{"SLURM_JOB_ID": "", "SLURM_JOB_NODELIST": "c1"}, "", false},
	} {
		job, ok := InSlurm(func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
		if ok != tc.want || (ok && job != tc.job) {
			t.Errorf("InSlurm(%v) = %q, %v; want %q, %v", tc.env, job, ok, tc.job, tc.want)
		}
	}
}

// fakeSrun writes an executable script standing in for srun.
func fakeSrun(t *testing.T, body string) []string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "srun")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return []string{p}
}

// TestStartSrunFails: an srun that ends before its agents dial back (the
// step was refused, a node failed) ends the wait at once, and the error
// names the nodes missing and what srun said; a step that starts no
// agent at all is named when the wait times out.
func TestStartSrunFails(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		timeout    time.Duration
		want       []string
	}{
		{"refused", `echo "srun: error: Unable to create step for job 7: Requested node configuration is not available" >&2; exit 1`, time.Minute,
			[]string{"nodes [c1 c2 c3] never dialed in", "srun ended: exit status 1", "Requested node configuration is not available"}},
		{"ended", `exit 0`, time.Minute, []string{"nodes [c1 c2 c3] never dialed in", "srun ended: exit status 0"}},
		{"silent", `sleep 60`, 500 * time.Millisecond, []string{"nodes [c1 c2 c3] never dialed in within 500ms"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			cfg := DefaultSrunConfig()
			cfg.Srun, cfg.Gorun, cfg.Secret, cfg.Timeout = fakeSrun(t, tc.body), "/bin/gorun", []byte("s3cret-of-16-bytes"), tc.timeout
			cfg.Hosts = []Host{{Name: "c1", Slots: 1}, {Name: "c2", Slots: 1}, {Name: "c3", Slots: 1}}
			start := time.Now()
			_, err = StartSrun(context.Background(), l, []string{l.Addr().String()}, cfg, nil)
			if err == nil {
				t.Fatal("StartSrun succeeded without agents")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error lacks %q: %v", w, err)
				}
			}
			t.Logf("after %v: %v", time.Since(start).Round(time.Millisecond), err)
		})
	}
}

// TestRendezvousAllDial: in an srun step every node, 0 included, dials
// in and is known by its hostname (its Slurm node name): Attach finds
// each by name, once. An agent of another step (another job's nonce) is
// refused and told so, and the wait goes on for the real one.
func TestRendezvousAllDial(t *testing.T) {
	cfg := meetConfig(3)
	cfg.allDial, cfg.names = true, []string{"h0", "h1", "h2"}
	var otherErr error
	r, nodes, warns, err := meet(t, cfg, func(addr string) {
		other := nodeConfig(addr, 1, 3)
		other.Program = "another-step"
		_, _, otherErr = DialLauncher(context.Background(), other)
		for i := range 3 {
			s, _, err := DialLauncher(context.Background(), nodeConfig(addr, i, 3))
			if err != nil {
				t.Error(err)
				return
			}
			defer s.Close()
		}
	})
	if err != nil {
		t.Fatal(err, warns)
	}
	defer r.Close()
	if len(nodes) != 3 || nodes[0].Index != 0 || nodes[0].Hostname != "h0" {
		t.Fatalf("nodes %+v", nodes)
	}
	if !errors.Is(otherErr, ErrRefused) || !strings.Contains(otherErr.Error(), "from another srun step") {
		t.Fatalf("the other step's agent: %v", otherErr)
	}
	for _, h := range []string{"h0", "h1", "h2"} {
		if _, err := r.Attach(h); err != nil {
			t.Fatalf("Attach(%s): %v", h, err)
		}
		if _, err := r.Attach(h); err == nil {
			t.Fatalf("Attach(%s) twice", h)
		}
	}
}
