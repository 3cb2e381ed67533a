package collective

import (
	"slices"

	"github.com/gorun/gorun/ring"
)

// topology is which ranks share a host, the same on every rank, and the
// groups the node-aware all-reduce runs over.
type topology struct {
	hosts [][]int // ranks of each host, hosts ordered by their lowest rank
	// tiers is this rank's host and its place across hosts, for the
	// node-aware collectives (nil unless every host has the same number
	// of ranks, at least two, and there are several hosts).
	tiers *ring.Tiers
	// byHost is every rank, host after host: a broadcast chain in this
	// order crosses between hosts at most once per host, however the
	// ranks were placed (nil when rank order already is).
	byHost *ring.Group
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

// setTopology builds the groups from the host of every rank that takes
// part (any string shared by a host's ranks; with Elastic, of the view's
// ranks in view order), which gossip brought: no message is needed.
func (c *Comm) setTopology(hostOf []string) error {
	c.topo = nil
	if len(hostOf) < 2 {
		return nil
	}
	hosts := hostsOf(hostOf)
	t := &topology{hosts: hosts}
	if order := slices.Concat(hosts...); !slices.IsSorted(order) {
		var err error
		if t.byHost, err = ring.NewGroup(c.net, order); err != nil {
			return err
		}
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
		local, err := ring.NewGroup(c.net, hosts[mine])
		if err != nil {
			return err
		}
		across, err := ring.NewGroup(c.net, cross)
		if err != nil {
			return err
		}
		t.tiers = &ring.Tiers{Local: local, Cross: across, Hosts: hosts}
	}
	c.topo = t
	return nil
}

// hierarchical says whether a reduction or gather of nbytes runs
// node-aware.
func (c *Comm) hierarchical(nbytes int) bool {
	if c.topo == nil || c.topo.tiers == nil {
		return false
	}
	return c.cfg.Algorithm == Hierarchical || c.cfg.Algorithm == Auto && nbytes > c.cfg.SmallBytes
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
