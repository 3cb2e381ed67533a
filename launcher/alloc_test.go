package launcher

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

func TestExpandHostlist(t *testing.T) {
	for in, want := range map[string]string{
		"node[01-04,07]":          "node01 node02 node03 node04 node07",
		"a,b[1-2],c":              "a b1 b2 c",
		"r[1-2]n[08-10]":          "r1n08 r1n09 r1n10 r2n08 r2n09 r2n10",
		"gpu[001-002]-ib,login01": "gpu001-ib gpu002-ib login01",
		"x[7]":                    "x7",
		"n[9-11]":                 "n9 n10 n11",
		"n[098-101]":              "n098 n099 n100 n101",
		"host.example.org":        "host.example.org",
	} {
		got, err := ExpandHostlist(in)
		if err != nil || strings.Join(got, " ") != want {
			t.Errorf("%q: %v %v, want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "a,,b", "n[1-", "n[3-1]", "n]1[", "n[a-b]", "n[1-2", "n[]", "n[1--2]", "n[0-99999][0-99999]", "n[[1]]"} {
		if got, err := ExpandHostlist(bad); err == nil {
			t.Errorf("%q: %v, want an error", bad, got)
		}
	}
}

func TestExpandCounts(t *testing.T) {
	for in, want := range map[string]string{"2(x3),1": "[2 2 2 1]", "4": "[4]", "1,16(x2)": "[1 16 16]"} {
		got, err := ExpandCounts(in)
		if err != nil || fmt.Sprint(got) != want {
			t.Errorf("%q: %v %v, want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "0", "2(x0)", "2(3)", "2(x3", "x", "-1", "2(x99999999)"} {
		if got, err := ExpandCounts(bad); err == nil {
			t.Errorf("%q: %v, want an error", bad, got)
		}
	}
}

func FuzzExpandHostlist(f *testing.F) {
	for _, s := range []string{"node[01-04,07]", "r[1-2]n[1-2],x", "a,b", "n[9-11]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		names, err := ExpandHostlist(s)
		if err != nil {
			return
		}
		if len(names) == 0 || len(names) > MaxAllocHosts {
			t.Fatalf("%q: %d names", s, len(names))
		}
		for _, n := range names {
			if n == "" || strings.ContainsAny(n, "[],") {
				t.Fatalf("%q: name %q", s, n)
			}
		}
	})
}

func TestAllocHosts(t *testing.T) {
	env := func(kv ...string) func(string) (string, bool) {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	files := map[string]string{"/pbs": "n1\nn2\nn1\n\nn3\nn2\n", "/bad": "n1 extra\n"}
	read := func(p string) ([]byte, error) {
		if s, ok := files[p]; ok {
			return []byte(s), nil
		}
		return nil, os.ErrNotExist
	}
	show := func(hs []Host) string {
		var b []string
		for _, h := range hs {
			b = append(b, fmt.Sprintf("%s:%d", h.Name, h.Slots))
		}
		return strings.Join(b, " ")
	}
	for _, tc := range []struct {
		env        []string
		want, from string
	}{
		{[]string{"SLURM_JOB_NODELIST", "c[1-3]", "SLURM_TASKS_PER_NODE", "2(x2),1", "SLURM_JOB_CPUS_PER_NODE", "8(x3)"}, "c1:2 c2:2 c3:1", "SLURM_TASKS_PER_NODE"},
		{[]string{"SLURM_JOB_NODELIST", "c[1-2]", "SLURM_JOB_CPUS_PER_NODE", "8(x2)"}, "c1:8 c2:8", "SLURM_JOB_CPUS_PER_NODE"},
		{[]string{"SLURM_NODELIST", "c1,c2"}, "c1:1 c2:1", "SLURM_NODELIST"},
		{[]string{"PBS_NODEFILE", "/pbs"}, "n1:2 n2:2 n3:1", "PBS_NODEFILE /pbs"},
		{nil, "", ""},
	} {
		hs, from, err := AllocHosts(env(tc.env...), read)
		if err != nil || show(hs) != tc.want || !strings.Contains(from, tc.from) {
			t.Errorf("%v: %s from %q (%v), want %s from %s", tc.env, show(hs), from, err, tc.want, tc.from)
		}
	}
	for _, bad := range [][]string{
		{"SLURM_JOB_NODELIST", "c[1-3]", "SLURM_TASKS_PER_NODE", "2(x2)"},
		{"SLURM_JOB_NODELIST", "c[3-1]"},
		{"PBS_NODEFILE", "/missing"},
		{"PBS_NODEFILE", "/bad"},
	} {
		if hs, _, err := AllocHosts(env(bad...), read); err == nil {
			t.Errorf("%v: %v, want an error", bad, hs)
		} else if errors.Is(err, os.ErrNotExist) != (bad[1] == "/missing") {
			t.Errorf("%v: %v", bad, err)
		}
	}
}
