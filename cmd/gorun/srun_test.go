package main

import (
	"errors"
	"strings"
	"testing"
)

// TestChooseLauncher: srun inside an allocation when srun exists and the
// hosts are the allocation's; ssh otherwise; a flag that asks for srun
// where it cannot run is an error that says why.
func TestChooseLauncher(t *testing.T) {
	alloc := map[string]string{"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "c[1-4]"}
	none := map[string]string{}
	found := func(string) (string, error) { return "/usr/bin/srun", nil }
	missing := func(string) (string, error) {
		return "", errors.New(`exec: "srun": executable file not found in $PATH`)
	}
	for _, tc := range []struct {
		flag       string
		hostsGiven bool
		env        map[string]string
		lookPath   func(string) (string, error)
		mode, why  string // why: a part of the reason, or of the error
	}{
		{"auto", false, alloc, found, modeSrun, "inside Slurm job 42, with /usr/bin/srun"},
		{"", false, alloc, found, modeSrun, "Slurm job 42"},
		{"auto", false, none, found, modeSSH, "not inside a Slurm allocation"},
		{"auto", true, alloc, found, modeSSH, "-hostfile or -H names the hosts"},
		{"auto", false, alloc, missing, modeSSH, "no srun on PATH"},
		{"auto", false, map[string]string{"SLURM_JOB_NODELIST": "c1"}, found, modeSSH, "not inside"},
		{"ssh", false, alloc, found, modeSSH, "--launcher ssh"},
		{"srun", true, alloc, found, modeSrun, "--launcher srun, Slurm job 42"},
		{"srun", false, none, found, "", "not inside a Slurm allocation"},
		{"srun", false, alloc, missing, "", "no srun on PATH"},
		{"pbs", false, alloc, found, "", `--launcher "pbs": want auto, ssh or srun`},
	} {
		mode, why, err := chooseLauncher(tc.flag, tc.hostsGiven, func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }, tc.lookPath)
		if tc.mode == "" {
			if err == nil || !strings.Contains(err.Error(), tc.why) {
				t.Errorf("%q %v %v: err %v, want one saying %q", tc.flag, tc.hostsGiven, tc.env, err, tc.why)
			}
			continue
		}
		if err != nil || mode != tc.mode || !strings.Contains(why, tc.why) {
			t.Errorf("%q %v %v: %q (%q) %v, want %q (%q)", tc.flag, tc.hostsGiven, tc.env, mode, why, err, tc.mode, tc.why)
		}
	}
}

// TestSrunAgentOutsideStep: the hidden agent command run by hand says it
// was not started by gorun's step.
func TestSrunAgentOutsideStep(t *testing.T) {
	t.Setenv("GORUN_SRUN_LAUNCHER", "")
	r := gorun(t, "__srun-agent")
	if r.code == 0 || !strings.Contains(r.stderr, "not started by gorun's srun step") {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
}
