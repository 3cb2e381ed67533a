package collective

import "github.com/gorun/gorun/ring"

// algo is the executor a collective runs on.
type algo uint8

const (
	viaHub           algo = iota + 1 // a ParamHub round
	viaRing                          // the pipelined ring (or its halves)
	viaDirect                        // one round, every rank to every rank
	viaDoubling                      // recursive doubling
	viaHalving                       // recursive halving and doubling
	viaHierarchical                  // node-aware: on each host, across, on each host
	viaTree                          // binomial tree
	viaChain                         // a chain in rank order (Broadcast)
	viaChainByHost                   // a chain host after host (Broadcast)
	viaPairwise                      // all-to-all by pairwise exchange
	viaBruck                         // all-to-all by Bruck's log2 N rounds
	viaDissemination                 // the barrier's log2 N rounds
)

var algoName = map[algo]string{
	viaHub: "hub", viaRing: "ring", viaDirect: "direct", viaDoubling: "doubling", viaHalving: "halving",
	viaHierarchical: "hierarchical", viaTree: "tree", viaChain: "chain", viaChainByHost: "chain by host",
	viaPairwise: "pairwise", viaBruck: "bruck", viaDissemination: "dissemination",
}

func (a algo) String() string { return algoName[a] }

// situation is everything a plan depends on: the collective, its size,
// the ranks and their layout, and the Comm's settings.
type situation struct {
	kind      uint8
	bytes     int // the whole buffer (AllGather: recv; AllToAll: one block)
	ranks     int
	nodeAware bool // several hosts, the same number of ranks (2+) on each
	byHost    bool // ranks are not in host order
	hub       bool // the hub strategy is on
	alg       Algorithm
	small     int // Config.SmallBytes
}

// directMaxRanks is the most ranks Auto lets talk to every other rank in
// one collective (Direct, a broadcast from the root to all): beyond it a
// rank's connections and messages would grow with the job, so Auto takes
// recursive doubling and a binomial tree, whose partners grow as log2 N.
const directMaxRanks = 8

// bruckMaxBytes is the largest all-to-all block Auto sends by Bruck's
// algorithm (from bruckMinRanks ranks): its log2 N rounds beat N-1
// pairwise steps while each round's extra copies are small.
const (
	bruckMaxBytes = 1024
	bruckMinRanks = 8
)

// plan is the one place that chooses how a collective runs. Measured
// choices:
//   - Doubling for small all-reduces on a power of two from 4 ranks (4
//     ranks on 2 cores, 4 KiB: 55-62 us against Direct's 66-125 us; at
//     3, 5 and 6 ranks its extra fold-in rounds made it slower), and
//     beyond directMaxRanks;
//   - log2 N steps for small all-gathers and reduce-scatters beyond
//     directMaxRanks (256 ranks gathering 24 bytes each took 255 ring
//     steps);
//   - small all-gathers as the small all-reduces run: Doubling (each
//     round swaps the blocks a rank holds, twice as many each time) on a
//     power of two from 4 ranks, else Direct up to directMaxRanks, every
//     rank's block sent to every other in one round (2 ranks gathering 4
//     KiB each: 8.5 us by the ring);
//   - Halving while ring.HalvingWins.
//
// The hub strategy runs the six original collectives on the hubs; the
// others (all-to-all, gather, scatter, variable all-gather, Split and the
// point-to-point calls) have no hub round and run over the rank mesh,
// which every hub job also has, as ring would.
func plan(s situation) algo {
	small := s.alg == Auto && s.bytes <= s.small
	n := s.ranks
	switch s.kind {
	case kindBarrier:
		if s.hub {
			return viaHub
		}
		return viaDissemination
	case kindAllReduce, kindReduce, kindGroup:
		switch {
		case s.hub:
			return viaHub
		case s.nodeAware && (s.alg == Hierarchical || s.alg == Auto && s.bytes > s.small):
			return viaHierarchical
		case s.alg == Doubling || small && n >= 4 && (n&(n-1) == 0 || n > directMaxRanks):
			return viaDoubling
		case s.alg == Direct || small:
			return viaDirect
		case s.alg == Halving || s.alg == Auto && ring.HalvingWins(n, s.bytes):
			return viaHalving
		}
		return viaRing
	case kindBroadcast:
		direct := s.alg == Direct || small
		switch {
		case s.hub:
			return viaHub
		case direct && n > directMaxRanks && s.alg == Auto:
			return viaTree
		case direct:
			return viaDirect
		case s.byHost && s.alg != Ring:
			return viaChainByHost
		}
		return viaChain
	case kindAllGather, kindReduceScatter:
		switch {
		case s.hub:
			return viaHub
		case s.nodeAware && (s.alg == Hierarchical || s.alg == Auto && s.bytes > s.small):
			return viaHierarchical
		case small && (n > directMaxRanks || s.kind == kindAllGather && n >= 4 && n&(n-1) == 0):
			return viaDoubling
		case small && s.kind == kindAllGather:
			return viaDirect
		}
		return viaRing
	case kindAllToAll:
		if s.alg == Auto && s.bytes <= bruckMaxBytes && n >= bruckMinRanks {
			return viaBruck
		}
		return viaPairwise
	case kindAllToAllV:
		return viaPairwise
	case kindGather, kindScatter:
		return viaTree
	case kindAllGatherV, kindSplit:
		return viaRing
	}
	return viaRing
}

// planFor is plan for a collective of c.
func (c *Comm) planFor(kind uint8, nbytes int) algo {
	s := situation{kind: kind, bytes: nbytes, ranks: c.Size(), alg: c.cfg.Algorithm, small: c.cfg.SmallBytes}
	s.hub = c.useHub.Load() && c.members == nil
	if c.topo != nil {
		s.nodeAware, s.byHost = c.topo.nodeAware, c.topo.byHost != nil
	}
	return plan(s)
}
