package ps

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// HubConfigFromEnv builds the config of a dedicated hub from the
// environment gorun gives it (GORUN_JOB_ID, GORUN_JOB_SECRET, GORUN_SIZE:
// the number of workers, GORUN_HUB_INDEX, GORUN_HUB_PORT and optionally
// GORUN_HUB_ELASTIC=1). lookup is os.LookupEnv in a real hub.
func HubConfigFromEnv(lookup func(string) (string, bool)) (HubConfig, error) {
	cfg := DefaultHubConfig()
	var missing []string
	get := func(k string) string {
		v, ok := lookup(k)
		if !ok || v == "" {
			missing = append(missing, k)
		}
		return v
	}
	cfg.JobID = get("GORUN_JOB_ID")
	cfg.Secret = []byte(get("GORUN_JOB_SECRET"))
	size, index, port := get("GORUN_SIZE"), get("GORUN_HUB_INDEX"), get("GORUN_HUB_PORT")
	if len(missing) > 0 {
		return HubConfig{}, fmt.Errorf("ps: %s not set: dedicated hubs are started by gorun --hubs K", strings.Join(missing, ", "))
	}
	var err error
	if cfg.Workers, err = strconv.Atoi(size); err != nil {
		return HubConfig{}, fmt.Errorf("ps: GORUN_SIZE=%q: %w", size, err)
	}
	if cfg.Index, err = strconv.Atoi(index); err != nil {
		return HubConfig{}, fmt.Errorf("ps: GORUN_HUB_INDEX=%q: %w", index, err)
	}
	if _, err := strconv.Atoi(port); err != nil {
		return HubConfig{}, fmt.Errorf("ps: GORUN_HUB_PORT=%q: %w", port, err)
	}
	cfg.ListenAddr = ":" + port
	if v, _ := lookup("GORUN_HUB_ELASTIC"); v == "1" || v == "true" {
		cfg.Elastic = true
	}
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
