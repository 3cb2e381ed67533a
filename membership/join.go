package membership

import (
	"math"
	"math/rand/v2"
	"net"
	"slices"
	"time"
)

// A join's pacing: a failed one is retried after retryInterval (or as
// long as it took, if longer: the seed is slow or far), give or take
// half; once joined, a rank repairs once every repairAfter while ranks
// are missing.
const (
	retryInterval = 200 * time.Millisecond
	repairAfter   = time.Second
)

// repairEvery is how often a joined rank repairs while ranks are
// missing: 4 ms a rank of the job, from retryInterval up to repairAfter.
// Each repair carries the whole member list, so a small job repairs
// often (a tree of 8 ranks over 4 hosts knew itself ~1 s late when every
// level waited a second) and a large one no more than once a second.
func repairEvery(size int) time.Duration {
	return min(max(time.Duration(size)*4*time.Millisecond, retryInterval), repairAfter)
}

// attempt is where WaitFor stands when it picks a join's seeds.
type attempt struct {
	n      int  // joins tried so far
	joined bool // one of them succeeded
	rejoin bool // a restarted rank's WaitFor, not the job's start
	// idle is how long since a rank last appeared (or the wait began),
	// sinceRepair since the last repair began (or the wait began).
	idle, sinceRepair time.Duration
}

// seedsFor picks the seeds of WaitFor's next join, and says whether it is
// a repair. With a seed per rank:
//
//   - At a job's start, a rank joins its parent in the join tree (see
//     joinTree), every fifth try with one other rank picked at random
//     (the parent may be gone or swamped), until a join succeeds. The
//     root, rank 0, joins no one: the others join it.
//   - A restarted rank (rejoin) joins the first other rank of the view,
//     rank 0 too (else a restarted rank 0 joined no one, and no one knew
//     its new address: it never came back), and its parent in a binary
//     tree over the ranks if that is in the view; every fifth try also
//     two others of the view (the first may be gone).
//   - Once joined (the root: from the start), gossip brings the rest,
//     and while ranks are missing a rank repairs once every repairAfter:
//     it exchanges its whole state with a rank it knows, picked at random
//     (what any other has heard of spreads in a few such rounds, where
//     gossip alone, a message at a time, takes many times as long on a
//     loaded host; and each rank is asked about once a round, whatever
//     the job's size). When it knows no one, or, with missingChance, when
//     no rank has appeared for a while, it also joins a rank still
//     missing. Exchanges with known ranks cannot bring a rank that they
//     hold suspect or dead (memberlist ignores a verdict on a node it
//     does not know): one that was swamped or starved and missed its
//     probes, as rank 0 did at 256 ranks, stays missing until it refutes
//     the verdict, or it is joined directly; and groups that formed apart
//     only merge so.
//
// A rank never joins itself. Without a seed per rank, every seed is
// tried each time.
func (m *Member) seedsFor(ranks []int, a attempt) (seeds []string, repair bool) {
	r := m.cfg.Rank
	if len(m.cfg.Seeds) != m.cfg.Size {
		return m.cfg.Seeds, false
	}
	var pick []int
	switch parent := m.joinParent(); {
	case !a.joined && a.rejoin:
		first := ranks[0]
		for _, q := range ranks {
			if q != r {
				first = q
				break
			}
		}
		pick = []int{first}
		if p := (r - 1) / 2; slices.Contains(ranks, p) {
			pick = append(pick, p)
		}
		if a.n > 0 && a.n%5 == 0 {
			pick = append(pick, pickOthers(ranks, 2, append(slices.Clone(pick), r)...)...)
		}
	case !a.joined && parent >= 0:
		pick = []int{parent}
		if a.n > 0 && a.n%5 == 0 {
			pick = append(pick, pickOthers(ranks, 1, parent, r)...)
		}
	case a.sinceRepair >= repairEvery(m.cfg.Size):
		known, missing := m.split(ranks)
		pick = pickOthers(known, 1, r)
		if len(pick) == 0 || rand.Float64() < missingChance(a.idle, len(known)) {
			pick = append(pick, pickOthers(missing, 1, r)...)
		}
		repair = true
	}
	for _, p := range pick {
		if p != r && !slices.Contains(seeds, m.cfg.Seeds[p]) {
			seeds = append(seeds, m.cfg.Seeds[p])
		}
	}
	return seeds, repair
}

// missingChance is the chance that a repair also joins a rank still
// missing, once no rank has appeared for idle, of a rank that knows known
// ranks: none for 3 repairAfter, then 2/known, doubling every 2
// repairAfter up to 1 (at 256 ranks, 17 s after the last appearance). A
// rank missing from many is so joined by about two of them a round at
// first, more as the stall lasts, not by all of them at once: near the
// end of a large start, or when one rank starts late or was swamped,
// every rank misses the same few, and all joining them at once would
// swamp them as it swamped rank 0 when every rank joined it.
func missingChance(idle time.Duration, known int) float64 {
	if idle < 3*repairAfter {
		return 0
	}
	doublings := float64(idle-3*repairAfter) / float64(2*repairAfter)
	return min(1, 2/float64(max(known, 1))*math.Exp2(doublings))
}

// pickOthers picks up to k of ranks at random, none of not.
func pickOthers(ranks []int, k int, not ...int) []int {
	others := slices.DeleteFunc(slices.Clone(ranks), func(q int) bool { return slices.Contains(not, q) })
	rand.Shuffle(len(others), func(i, j int) { others[i], others[j] = others[j], others[i] })
	return others[:min(k, len(others))]
}

// joinParent is this rank's parent in the start's join tree, -1 for the
// root or without a seed per rank.
func (m *Member) joinParent() int {
	if len(m.cfg.Seeds) != m.cfg.Size {
		return -1
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.tree == nil {
		m.tree = joinTree(m.cfg.Seeds)
	}
	return m.tree[m.cfg.Rank]
}

// joinTree is the tree the ranks join along at a job's start, from every
// rank's gossip address: parent[r] is the rank that rank r joins, -1 for
// the root (rank 0). The ranks are grouped by their address's host,
// hosts numbered in the order of their first rank. On a host, the ranks
// form a binary tree under the host's first rank (its j-th rank joins its
// (j-1)/2-th), and the hosts' first ranks form one across the hosts (the
// i-th host's joins the (i-1)/2-th host's). So a rank is the parent of
// at most four (two on its host, two hosts' first ranks), whatever the
// job's size, where every rank used to join rank 0; most joins stay on
// their host, and H-1 cross hosts.
func joinTree(seeds []string) []int {
	parent := make([]int, len(seeds))
	index := map[string]int{}
	var hosts [][]int // each host's ranks, in rank order
	for r, s := range seeds {
		h := s
		if host, _, err := net.SplitHostPort(s); err == nil {
			h = host
		}
		i, ok := index[h]
		if !ok {
			i = len(hosts)
			index[h] = i
			hosts = append(hosts, nil)
		}
		hosts[i] = append(hosts[i], r)
	}
	for i, rs := range hosts {
		for j, r := range rs {
			switch {
			case j > 0:
				parent[r] = rs[(j-1)/2]
			case i > 0:
				parent[r] = hosts[(i-1)/2][0]
			default:
				parent[r] = -1
			}
		}
	}
	return parent
}
