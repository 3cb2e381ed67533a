package pmi

import "fmt"

// FenceConfig describes the job's barrier for the launcher.
type FenceConfig struct {
	Hosts    int // hosts with ranks: every one of them enters every barrier
	MaxBytes int // cap on the bytes of all puts of the job, keys and values
}

// DefaultFenceConfig is one host and a 64 MiB store.
func DefaultFenceConfig() FenceConfig { return FenceConfig{Hosts: 1, MaxBytes: 64 << 20} }

// Fence gathers the hosts' barriers. It is a pure state machine: it does
// no I/O, and is not safe for concurrent use.
type Fence struct {
	cfg     FenceConfig
	epoch   int // the barrier being gathered, from 1
	entered map[int]bool
	puts    []KV
	bytes   int
}

// NewFence returns a Fence for cfg.
func NewFence(cfg FenceConfig) (*Fence, error) {
	if cfg.Hosts < 1 || cfg.MaxBytes < 1 {
		return nil, fmt.Errorf("pmi: fence of %d hosts with %d bytes", cfg.Hosts, cfg.MaxBytes)
	}
	return &Fence{cfg: cfg, epoch: 1, entered: map[int]bool{}}, nil
}

// Enter records that host entered barrier epoch with its puts. When it is
// the last host, complete is true and release holds every host's puts of
// the epoch, for every host's Node.Release. An error (a host entering
// twice or out of step, the store over its cap) fails the job.
func (f *Fence) Enter(host, epoch int, puts []KV) (release []KV, complete bool, err error) {
	switch {
	case host < 0 || host >= f.cfg.Hosts:
		return nil, false, fmt.Errorf("pmi: barrier from host %d of %d", host, f.cfg.Hosts)
	case epoch != f.epoch:
		return nil, false, fmt.Errorf("pmi: host %d entered barrier %d while the job is at barrier %d", host, epoch, f.epoch)
	case f.entered[host]:
		return nil, false, fmt.Errorf("pmi: host %d entered barrier %d twice", host, epoch)
	}
	for _, kv := range puts {
		f.bytes += len(kv.Key) + len(kv.Value)
	}
	if f.bytes > f.cfg.MaxBytes {
		return nil, false, fmt.Errorf("pmi: the job's puts hold %d bytes, more than the %d allowed", f.bytes, f.cfg.MaxBytes)
	}
	f.entered[host] = true
	f.puts = append(f.puts, puts...)
	if len(f.entered) < f.cfg.Hosts {
		return nil, false, nil
	}
	release = f.puts
	f.puts, f.entered = nil, map[int]bool{}
	f.epoch++
	return release, true, nil
}
