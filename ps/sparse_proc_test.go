package ps_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/gorun/gorun/collective"
	"github.com/gorun/gorun/internal/jobtest"
	"github.com/gorun/gorun/launcher"
	"github.com/gorun/gorun/ps"
)

// The test binary doubles as gorun's agent, as a dedicated hub and as
// the rank program, so that TestProcessesSparsePush runs a real job.
func TestMain(m *testing.M) {
	os.Exit(jobtest.Main(m, sparseRank))
}

const (
	procLen    = 5003 // cut into partitions of 1000 over the hubs
	procRounds = 20
	procPart   = 1000
)

// procGrad is rank r's float32 gradient of a round: integers, so that
// every sum is exact in any order.
func procGrad(r, round int) []float32 {
	rng := rand.New(rand.NewPCG(uint64(r), uint64(round)))
	g := make([]float32, procLen)
	for i := range g {
		g[i] = float32(rng.IntN(201) - 100)
	}
	return g
}

// sparseRank is a rank of a job whose ranks push-pull a sparse key with
// error feedback through the job's hubs: every round's value must be
// the sum of what the naive reference of every rank sends, and the
// rank's residual the reference's. It prints "SPARSE OK" and a digest of
// the final value.
func sparseRank() int {
	ctx := context.Background()
	cfg, err := collective.ConfigFromEnv(os.LookupEnv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "config:", err)
		return 2
	}
	cfg.HubPartitionBytes = 4 * procPart
	c, err := collective.New(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "join:", err)
		return 2
	}
	defer c.Close()
	hub := c.Hub()
	if hub == nil {
		fmt.Fprintln(os.Stderr, "no hub: run with --strategy hub")
		return 2
	}
	sc := ps.SparseConfig{Method: ps.TopK, Ratio: 0.05, ErrorFeedback: true, Seed: 36}
	if len(os.Args) > 1 && os.Args[1] == "randk" {
		sc.Method, sc.Codec = ps.RandomK, ps.CodecZstd
	}
	if err := hub.Declare(ctx, "w", ps.KeyConfig{Len: procLen, Sparse: sc}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	refs := make([]ps.SparseRef, c.Size())
	for r := range refs {
		refs[r] = ps.SparseRef{Cfg: sc, Key: "w", PartElems: procPart}
	}
	want := make([]float64, procLen)
	got := make([]float32, procLen)
	for round := range procRounds {
		for r := range refs {
			for i, v := range ps.RefPush(&refs[r], procGrad(r, round), round) {
				want[i] += v
			}
		}
		if err := ps.PushPull(hub, "w", procGrad(c.Rank(), round), 1, got).Wait(ctx); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		for i, v := range got {
			if float64(v) != want[i] {
				fmt.Fprintf(os.Stderr, "FAIL rank %d round %d: [%d] = %v, want %v\n", c.Rank(), round, i, v, want[i])
				return 1
			}
		}
	}
	resid := make([]float64, procLen)
	if err := hub.Residual("w", resid); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if !slices.Equal(resid, refs[c.Rank()].Resid) {
		fmt.Fprintf(os.Stderr, "FAIL rank %d: the residual is not the reference's\n", c.Rank())
		return 1
	}
	h := fnv.New64a()
	for _, v := range got {
		_, _ = fmt.Fprintf(h, "%x,", math.Float32bits(v))
	}
	fmt.Printf("SPARSE OK %v digest %x\n", sc.Method, h.Sum64())
	return 0
}

var sparseOK = regexp.MustCompile(`\[\d\] SPARSE OK (\S+) digest (\S+)`)

// TestProcessesSparsePush: 3 real rank processes push-pull a sparse key
// (top-k, and random-k compressed with zstd) with error feedback through
// 2 dedicated hub processes over TCP: every rank checks every round
// against the naive reference, and all end with the same bits.
func TestProcessesSparsePush(t *testing.T) {
	for _, method := range []string{"topk", "randk"} {
		res, out := jobtest.Launch(t, 3, []string{method}, func(c *launcher.Config) {
			c.Strategy, c.Hubs = "hub", 2
		})
		lines := sparseOK.FindAllStringSubmatch(out, -1)
		if res.ExitCode != 0 || len(lines) != 3 || strings.Count(out, " served ") != 2 {
			t.Fatalf("%s: exit %d:\n%s", method, res.ExitCode, out)
		}
		for _, l := range lines {
			if l[2] != lines[0][2] || !strings.HasSuffix(l[1], "-k") {
				t.Fatalf("%s: ranks differ:\n%s", method, out)
			}
		}
	}
}
