package main

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/gorun/gorun/python"
)

func TestVersionLine(t *testing.T) {
	goPart := " " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
	vcs := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	for _, tc := range []struct {
		ver  string
		bi   *debug.BuildInfo
		want string
	}{
		{"", nil, "gorun version (devel)"},
		{"0.1.0", nil, "gorun version 0.1.0"},
		{"0.1.0", &debug.BuildInfo{}, "gorun version 0.1.0"},
		{"0.1.0", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs("-trimpath", "true")}, "gorun version 0.1.0"},
		{"1.2.3", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}, Settings: vcs("vcs", "git", "vcs.revision", "c184080abcdef0123456789", "vcs.time", "2025-11-26T08:41:00Z", "vcs.modified", "false")},
			"gorun version 1.2.3 (c184080abcde 2025-11-26T08:41:00Z)"},
		{"0.1.0", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20251126084100-c184080abcde+dirty"}, Settings: vcs("vcs.revision", "c184080abcdef0123456789", "vcs.time", "2025-11-26T08:41:00Z", "vcs.modified", "true")},
			"gorun version 0.1.0 (c184080abcde 2025-11-26T08:41:00Z dirty)"},
		{"", &debug.BuildInfo{Settings: vcs("vcs.revision", "abc")}, "gorun version (devel) (abc)"},
	} {
		if got := versionLine(tc.ver, tc.bi); got != tc.want+goPart {
			t.Errorf("versionLine(%q, %+v) = %q, want %q", tc.ver, tc.bi, got, tc.want+goPart)
		}
	}
}

// TestVersion runs gorun --version: exit 0, one line naming gorun's
// version (the Python package's) and the Go release it was built with.
func TestVersion(t *testing.T) {
	r := gorun(t, "--version")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("gorun --version: exit %d, stderr %q", r.code, r.stderr)
	}
	line, rest, _ := strings.Cut(r.stdout, "\n")
	if !strings.HasPrefix(line, "gorun version "+python.Version+" ") || !strings.Contains(line, " "+runtime.Version()+" ") || rest != "" {
		t.Fatalf("gorun --version printed %q, want one line \"gorun version %s ... %s %s/%s\"", r.stdout, python.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	}
}
