package launcher

import (
	"errors"
	"fmt"

	"github.com/gorun/gorun/assign"
)

// MapBy says how ranks are spread over hosts.
type MapBy int

const (
	// MapBySlot fills each host's slots before moving to the next host
	// (Open MPI's default).
	MapBySlot MapBy = iota
	// MapByNode deals ranks to hosts round-robin.
	MapByNode
	// MapBySpeed gives each host a number of ranks that makes the slowest
	// host's share finish first: hosts of the hostfile's speed= get ranks
	// in proportion to their speed, within their slots (their max_slots
	// with --oversubscribe), solved exactly as a linear program (package
	// assign); a host's ranks are numbered together, as with slot.
	MapBySpeed
)

// ParseMapBy parses "slot" or "node".
func ParseMapBy(s string) (MapBy, error) {
	switch s {
	case "slot", "core", "":
		return MapBySlot, nil
	case "node":
		return MapByNode, nil
	case "speed":
		return MapBySpeed, nil
	}
	return 0, fmt.Errorf("--map-by %q: want slot, node or speed", s)
}

// Placement is where one rank runs.
type Placement struct {
	Rank      int
	Host      int // index into the host list
	LocalRank int // index among the ranks on the same host, in rank order
	LocalSize int // number of ranks on the same host
	NodeRank  int // index of the host among the hosts that got ranks
}

// Place assigns np ranks to hosts. It is a pure function: the same input
// always gives the same placement. Without oversubscribe, more ranks than
// slots is an error; with it, ranks keep being dealt round-robin over hosts
// that are below their max_slots.
func Place(hosts []Host, np int, by MapBy, oversubscribe bool) ([]Placement, error) {
	if np < 1 {
		return nil, fmt.Errorf("-np must be at least 1, got %d", np)
	}
	if len(hosts) == 0 {
		return nil, fmt.Errorf("no hosts to place ranks on")
	}
	total := 0
	for _, h := range hosts {
		total += h.Slots
	}
	if np > total && !oversubscribe {
		return nil, fmt.Errorf("-np %d asks for more ranks than the %d slots on %d host(s); add slots or use --oversubscribe", np, total, len(hosts))
	}
	count := make([]int, len(hosts))
	hostOf := make([]int, 0, np)
	full := func(i int, limit func(Host) int) bool { return count[i] >= limit(hosts[i]) }
	slots := func(h Host) int { return h.Slots }
	hard := func(h Host) int {
		if h.MaxSlots > 0 {
			return h.MaxSlots
		}
		return int(^uint(0) >> 1)
	}
	deal := func(limit func(Host) int, byNode bool) {
		for len(hostOf) < np {
			progress := false
			for i := range hosts {
				for len(hostOf) < np && !full(i, limit) {
					hostOf = append(hostOf, i)
					count[i]++
					progress = true
					if byNode {
						break
					}
				}
			}
			if !progress {
				return
			}
		}
	}
	if by == MapBySpeed {
		counts, err := bySpeed(hosts, np, total, oversubscribe)
		if err != nil {
			return nil, err
		}
		for i, c := range counts {
			for range c {
				hostOf = append(hostOf, i)
			}
			count[i] = c
		}
	} else {
		deal(slots, by == MapByNode)
		if len(hostOf) < np {
			deal(hard, true)
		}
	}
	if len(hostOf) < np {
		return nil, fmt.Errorf("-np %d does not fit: every host is at its max_slots", np)
	}
	nodeRank := make([]int, len(hosts))
	for i := range nodeRank {
		nodeRank[i] = -1
	}
	next := 0
	local := make([]int, len(hosts))
	out := make([]Placement, np)
	for r, h := range hostOf {
		if nodeRank[h] < 0 {
			nodeRank[h] = next
			next++
		}
		out[r] = Placement{Rank: r, Host: h, LocalRank: local[h], LocalSize: count[h], NodeRank: nodeRank[h]}
		local[h]++
	}
	return out, nil
}

// bySpeed is how many of np ranks each host gets under --map-by speed:
// a rank's work takes 1/speed on its host, a host with k ranks takes
// k/speed, and the slowest host's time is made as short as it can be,
// within each host's slots (with oversubscribe, its max_slots, if any).
func bySpeed(hosts []Host, np, total int, oversubscribe bool) ([]int, error) {
	p := assign.Problem{Samples: np, Weights: assign.Weights{Time: 1}, Workers: make([]assign.Worker, len(hosts))}
	for i, h := range hosts {
		speed := h.Speed
		if speed == 0 {
			speed = 1
		}
		cap := h.Slots
		if oversubscribe && np > total {
			cap = h.MaxSlots // 0: none
		}
		p.Workers[i] = assign.Worker{Cost: 1 / speed, Cap: cap}
	}
	a, err := assign.Solve(p)
	if err != nil {
		if errors.Is(err, assign.ErrInfeasible) {
			return nil, fmt.Errorf("--map-by speed: -np %d does not fit: %w", np, err)
		}
		return nil, fmt.Errorf("--map-by speed: %w", err)
	}
	return a.Samples, nil
}
