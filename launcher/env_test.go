package launcher

import (
	"slices"
	"strings"
	"testing"

	"github.com/gorun/gorun/collective"
	"github.com/gorun/gorun/internal/jobenv"
	"github.com/gorun/gorun/launcher/agent"
	"github.com/gorun/gorun/launcher/proto"
	"github.com/gorun/gorun/ps"
)

func lookupIn(env []string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := "", false
		for _, kv := range env { // the last one wins, as in a process
			if name, val, found := strings.Cut(kv, "="); found && name == k {
				v, ok = val, true
			}
		}
		return v, ok
	}
}

// TestEnvRoundTrip: what the launcher and its agents set for a rank and
// for a dedicated hub is what collective.ConfigFromEnv and
// ps.HubConfigFromEnv read back.
func TestEnvRoundTrip(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Strategy, cfg.HubElastic = "hub", true
	cfg.Env = []string{jobenv.ColocatedHubsVar + "=2"}
	const jobID, secret = "0123456789abcdef", "a-job-secret-of-enough-length-0123"
	peers := []string{"10.0.0.1:10001", "10.0.0.1:10002", "10.0.0.2:10001"}
	hubs := []string{"10.0.0.2:10003"}
	env := append(jobEnv(cfg, jobID, []byte(secret), len(peers)), jobenv.Peers(peers, hubs, "10.0.0.1", 29500)...)
	// Host 1 runs rank 2 (gossip port 10001) and hub 0 (port 10003).
	rank := proto.RankSpec{Rank: 2, LocalRank: 0, LocalSize: 1, NodeRank: 1}
	hub := proto.RankSpec{Rank: 3, Hub: 1, NodeRank: 1}
	rankEnv := agent.RankEnv(rank, "10.0.0.2", 10001)
	hubEnv := jobenv.Hub(hub.Hub-1, 10003, hub.NodeRank)

	got, err := collective.ConfigFromEnv(lookupIn(append(env, rankEnv...)))
	if err != nil {
		t.Fatal(err)
	}
	if got.Rank != 2 || got.Size != 3 || got.JobID != jobID || string(got.Secret) != secret || !slices.Equal(got.Seeds, peers) ||
		got.AdvertiseAddr != "10.0.0.2" || got.GossipPort != 10001 || got.Strategy != "hub" || !got.HubElastic ||
		!slices.Equal(got.Hubs, hubs) || got.ColocatedHubs != 2 {
		t.Fatalf("rank read back %+v", got)
	}
	for _, want := range []string{"RANK=2", "WORLD_SIZE=3", "MASTER_ADDR=10.0.0.1", "MASTER_PORT=29500", "OMPI_COMM_WORLD_RANK=2", "LOCAL_WORLD_SIZE=1"} {
		k, v, _ := strings.Cut(want, "=")
		if got, _ := lookupIn(append(env, rankEnv...))(k); got != v {
			t.Errorf("%s=%q, want %q", k, got, v)
		}
	}

	if !got.Shm || got.HostKey != "node-1" {
		t.Fatalf("shared memory on by default with the launcher's node as host key: %v %q", got.Shm, got.HostKey)
	}
	off, err := collective.ConfigFromEnv(lookupIn(append(append(env, rankEnv...), jobenv.ShmVar+"=0")))
	if err != nil || off.Shm {
		t.Fatalf("GORUN_SHM=0: shm %v, %v", off.Shm, err)
	}
	if _, err := collective.ConfigFromEnv(lookupIn(append(append(env, rankEnv...), jobenv.ShmVar+"=maybe"))); err == nil || !strings.Contains(err.Error(), "GORUN_SHM") {
		t.Fatalf("GORUN_SHM=maybe: %v", err)
	}

	hc, err := ps.HubConfigFromEnv(lookupIn(append(env, hubEnv...)))
	if err != nil {
		t.Fatal(err)
	}
	if hc.Index != 0 || hc.Workers != 3 || hc.JobID != jobID || string(hc.Secret) != secret || !hc.Elastic || hc.ListenAddr != ":10003" {
		t.Fatalf("hub read back %+v", hc)
	}
	// The hub on node 0 shares memory with node 0's ranks: same key.
	if !hc.Shm.Enabled || hc.Shm.HostKey == "" || hc.Shm.HostKey != jobenv.HostKey(jobID, got.HostKey) {
		t.Fatalf("hub's shared memory %+v, ranks' host %q", hc.Shm, got.HostKey)
	}
	if hc, err := ps.HubConfigFromEnv(lookupIn(append(append(env, hubEnv...), jobenv.ShmVar+"=0"))); err != nil || hc.Shm.Enabled {
		t.Fatalf("GORUN_SHM=0 for a hub: %+v, %v", hc.Shm, err)
	}
}

// TestEnvErrorsNameEveryProblem: a rank started without gorun, or with a
// malformed value, gets one error naming each variable.
func TestEnvErrorsNameEveryProblem(t *testing.T) {
	_, err := collective.ConfigFromEnv(lookupIn(nil))
	for _, name := range []string{jobenv.RankVar, jobenv.SizeVar, jobenv.JobIDVar, jobenv.SecretVar, jobenv.PeersVar, jobenv.AddrVar, jobenv.GossipPortVar} {
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Fatalf("missing %s not named: %v", name, err)
		}
	}
	env := append(jobEnv(DefaultConfig(), "job", []byte("a-job-secret-of-enough-length-0123"), 1), jobenv.Peers([]string{"h:1"}, nil, "h", 1)...)
	env = append(env, jobenv.Rank{Addr: "h", GossipPort: 1}.Env()...)
	env = append(env, jobenv.SpinVar+"=fast", jobenv.ColocatedHubsVar+"=two")
	_, err = collective.ConfigFromEnv(lookupIn(env))
	if err == nil || !strings.Contains(err.Error(), `GORUN_SPIN="fast"`) || !strings.Contains(err.Error(), `GORUN_COLOCATED_HUBS="two"`) {
		t.Fatalf("bad values not named: %v", err)
	}
	if _, err := ps.HubConfigFromEnv(lookupIn(env)); err == nil || !strings.Contains(err.Error(), jobenv.HubIndexVar) {
		t.Fatalf("hub without its index: %v", err)
	}
}
