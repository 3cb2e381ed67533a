package launcher

import (
	"fmt"

	"github.com/gorun/gorun/launcher/proto"
	"github.com/gorun/gorun/pmi"
)

// PMI-1 in the job. Each rank gets a PMI-1 socket from its host's agent
// (package agent); when every rank of a host has entered a barrier, the
// agent sends the host's puts to the launcher (MsgPMIFence); the
// launcher's pmi.Fence waits for every host and sends all their puts back
// to every agent (MsgPMIRelease), which releases its ranks.

// PMI modes for Config.PMI.
const (
	PMIOn  = "pmi1" // PMI-1 for every rank (the default; "" means the same)
	PMIOff = "none"
)

// pmiRelay is the launcher's side: the job's fence and the agents in it.
type pmiRelay struct {
	fence  *pmi.Fence
	index  map[*agentProc]int
	agents []*agentProc
}

// newPMIRelay returns the relay for the agents that run ranks, or nil when
// the job has no PMI.
func newPMIRelay(agents []*agentProc, on bool) (*pmiRelay, error) {
	if !on {
		return nil, nil
	}
	r := &pmiRelay{index: map[*agentProc]int{}}
	for _, a := range agents {
		for _, rs := range a.ranks {
			if rs.Hub == 0 {
				r.index[a] = len(r.agents)
				r.agents = append(r.agents, a)
				break
			}
		}
	}
	cfg := pmi.DefaultFenceConfig()
	cfg.Hosts = len(r.agents)
	var err error
	r.fence, err = pmi.NewFence(cfg)
	return r, err
}

// enter records a's barrier; complete says whether it was the last, and
// then puts are every host's puts, to send to r.agents.
func (r *pmiRelay) enter(a *agentProc, m *proto.Message) (puts []pmi.KV, complete bool, err error) {
	if r == nil {
		return nil, false, fmt.Errorf("%s: PMI barrier in a job without PMI (--pmi=none)", a.name)
	}
	i, ok := r.index[a]
	if !ok {
		return nil, false, fmt.Errorf("%s: PMI barrier from a host without PMI ranks", a.name)
	}
	return r.fence.Enter(i, m.Epoch, m.Puts)
}
