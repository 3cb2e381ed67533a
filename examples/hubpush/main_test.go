package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gorun/gorun/internal/jobtest"
	"github.com/gorun/gorun/launcher"
	"github.com/klauspost/compress/s2"
)

func TestMain(m *testing.M) {
	os.Exit(jobtest.Main(m, func() int { return run(os.Args[1:], os.Stdout) }))
}

// refSetting is a setting of the reference: its ratio as an exact
// fraction num/den, so that k = ⌈num·n/den⌉ is computed in integers.
type refSetting struct {
	name     string // as hubpush prints it
	flag     string // as -settings takes it
	method   string // dense, topk or randk
	num, den int
	ef       bool
	codec    string // varint, raw or s2 (top-k)
}

var refSettings = []refSetting{
	{name: "dense", flag: "dense", method: "dense"},
	{name: "topk:0.01", flag: "topk:0.01", method: "topk", num: 1, den: 100, ef: true, codec: "varint"},
	{name: "topk:0.1,codec=raw", flag: "topk:0.1,codec=raw", method: "topk", num: 1, den: 10, ef: true, codec: "raw"},
	{name: "topk:0.3,noef", flag: "topk:0.3,noef", method: "topk", num: 3, den: 10, codec: "varint"},
	{name: "topk:0.07,codec=s2", flag: "topk:0.07,codec=s2", method: "topk", num: 7, den: 100, ef: true, codec: "s2"},
	{name: "randk:0.1", flag: "randk:0.1", method: "randk", num: 1, den: 10, ef: true},
	{name: "randk:0.3,noef", flag: "randk:0.3,noef", method: "randk", num: 3, den: 10},
}

// refK is ⌈num·n/den⌉ in integers, at least 1 of a non-empty partition.
func refK(n, num, den int) int {
	if n == 0 {
		return 0
	}
	return max(1, (num*n+den-1)/den)
}

// refTopK: the indices of the k largest magnitudes, ties to the lower
// index, in increasing order (by sorting, not selecting).
func refTopK(v []float64, k int) []int {
	idx := make([]int, len(v))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch x, y := math.Abs(v[a]), math.Abs(v[b]); {
		case x > y:
			return -1
		case x < y:
			return 1
		}
		return 0
	})
	idx = idx[:k]
	slices.Sort(idx)
	return idx
}

func uvarintLen(x int) int {
	n := 1
	for ; x >= 0x80; x >>= 7 {
		n++
	}
	return n
}

// refPayload is a top-k push's payload size: float32 values, then the
// indices as 4 bytes each (raw) or as uvarint deltas from 0 (varint),
// that payload compressed with S2 (s2).
func refPayload(codec string, idx []int, vals []float32) int {
	switch {
	case len(idx) == 0:
		return 0
	case codec == "raw":
		return 8 * len(idx)
	case codec == "varint":
		n, prev := 4*len(idx), 0
		for _, i := range idx {
			n += uvarintLen(i - prev)
			prev = i
		}
		return n
	}
	var raw []byte
	for _, v := range vals {
		b := math.Float32bits(v)
		raw = append(raw, byte(b), byte(b>>8), byte(b>>16), byte(b>>24))
	}
	prev := 0
	for _, i := range idx {
		d := i - prev
		prev = i
		for ; d >= 0x80; d >>= 7 {
			raw = append(raw, byte(d)|0x80)
		}
		raw = append(raw, byte(d))
	}
	return len(s2.Encode(nil, raw))
}

// refResult is what the reference expects of a setting: the push and
// pull bytes a worker a timed round (the mean), and, for top-k with error
// feedback, the residual's norm over the last gradient's.
type refResult struct {
	push, pull float64
	resid      float64 // -1: not known to the reference
}

// reference replays every worker's rounds of s naively: the same
// gradients, the residual in float64, top-k by sorting.
func reference(s refSetting, workers int, layers []int, partElems, warmup, rounds int, seed uint64) refResult {
	var push, pull int
	var residSq, gradSq float64
	for w := range workers {
		resid := make([][]float64, len(layers))
		g := make([][]float32, len(layers))
		for j, n := range layers {
			resid[j] = make([]float64, n)
			g[j] = make([]float32, n)
		}
		for r := range warmup + rounds {
			gradient(seed, w, r, g)
			timed := r >= warmup
			for j, n := range layers {
				if timed {
					pull += 4 * n
				}
				if s.ef {
					for i, v := range g[j] {
						resid[j][i] += float64(v)
					}
				}
				for off := 0; off < n; off += partElems {
					ln := min(partElems, n-off)
					bytes := 0
					switch s.method {
					case "dense":
						bytes = 4 * ln
					case "randk":
						bytes = 4 * refK(ln, s.num, s.den)
					case "topk":
						k := refK(ln, s.num, s.den)
						src := make([]float64, ln)
						for i := range src {
							if s.ef {
								src[i] = resid[j][off+i]
							} else {
								src[i] = float64(g[j][off+i])
							}
						}
						idx := refTopK(src, k)
						vals := make([]float32, len(idx))
						for x, i := range idx {
							vals[x] = float32(src[i])
							if s.ef {
								resid[j][off+i] -= float64(vals[x])
							}
						}
						bytes = refPayload(s.codec, idx, vals)
					}
					if timed {
						push += bytes
					}
				}
			}
		}
		for j := range layers {
			for i, v := range g[j] {
				gradSq += float64(v) * float64(v)
				residSq += resid[j][i] * resid[j][i]
			}
		}
	}
	per := float64(workers * rounds)
	res := refResult{push: float64(push) / per, pull: float64(pull) / per, resid: -1}
	if s.method == "topk" && s.ef {
		res.resid = math.Sqrt(residSq / gradSq)
	}
	return res
}

