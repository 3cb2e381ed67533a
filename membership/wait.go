package membership

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// WaitAll joins the seeds (again, until it is done; see Config.Seeds) and
// returns every rank's data address and host once all Size ranks are
// members. On failure (ctx, or Config.StallTimeout) it names the ranks
// that never appeared.
func (m *Member) WaitAll(ctx context.Context) ([]Peer, error) { return m.WaitFor(ctx, nil) }

// WaitFor is WaitAll for the given ranks only (nil: every rank), this
// one among them: a rank restarted into a running elastic job waits for
// the ranks of the job's view, not for those lost for good. The result
// has an entry for every rank of the job, empty for those not waited
// for; seeds are picked among the ranks waited for.
//
// Joins run in the background, one at a time, paced by how long the last
// one took (a slow seed is not asked again at once), so WaitFor returns
// as soon as gossip has brought every rank, even with a join to a slow
// seed still under way; Close waits for it.
func (m *Member) WaitFor(ctx context.Context, ranks []int) ([]Peer, error) {
	rejoin := ranks != nil // WaitAll is the job's start; WaitFor a restart's
	if ranks == nil {
		ranks = make([]int, m.cfg.Size)
		for r := range ranks {
			ranks[r] = r
		}
	}
	for _, r := range ranks {
		if r < 0 || r >= m.cfg.Size {
			return nil, fmt.Errorf("membership: rank %d: cannot wait for rank %d of a job of %d", m.cfg.Rank, r, m.cfg.Size)
		}
	}
	var (
		lastErr  error
		a        = attempt{rejoin: rejoin}
		inflight chan joinResult // the join under way; nil: none
		now      = time.Now()
		retryAt  = now // the next join no sooner
		grew     = now // when a rank last appeared (or the wait began)
		repaired = now // when the last repair began
		nmissing = len(ranks) + 1
	)
	wake := time.NewTimer(time.Hour)
	defer wake.Stop()
	for {
		if peers, ok := m.all(ranks); ok {
			return peers, nil
		}
		now = time.Now()
		if k := len(m.missing(ranks)); k < nmissing {
			nmissing, grew = k, now
		}
		if st := m.cfg.StallTimeout; st > 0 && now.Sub(grew) >= st {
			return nil, m.waitError(ranks, fmt.Errorf("none appeared for %v", st), lastErr)
		}
		if inflight == nil && !now.Before(retryAt) {
			a.idle, a.sinceRepair = now.Sub(grew), now.Sub(repaired)
			if seeds, repair := m.seedsFor(ranks, a); len(seeds) > 0 && m.ml.NumMembers() < len(ranks) {
				if repair {
					repaired = now
				}
				a.n++
				inflight = make(chan joinResult, 1)
				if !m.startJoin(seeds, inflight) {
					return nil, m.waitError(ranks, errClosed, lastErr)
				}
			} else {
				retryAt = now.Add(jitter(retryInterval))
			}
		}
		// Wake for the next join or the stall deadline, whichever is
		// first; a rank appearing or the join ending wakes sooner.
		next := time.Hour
		if inflight == nil {
			next = retryAt.Sub(now)
		}
		if st := m.cfg.StallTimeout; st > 0 {
			next = min(next, grew.Add(st).Sub(now))
		}
		wake.Reset(max(next, time.Millisecond))
		select {
		case <-ctx.Done():
			return nil, m.waitError(ranks, context.Cause(ctx), lastErr)
		case <-m.done:
			return nil, m.waitError(ranks, errClosed, lastErr)
		case <-m.joined:
		case r := <-inflight:
			inflight = nil
			pause := retryInterval
			switch {
			case r.err != nil:
				lastErr = r.err
				pause = max(pause, r.took)
			case r.n > 0:
				a.joined = true
			}
			retryAt = time.Now().Add(jitter(pause))
		case <-wake.C:
		}
	}
}

// jitter is d give or take half, so that ranks started together do not
// retry together.
func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d)
}

// errClosed: WaitFor was waiting when the member was closed.
var errClosed = errors.New("member closed")

// startJoin joins seeds in the background, to report on done; false if
// the member is closed.
func (m *Member) startJoin(seeds []string, done chan<- joinResult) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	select {
	case <-m.done:
		return false
	default:
	}
	m.joins.Add(1)
	go func() {
		defer m.joins.Done()
		t0 := time.Now()
		n, err := m.ml.Join(seeds)
		done <- joinResult{n: n, err: err, took: time.Since(t0)}
	}()
	return true
}

type joinResult struct {
	n    int
	err  error
	took time.Duration
}

// waitError is WaitFor's error: the ranks that never appeared, why it
// stopped waiting, and what the last failed join said.
func (m *Member) waitError(ranks []int, cause, lastErr error) error {
	missing := m.missing(ranks)
	var hint string
	if lastErr != nil {
		last := strings.Join(strings.Fields(lastErr.Error()), " ")
		switch {
		case strings.Contains(last, "decrypt"):
			hint = "; wrong job secret: the other ranks cannot decrypt this rank's messages (" + last + ")"
		case len(missing) == len(ranks)-1:
			hint = "; no rank was reached: are they running, with the same job id? (" + last + ")"
		default:
			hint = " (last join error: " + last + ")"
		}
	}
	return fmt.Errorf("membership: rank %d: ranks %v never appeared: %w%s", m.cfg.Rank, missing, cause, hint)
}

// all returns the peers of ranks (the others' entries empty) once each of
// them is known.
func (m *Member) all(ranks []int) ([]Peer, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	peers := make([]Peer, m.cfg.Size)
	for _, r := range ranks {
		p, ok := m.peers[r]
		if !ok {
			return nil, false
		}
		peers[r] = p
	}
	return peers, true
}

// missing lists the ranks of ranks that gossip has not brought yet.
func (m *Member) missing(ranks []int) []int {
	_, missing := m.split(ranks)
	return missing
}

// split parts ranks into those gossip has brought and those it has not.
func (m *Member) split(ranks []int) (known, missing []int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range ranks {
		if _, ok := m.peers[r]; ok {
			known = append(known, r)
		} else {
			missing = append(missing, r)
		}
	}
	return known, missing
}
