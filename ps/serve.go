package ps

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/gorun/gorun/internal/jobenv"
)

// HubConfigFromEnv builds the config of a dedicated hub from the
// environment gorun gives it (GORUN_JOB_ID, GORUN_JOB_SECRET, GORUN_SIZE:
// the number of workers, GORUN_HUB_INDEX, GORUN_HUB_PORT and optionally
// GORUN_HUB_ELASTIC=1 and GORUN_HUB_SHARE, hub 0's LB-BSP split in
// ParseShareConfig's form; see internal/jobenv). lookup is os.LookupEnv
// in a real hub.
func HubConfigFromEnv(lookup func(string) (string, bool)) (HubConfig, error) {
	cfg := DefaultHubConfig()
	env := jobenv.NewReader(lookup)
	cfg.JobID = env.String(jobenv.JobIDVar)
	cfg.Secret = []byte(env.String(jobenv.SecretVar))
	cfg.Workers, cfg.Index = env.Int(jobenv.SizeVar), env.Int(jobenv.HubIndexVar)
	port := env.Int(jobenv.HubPortVar)
	cfg.Elastic = env.Flag(jobenv.HubElasticVar)
	cfg.Shm.Enabled = env.Switch(jobenv.ShmVar, true)
	if node, ok := env.Lookup(jobenv.NodeRankVar); ok {
		cfg.Shm.HostKey = jobenv.HostKey(cfg.JobID, jobenv.NodeName(node))
	}
	if err := env.Err("dedicated hubs are started by gorun --hubs K"); err != nil {
		return HubConfig{}, fmt.Errorf("ps: %w", err)
	}
	share, err := shareFromEnv(env)
	if err != nil {
		return HubConfig{}, err
	}
	cfg.Share = share
	cfg.ListenAddr = ":" + strconv.Itoa(port)
	return cfg, cfg.validate()
}

// Serve runs a hub until every worker has come and gone, or ctx ends.
// When ctx ends (the launcher is ending the job) the hub still serves for
// up to drain, so that what it has to tell the workers (a lost worker's
// name, above all) reaches them before its connections close.
func Serve(ctx context.Context, cfg HubConfig, drain time.Duration) (HubStats, error) {
	h, err := NewHub(cfg)
	if err != nil {
		return HubStats{}, err
	}
	defer h.Close()
	select {
	case <-h.Done():
	case <-ctx.Done():
		select {
		case <-h.Done():
		case <-time.After(drain):
		}
	}
	return h.Stats(), nil
}