var rowRE = regexp.MustCompile(`(?m)^\[0\] (\S+) +(\d+) +(\d+) +(\d+) +([0-9.]+) +([0-9.]+) +(\S+) +(\S+)$`)

// TestBytesAgainstReference runs hubpush as a real job of 3 ranks, with
// one hub in rank 0 and with 2 dedicated hubs, on layers of random sizes
// (0, 1, fewer elements than ranks, primes, several partitions), and
// checks every setting's bytes against a naive replay of every worker's
// rounds, top-k's residual norm against the replay's, and the pulled
// sums against the gradients less the residuals (-check).
func TestBytesAgainstReference(t *testing.T) {
	const workers, warmup, rounds, partElems = 3, 2, 4, 64
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 1))
	primes := []int{2, 3, 5, 7, 61, 67, 127, 131, 257, 509}
	layers := []int{0, 1, 2, primes[rng.IntN(len(primes))], primes[rng.IntN(len(primes))], 3 + rng.IntN(700)}
	rng.Shuffle(len(layers), func(i, j int) { layers[i], layers[j] = layers[j], layers[i] })
	gseed := rng.Uint64() >> 1
	t.Logf("seed %d: layers %v, gradient seed %d", seed, layers, gseed)
	var flags, ls []string
	for _, s := range refSettings {
		flags = append(flags, s.flag)
	}
	for _, n := range layers {
		ls = append(ls, strconv.Itoa(n))
	}
	want := map[string]refResult{}
	for _, s := range refSettings {
		want[s.name] = reference(s, workers, layers, partElems, warmup, rounds, gseed)
	}
	args := []string{"-layers", strings.Join(ls, ","), "-settings", strings.Join(flags, ","),
		"-partition", strconv.Itoa(4 * partElems), "-warmup", strconv.Itoa(warmup), "-rounds", strconv.Itoa(rounds),
		"-block", "3", "-target", "0", "-seed", strconv.FormatUint(gseed, 10), "-check"}
	for _, hubs := range []int{0, 2} {
		t.Run(fmt.Sprintf("hubs%d", hubs), func(t *testing.T) {
			res, out := jobtest.Launch(t, workers, args, func(c *launcher.Config) { c.Strategy, c.Hubs = "hub", hubs })
			if res.ExitCode != 0 {
				t.Fatalf("exit %d:\n%s", res.ExitCode, out)
			}
			rows := rowRE.FindAllStringSubmatch(out, -1)
			if len(rows) != len(refSettings) {
				t.Fatalf("%d rows, want %d:\n%s", len(rows), len(refSettings), out)
			}
			for i, row := range rows {
				s := refSettings[i]
				w := want[s.name]
				push, _ := strconv.ParseFloat(row[5], 64)
				pull, _ := strconv.ParseFloat(row[6], 64)
				med, _ := strconv.ParseFloat(row[3], 64)
				low, _ := strconv.ParseFloat(row[4], 64)
				// Printed with one decimal: within 0.05 and a rounding.
				if row[1] != s.name || row[2] != strconv.Itoa(rounds) || math.Abs(push-w.push) > 0.051 || math.Abs(pull-w.pull) > 0.051 || low > med {
					t.Errorf("row %q: want setting %s, %d rounds, push %.2f B, pull %.2f B", row[0], s.name, rounds, w.push, w.pull)
				}
				switch resid := row[7]; {
				case !s.ef || s.method == "dense":
					if resid != "-" {
						t.Errorf("%s: resid/grad %s, want -", s.name, resid)
					}
				case w.resid >= 0:
					got, err := strconv.ParseFloat(resid, 64)
					if err != nil || math.Abs(got-w.resid) > 1e-5*w.resid {
						t.Errorf("%s: resid/grad %s, want %.6g", s.name, resid, w.resid)
					}
				default: // random-k: the draw is the library's; -check covers it
					if got, err := strconv.ParseFloat(resid, 64); err != nil || !(got > 0) {
						t.Errorf("%s: resid/grad %s, want a positive norm", s.name, resid)
					}
				}
				switch check := row[8]; {
				case s.method != "dense" && !s.ef:
					if check != "-" {
						t.Errorf("%s: check %s, want -", s.name, check)
					}
				default:
					if got, err := strconv.ParseFloat(check, 64); err != nil || got > 1 {
						t.Errorf("%s: check %s, want at most 1", s.name, check)
					}
				}
			}
			if t.Failed() {
				t.Logf("output:\n%s", out)
			}
		})
	}
}

// TestWithoutHubs: without the hub strategy the job fails, saying how to
// run it.
func TestWithoutHubs(t *testing.T) {
	res, out := jobtest.Launch(t, 2, []string{"-n", "10", "-rounds", "1", "-target", "0"}, nil)
	if res.ExitCode == 0 || !strings.Contains(out, "gorun --strategy hub") {
		t.Fatalf("exit %d:\n%s", res.ExitCode, out)
	}
}
