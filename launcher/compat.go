package launcher

import (
	"context"

	"github.com/gorun/gorun/launcher/agent"
)

// The agent lives in package agent; these names stay for callers that
// still reach it through package launcher (internal/jobtest).

// AgentConfig is agent.Config.
type AgentConfig = agent.Config

// RunAgent is agent.Run: the body of `gorun __agent`.
func RunAgent(ctx context.Context, cfg AgentConfig) error { return agent.Run(ctx, cfg) }

// FreePort is agent.FreePort: a port free for TCP and UDP below the
// ephemeral range, not in taken.
func FreePort(taken []int) (int, error) { return agent.FreePort(taken) }
