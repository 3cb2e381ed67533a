package jobenv

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestRankEnvNames: each name carries the number its launcher means by
// it; in particular Open MPI's node rank is the place on the node (rank 5
// as the second rank of host 2), not the host's number.
func TestRankEnvNames(t *testing.T) {
	env := Rank{Rank: 5, LocalRank: 1, LocalSize: 4, NodeRank: 2, Addr: "198.18.0.13", GossipPort: 7000}.Env()
	for _, want := range []string{
		"GORUN_RANK=5", "GORUN_LOCAL_RANK=1", "GORUN_LOCAL_SIZE=4", "GORUN_NODE_RANK=2",
		"RANK=5", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=4", "GROUP_RANK=2",
		"OMPI_COMM_WORLD_RANK=5", "OMPI_COMM_WORLD_LOCAL_RANK=1", "OMPI_COMM_WORLD_LOCAL_SIZE=4",
		"OMPI_COMM_WORLD_NODE_RANK=1",
	} {
		if !slices.Contains(env, want) {
			t.Errorf("no %s in %v", want, env)
		}
	}
}

// TestShmNames: a job's files in shared memory match its pattern, another
// job's do not, and a job id is made safe for a file name.
func TestShmNames(t *testing.T) {
	for _, tc := range []struct {
		job, other string
	}{{"abc123", "abc1234"}, {"a/b c", "a_b_cd"}, {"", "x"}} {
		name := ShmName(tc.job, "status-3")
		if m, _ := filepath.Match(ShmPattern("/dev/shm", tc.job), "/dev/shm/"+name); !m {
			t.Fatalf("%q does not match the pattern of job %q", name, tc.job)
		}
		if m, _ := filepath.Match(ShmPattern("/dev/shm", tc.job), "/dev/shm/"+ShmName(tc.other, "status-3")); m {
			t.Fatalf("job %q's pattern matches job %q's file", tc.job, tc.other)
		}
		if strings.ContainsAny(name, "/ ") {
			t.Fatalf("unsafe name %q", name)
		}
	}
}
