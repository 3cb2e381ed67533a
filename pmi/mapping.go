package pmi

import (
	"fmt"
	"strings"
)

// ProcessMapping is the value of the reserved key PMI_process_mapping for
// ranks placed on the nodes node[0], node[1], ... (node ids from 0, rank
// order): "(vector,(start,nodes,ranks),...)", where each triple says that
// nodes consecutive nodes from start hold ranks consecutive ranks each.
// MPICH repeats the vector until every rank is placed, so a periodic
// placement (round-robin) is written once: 2 hosts x 4 in blocks is
// (vector,(0,2,4)), by node (vector,(0,2,1)). It returns "" when the
// value would not fit in MaxValue bytes, or for no ranks.
func ProcessMapping(node []int) string {
	// MPICH repeats the vector: write the shortest prefix whose
	// repetition is the whole placement.
	period := len(node)
	for p := 1; p < len(node); p++ {
		ok := true
		for i := p; i < len(node) && ok; i++ {
			ok = node[i] == node[i%p]
		}
		if ok {
			period = p
			break
		}
	}
	node = node[:period]
	type triple struct{ start, nodes, ranks int }
	var ts []triple
	for i := 0; i < len(node); {
		j := i
		for j < len(node) && node[j] == node[i] {
			j++
		}
		if n := len(ts); n > 0 && ts[n-1].ranks == j-i && ts[n-1].start+ts[n-1].nodes == node[i] {
			ts[n-1].nodes++
		} else {
			ts = append(ts, triple{node[i], 1, j - i})
		}
		i = j
	}
	if len(ts) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("(vector")
	for _, t := range ts {
		fmt.Fprintf(&b, ",(%d,%d,%d)", t.start, t.nodes, t.ranks)
	}
	b.WriteString(")")
	if b.Len() > MaxValue {
		return ""
	}
	return b.String()
}

// Env is the environment of a rank whose PMI socket is descriptor fd, as
// mpiexec.hydra sets it.
func Env(fd, rank, size, localRank, localSize int) []string {
	return []string{
		fmt.Sprintf("PMI_FD=%d", fd), fmt.Sprintf("PMI_RANK=%d", rank), fmt.Sprintf("PMI_SIZE=%d", size),
		fmt.Sprintf("MPI_LOCALRANKID=%d", localRank), fmt.Sprintf("MPI_LOCALNRANKS=%d", localSize),
	}
}
