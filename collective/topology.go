package collective

import (
	"slices"
)

// topology is which ranks share a host, the same on every rank, and the
// rank lists the node-aware collectives run over (each call makes its
// groups over its own network: see call).
type topology struct {
	hosts [][]int // ranks of each host, hosts ordered by their lowest rank
	// nodeAware: every host has the same number of ranks, at least two,
	// and there are several hosts; local and cross are then this rank's
	// host and the ranks at its place on every host.
	nodeAware    bool
	local, cross []int
	// byHost is every rank, host after host: a broadcast chain in this
	// order crosses between hosts at most once per host, however the
	// ranks were placed (nil when rank order already is).
	byHost []int
}

// hostsOf groups ranks by host, hosts in the order of their lowest rank.
func hostsOf[K comparable](hostOf []K) [][]int {
	index := map[K]int{}
	var hosts [][]int
	for r, h := range hostOf {
		i, ok := index[h]
		if !ok {
			i = len(hosts)
			index[h] = i
			hosts = append(hosts, nil)
		}
		hosts[i] = append(hosts[i], r)
	}
	return hosts
}

// nodeAware reports whether hosts suit the node-aware all-reduce: several
// hosts, each with the same number of ranks, at least two.
func nodeAware(hosts [][]int) bool {
	if len(hosts) < 2 || len(hosts[0]) < 2 {
		return false
	}
	for _, h := range hosts {
		if len(h) != len(hosts[0]) {
			return false
		}
	}
	return true
}

// setTopology keeps the rank lists from the host of every rank that takes
// part (any string shared by a host's ranks; with Elastic, of the view's
// ranks in view order; in a child, of its ranks in its order), which
// gossip brought: no message is needed.
func (c *Comm) setTopology(hostOf []string) error {
	c.topo = nil
	if len(hostOf) < 2 {
		return nil
	}
	hosts := hostsOf(hostOf)
	t := &topology{hosts: hosts}
	if order := slices.Concat(hosts...); !slices.IsSorted(order) {
		t.byHost = order
	}
	if nodeAware(hosts) {
		var mine, place int
		for h, ranks := range hosts {
			for i, r := range ranks {
				if r == c.index() {
					mine, place = h, i
				}
			}
		}
		cross := make([]int, len(hosts))
		for h, ranks := range hosts {
			cross[h] = ranks[place]
		}
		t.nodeAware, t.local, t.cross = true, hosts[mine], cross
	}
	c.topo = t
	return nil
}

// Hosts reports which ranks share a host (learned when the Comm joined):
// one list of ranks per host (with Elastic, of the current view's ranks).
// A Comm from NewLocal is one host.
func (c *Comm) Hosts() [][]int {
	if c.el != nil {
		// The view's, set with it: safe beside a collective that installs
		// a new one.
		return clone2(*c.el.hostRanks.Load())
	}
	return c.hostRanks()
}

// hostRanks is Hosts from the topology, in job ranks.
func (c *Comm) hostRanks() [][]int {
	if c.topo == nil {
		return [][]int{c.View().Ranks}
	}
	ranks := c.View().Ranks
	out := make([][]int, len(c.topo.hosts))
	for i, h := range c.topo.hosts {
		out[i] = make([]int, len(h))
		for j, x := range h { // view indices to job ranks
			out[i][j] = ranks[x]
		}
	}
	return out
}

func clone2(in [][]int) [][]int {
	out := make([][]int, len(in))
	for i, h := range in {
		out[i] = slices.Clone(h)
	}
	return out
}
