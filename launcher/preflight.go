package launcher

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/gorun/gorun/launcher/proto"
)

// preflight waits until every agent has checked its host and reserved ports,
// and reports every host that failed, each on its own line, with the exit
// code for the job. A signal (Ctrl-C) or the end of ctx ends the wait at
// once: nothing has started yet, so the caller simply kills the agents.
func (j *job) preflight(ctx context.Context) (int, error) {
	timer := time.NewTimer(j.cfg.Preflight)
	defer timer.Stop()
	var errs []error
	pending := map[int]bool{}
	for i := range j.agents {
		pending[i] = true
	}
	for len(pending) > 0 {
		select {
		case ev := <-j.events:
			if !pending[ev.agent] {
				j.backlog = append(j.backlog, ev)
				continue
			}
			delete(pending, ev.agent)
			if err := j.ready(ev); err != nil {
				errs = append(errs, err)
			}
		case <-timer.C:
			for _, i := range slices.Sorted(maps.Keys(pending)) {
				a := j.agents[i]
				errs = append(errs, fmt.Errorf("%s: no answer from the agent within %v%s", a.name, j.cfg.Preflight, a.stderr.suffix()))
				a.kill()
			}
			pending = nil
		case sig := <-j.cfg.Signals:
			s := asSignal(sig)
			return 128 + int(s), fmt.Errorf("gorun received %v during pre-flight (%d host(s) still checking); no rank was started", s, len(pending))
		case <-ctx.Done():
			return ExitTimeout, fmt.Errorf("cancelled during pre-flight (%d host(s) still checking): %w", len(pending), context.Cause(ctx))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return ExitLaunchFailed, err
	}
	return 0, nil
}

// ready checks an agent's first word: its ready message, with a port for
// each of its ranks.
func (j *job) ready(ev agentEvent) error {
	a, m := j.agents[ev.agent], ev.m
	switch {
	case m == nil:
		return fmt.Errorf("%s: %s", a.name, ev.why)
	case m.Kind == proto.MsgError:
		return fmt.Errorf("%s: %s", a.name, m.Err)
	case m.Kind != proto.MsgReady || m.Ready == nil || len(m.Ready.Ports) != len(a.ranks):
		return fmt.Errorf("%s: agent sent message %d instead of ready", a.name, m.Kind)
	}
	a.ready = m.Ready
	return nil
}
