package ps

import (
	"errors"
	"fmt"
	"math"
	"sort"
)

// Async is the staleness of ASP: pulls never wait.
const Async = -1

// UpdateMode says what a push does to a key's value.
type UpdateMode int

const (
	// Sum adds pushes to the value; workers run their own optimizer.
	Sum UpdateMode = iota
	// SGD applies SGD with momentum at the hub: v = m·v + g; w -= lr·v.
	SGD
)

// KeyConfig declares a key.
type KeyConfig struct {
	Len       int
	Update    UpdateMode
	LR        float64 // SGD
	Momentum  float64 // SGD
	Staleness int     // 0 BSP, > 0 SSP, Async
	Init      []float64
	// Sparse makes pushes sparse: top-k or random-k of each partition,
	// with error feedback on the worker (see "Sparse pushes" in the
	// package doc). The zero value pushes every element.
	Sparse SparseConfig
}

// Errors the Table returns; the server sends them back to workers.
var (
	ErrUnknownKey = errors.New("ps: unknown key")
	ErrShape      = errors.New("ps: shape mismatch")
	ErrClock      = errors.New("ps: push out of clock order")
	ErrWorker     = errors.New("ps: unknown or removed worker")
)

type round struct {
	sum     []float64 // Σ g (Sum) or Σ n·g (SGD)
	samples int
	pushed  map[int]bool
}

type key struct {
	cfg      KeyConfig
	value    []float64
	velocity []float64
	pushed   []int // per worker: clocks pushed so far
	rounds   map[int]*round
	applied  int   // BSP: rounds combined so far
	failed   error // a corrupt sparse push failed the key for good
}

// Table is the state of a hub: keys, their values and clocks. It is not
// safe for concurrent use; the server serialises access.
type Table struct {
	workers int
	live    []bool
	keys    map[string]*key
}

// NewTable returns a table for workers 0..workers-1.
func NewTable(workers int) *Table {
	live := make([]bool, workers)
	for i := range live {
		live[i] = true
	}
	return &Table{workers: workers, live: live, keys: map[string]*key{}}
}

// Declare creates a key. Declaring an existing key with the same length
// and mode is a no-op (every worker may declare); anything else is an error,
// and so is declaring a key a corrupt sparse push has failed (its error).
func (t *Table) Declare(name string, cfg KeyConfig) error {
	if cfg.Len < 0 || cfg.Staleness < Async || cfg.Init != nil && len(cfg.Init) != cfg.Len {
		return fmt.Errorf("ps: key %q: bad config (len %d, staleness %d, init %d)", name, cfg.Len, cfg.Staleness, len(cfg.Init))
	}
	if cfg.Update != Sum && cfg.Update != SGD {
		return fmt.Errorf("ps: key %q: unknown update mode %d", name, cfg.Update)
	}
	if cfg.Update == SGD && (!(cfg.LR >= 0) || math.IsInf(cfg.LR, 0) || !(cfg.Momentum >= 0 && cfg.Momentum < 1)) {
		return fmt.Errorf("ps: key %q: SGD needs a finite LR >= 0 and momentum in [0, 1), got %v and %v", name, cfg.LR, cfg.Momentum)
	}
	if err := cfg.Sparse.validate(); err != nil {
		return fmt.Errorf("ps: key %q: %w", name, err)
	}
	if k, ok := t.keys[name]; ok {
		if k.failed != nil {
			return k.failed // a failed key stays failed, for declares too
		}
		if k.cfg.Len != cfg.Len || k.cfg.Update != cfg.Update || k.cfg.Staleness != cfg.Staleness {
			return fmt.Errorf("%w: key %q declared with length %d, mode %d, staleness %d; now %d, %d, %d",
				ErrShape, name, k.cfg.Len, k.cfg.Update, k.cfg.Staleness, cfg.Len, cfg.Update, cfg.Staleness)
		}
		if s := k.cfg.Sparse; !s.sameOnHub(cfg.Sparse) {
			return fmt.Errorf("%w: key %q declared %v at ratio %v, seed %d; now %v, %v, %d",
				ErrShape, name, s.Method, s.Ratio, s.Seed, cfg.Sparse.Method, cfg.Sparse.Ratio, cfg.Sparse.Seed)
		}
		return nil
	}
	k := &key{cfg: cfg, value: make([]float64, cfg.Len), pushed: make([]int, t.workers), rounds: map[int]*round{}}
	copy(k.value, cfg.Init)
	if cfg.Update == SGD {
		k.velocity = make([]float64, cfg.Len)
	}
	t.keys[name] = k
	return nil
}

// Delete forgets a key.
func (t *Table) Delete(name string) { delete(t.keys, name) }

