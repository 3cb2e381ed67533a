package launcher

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/gorun/gorun/launcher/agent"
	"github.com/gorun/gorun/launcher/proto"
)

// The test binary doubles as gorun's agent, for tests that run real
// agents (partition_test.go).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == proto.AgentCommandName {
		if err := agent.Run(context.Background(), agent.Config{In: os.Stdin, Out: os.Stdout, Environ: os.Environ()}); err != nil {
			fmt.Fprintln(os.Stderr, "agent:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}