func (t *Table) lookup(name string, worker int) (*key, error) {
	k, ok := t.keys[name]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownKey, name)
	}
	if worker < 0 || worker >= t.workers || !t.live[worker] {
		return nil, fmt.Errorf("%w: %d", ErrWorker, worker)
	}
	if k.failed != nil {
		return nil, k.failed
	}
	return k, nil
}

// fail fails key name for good: every later Push and Pull of it returns
// err (a corrupt sparse push: a round without it would be silently
// wrong, and one with it can never complete).
func (t *Table) fail(name string, err error) {
	if k, ok := t.keys[name]; ok && k.failed == nil {
		k.failed = err
	}
}

// Push applies worker's push of clock for key: grad holds Len values and
// samples is how many samples it was computed from (at least 1).
func (t *Table) Push(name string, worker, clock int, grad []float64, samples int) error {
	k, err := t.lookup(name, worker)
	if err != nil {
		return err
	}
	if len(grad) != k.cfg.Len {
		return fmt.Errorf("%w: key %q has %d elements, push from worker %d has %d", ErrShape, name, k.cfg.Len, worker, len(grad))
	}
	if clock != k.pushed[worker] {
		return fmt.Errorf("%w: worker %d pushed clock %d of %q, expected %d", ErrClock, worker, clock, name, k.pushed[worker])
	}
	if samples < 1 {
		return fmt.Errorf("ps: push of %q from worker %d: samples must be at least 1, got %d", name, worker, samples)
	}
	k.pushed[worker]++
	if k.cfg.Staleness != 0 {
		k.apply(grad, 1)
		return nil
	}
	r := k.rounds[clock]
	if r == nil {
		r = &round{sum: make([]float64, k.cfg.Len), pushed: map[int]bool{}}
		k.rounds[clock] = r
	}
	w := 1.0
	if k.cfg.Update == SGD {
		w = float64(samples)
	}
	for i, g := range grad {
		r.sum[i] += w * g
	}
	r.samples += samples
	r.pushed[worker] = true
	t.combine(k)
	return nil
}

// combine applies every complete BSP round, in order.
func (t *Table) combine(k *key) {
	for {
		r := k.rounds[k.applied]
		if r == nil || !t.complete(r) {
			return
		}
		if k.cfg.Update == SGD {
			k.apply(r.sum, 1/float64(r.samples))
		} else {
			k.apply(r.sum, 1)
		}
		delete(k.rounds, k.applied)
		k.applied++
	}
}

func (t *Table) complete(r *round) bool {
	for w, live := range t.live {
		if live && !r.pushed[w] {
			return false
		}
	}
	return true
}

// apply adds scale·g to the value (Sum) or takes an SGD step with it.
func (k *key) apply(g []float64, scale float64) {
	if k.cfg.Update == Sum {
		for i := range k.value {
			k.value[i] += scale * g[i]
		}
		return
	}
	for i := range k.value {
		k.velocity[i] = k.cfg.Momentum*k.velocity[i] + scale*g[i]
		k.value[i] -= k.cfg.LR * k.velocity[i]
	}
}

// Pull returns key's value for worker at clock, if the key's consistency
// bound lets it be served now. Staleness is how many clocks the slowest
// live worker is behind c: the pull sees every update from clocks up to
// c-1-staleness.
func (t *Table) Pull(name string, worker, clock int) (value []float64, ready bool, staleness int, err error) {
	k, err := t.lookup(name, worker)
	if err != nil {
		return nil, false, 0, err
	}
	slowest := -1
	for w, live := range t.live {
		if live && (slowest < 0 || k.pushed[w] < slowest) {
			slowest = k.pushed[w]
		}
	}
	if slowest < 0 {
		slowest = clock
	}
	staleness = max(0, clock-slowest)
	if k.cfg.Staleness != Async && staleness > k.cfg.Staleness {
		return nil, false, staleness, nil
	}
	if k.cfg.Staleness == 0 && k.applied < clock {
		return nil, false, staleness, nil
	}
	return append([]float64(nil), k.value...), true, staleness, nil
}

// Remove takes worker out of the job (elastic mode): rounds no longer wait
// for it, and a round it did not push is combined from the others.
func (t *Table) Remove(worker int) error {
	if worker < 0 || worker >= t.workers || !t.live[worker] {
		return fmt.Errorf("%w: %d", ErrWorker, worker)
	}
	t.live[worker] = false
	names := make([]string, 0, len(t.keys))
	for n := range t.keys {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		t.combine(t.keys[n])
	}
	return nil
}

// Live is the number of workers not removed.
func (t *Table) Live() int {
	n := 0
	for _, l := range t.live {
		if l {
			n++
		}
	}
	return n
}
