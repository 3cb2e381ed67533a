package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/reduce"
)

// sizes are the vector lengths the tests try: 0, 1, small primes, and
// a few larger ones.
var sizes = []int{0, 1, 2, 3, 5, 7, 13, 31, 97, 257, 1009, 4099}

// naiveTopK is the reference: sort every index by magnitude (NaN first),
// then index, keep k, sort by index.
func naiveTopK(v []float32, k int) []uint32 {
	mag := func(x float32) float64 {
		if math.IsNaN(float64(x)) {
			return math.Inf(1)
		}
		return math.Abs(float64(x))
	}
	idx := make([]uint32, len(v))
	for i := range idx {
		idx[i] = uint32(i)
	}
	sort.SliceStable(idx, func(a, b int) bool { return mag(v[idx[a]]) > mag(v[idx[b]]) })
	k = min(max(k, 0), len(v))
	out := slices.Clone(idx[:k])
	slices.Sort(out)
	return out
}

// vector draws n values: with ties (small integers), zeros of both signs,
// infinities and NaNs, or plain normal values.
func vector(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	ties := rng.IntN(2) == 0
	for i := range v {
		switch r := rng.IntN(100); {
		case r < 5:
			v[i] = float32(math.Copysign(0, float64(rng.IntN(2)*2-1)))
		case r < 7:
			v[i] = float32(math.Inf(rng.IntN(2)*2 - 1))
		case r < 8:
			v[i] = float32(math.NaN())
		case ties:
			v[i] = float32(rng.IntN(7) - 3)
		default:
			v[i] = float32(rng.NormFloat64())
		}
	}
	return v
}

func TestTopKAgainstNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range sizes {
		for trial := range 6 {
			v := vector(rng, n)
			ks := []int{0, 1, n / 100, n / 10, n / 2, n - 1, n, n + 1, rng.IntN(n + 2)}
			for _, k := range ks {
				got, want := topK(v, k), naiveTopK(v, k)
				if !slices.Equal(got, want) {
					t.Fatalf("n %d trial %d k %d: topK %v, want %v", n, trial, k, got, want)
				}
			}
		}
	}
}

func TestTopKCount(t *testing.T) {
	for _, n := range sizes {
		for _, pct := range []float64{0.5, 1, 10, 33.3, 100} {
			k := topKCount(n, pct)
			want := int(math.Floor(float64(n) * pct / 100))
			if n > 0 && want < 1 {
				want = 1
			}
			if k != want || k > n {
				t.Errorf("topKCount(%d, %v) = %d, want %d", n, pct, k, want)
			}
		}
	}
}

// TestTopKPayload: every payload decodes to its values and indices, and
// every shorter or longer payload is refused.
func TestTopKPayload(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range sizes {
		v := vector(rng, n)
		for _, k := range []int{0, 1, n / 10, n} {
			idx := topK(v, k)
			vals := make([]float32, len(idx))
			for j, i := range idx {
				vals[j] = v[i]
			}
			for _, delta := range []bool{false, true} {
				p := appendTopK(nil, vals, idx, delta)
				gv, gi, err := decodeTopK(p, n, len(idx), delta)
				if err != nil {
					t.Fatalf("n %d k %d delta %v: %v", n, k, delta, err)
				}
				if !slices.Equal(gi, idx) || !sameBits(gv, vals) {
					t.Fatalf("n %d k %d delta %v: decoded %v %v, want %v %v", n, k, delta, gi, gv, idx, vals)
				}
				for cut := range len(p) {
					if _, _, err := decodeTopK(p[:cut], n, len(idx), delta); err == nil {
						t.Fatalf("n %d k %d delta %v: %d of %d bytes decoded", n, k, delta, cut, len(p))
					}
				}
				if _, _, err := decodeTopK(append(slices.Clone(p), 0), n, len(idx), delta); err == nil {
					t.Fatalf("n %d k %d delta %v: a trailing byte decoded", n, k, delta)
				}
				if len(idx) > 0 {
					if _, _, err := decodeTopK(p, int(idx[len(idx)-1]), len(idx), delta); err == nil {
						t.Fatalf("n %d k %d delta %v: index %d decoded with n %d", n, k, delta, idx[len(idx)-1], idx[len(idx)-1])
					}
				}
			}
		}
	}
	// Malformed: a repeated index, decreasing u32 indices, a non-minimal
	// uvarint, k above n.
	bad := []struct {
		p     []byte
		n, k  int
		delta bool
	}{
		{appendTopK(nil, []float32{1, 2}, []uint32{3, 3}, false), 10, 2, false},
		{appendTopK(nil, []float32{1, 2}, []uint32{4, 3}, false), 10, 2, false},
		{append(appendTopK(nil, []float32{1, 2}, nil, true), 3, 0), 10, 2, true},
		{append(appendTopK(nil, []float32{1}, nil, true), 0x83, 0x00), 10, 1, true},
		{appendTopK(nil, []float32{1, 2}, []uint32{0, 1}, true), 1, 2, true},
		{nil, -1, 0, true},
	}
	for i, b := range bad {
		if _, _, err := decodeTopK(b.p, b.n, b.k, b.delta); !errors.Is(err, errTopK) {
			t.Errorf("bad payload %d: err %v, want errTopK", i, err)
		}
	}
}

func sameBits(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}

func FuzzDecodeTopK(f *testing.F) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{0, 1, 7, 300} {
		v := vector(rng, n)
		idx := topK(v, n/3+1)
		vals := make([]float32, len(idx))
		for j, i := range idx {
			vals[j] = v[i]
		}
		f.Add(appendTopK(nil, vals, idx, false), uint32(n), uint16(len(idx)), false)
		f.Add(appendTopK(nil, vals, idx, true), uint32(n), uint16(len(idx)), true)
	}
	f.Add([]byte{0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f}, uint32(math.MaxUint32), uint16(1), true)
	f.Fuzz(func(t *testing.T, p []byte, n uint32, k uint16, delta bool) {
		vals, idx, err := decodeTopK(p, int(n), int(k), delta)
		if err != nil {
			if !errors.Is(err, errTopK) {
				t.Fatalf("error %v is not errTopK", err)
			}
			return
		}
		if len(vals) != int(k) || len(idx) != int(k) {
			t.Fatalf("%d values and %d indices for k %d", len(vals), len(idx), k)
		}
		for j, i := range idx {
			if i >= n || (j > 0 && i <= idx[j-1]) {
				t.Fatalf("indices %v of n %d", idx, n)
			}
		}
		if re := appendTopK(nil, vals, idx, delta); !bytes.Equal(re, p) {
			t.Fatalf("re-encoded %x, decoded from %x", re, p)
		}
	})
}

// FuzzTopK: the bytes as float32 values, top-k against the reference,
// through the payload and back.
func FuzzTopK(f *testing.F) {
	f.Add([]byte{}, uint16(0))
	f.Add(binary.LittleEndian.AppendUint32(nil, math.Float32bits(1.5)), uint16(1))
	f.Add(bytes.Repeat([]byte{0, 0, 0x80, 0x3f, 0, 0, 0x80, 0xbf, 0, 0, 0, 0, 0, 0, 0xc0, 0x7f}, 9), uint16(5))
	f.Fuzz(func(t *testing.T, b []byte, k uint16) {
		v := make([]float32, len(b)/4)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		idx := topK(v, int(k))
		if want := naiveTopK(v, int(k)); !slices.Equal(idx, want) {
			t.Fatalf("topK %v, want %v", idx, want)
		}
		vals := make([]float32, len(idx))
		for j, i := range idx {
			vals[j] = v[i]
		}
		for _, delta := range []bool{false, true} {
			gv, gi, err := decodeTopK(appendTopK(nil, vals, idx, delta), len(v), len(idx), delta)
			if err != nil || !slices.Equal(gi, idx) || !sameBits(gv, vals) {
				t.Fatalf("delta %v: decoded %v %v (%v), want %v %v", delta, gi, gv, err, idx, vals)
			}
		}
	})
}

// TestDense: each dense format decodes to the vector (float64 exactly,
// the others as reduce rounds them), and the zeros are counted right.
func TestDense(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, n := range sizes {
		v := make([]float64, n)
		for i := range v {
			switch rng.IntN(4) {
			case 0:
				v[i] = 0
			case 1:
				v[i] = 1e-9 * rng.NormFloat64() // underflows in fp16
			default:
				v[i] = rng.NormFloat64()
			}
		}
		for _, f := range denseFormats {
			b, zeros, err := dense(f, v)
			if err != nil {
				t.Fatal(err)
			}
			var got []float64
			if f == "f64" {
				for i := 0; i < len(b); i += 8 {
					got = append(got, math.Float64frombits(binary.LittleEndian.Uint64(b[i:])))
				}
			} else {
				w := map[string]reduce.Wire{"f32": reduce.WireFull, "fp16": reduce.WireFP16, "bf16": reduce.WireBF16}[f]
				dec := make([]float32, n)
				if err := reduce.Decode(w, dec, b); err != nil {
					t.Fatalf("%s n %d: %v", f, n, err)
				}
				want := make([]float32, n)
				for i, x := range v {
					want[i] = float32(x)
				}
				if err := reduce.Round(w, want); err != nil {
					t.Fatal(err)
				}
				if !sameBits(dec, want) {
					t.Fatalf("%s n %d: decoded %v, want %v", f, n, dec, want)
				}
				for _, x := range dec {
					got = append(got, float64(x))
				}
			}
			if f == "f64" && !slices.Equal(got, v) {
				t.Fatalf("f64 n %d: decoded %v, want %v", n, got, v)
			}
			naive := 0
			for _, x := range got {
				if x == 0 {
					naive++
				}
			}
			if zeros != naive || len(got) != n {
				t.Fatalf("%s n %d: %d zeros of %d, want %d of %d", f, n, zeros, len(got), naive, n)
			}
		}
	}
	if _, _, err := dense("f8", nil); err == nil {
		t.Error("format f8 accepted")
	}
}

// TestCodecs: every codec gives back every input, random or compressible,
// and refuses to decompress past the cap it is given.
func TestCodecs(t *testing.T) {
	cs, err := newCodecs(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	defer cs.Close() // idempotent
	rng := rand.New(rand.NewPCG(9, 10))
	for _, n := range append(sizes, 1<<17+3) {
		for _, kind := range []string{"random", "runs"} {
			src := make([]byte, n)
			for i := range src {
				if kind == "random" {
					src[i] = byte(rng.Uint32())
				} else {
					src[i] = byte(i / 64 % 3)
				}
			}
			for _, c := range cs.list {
				comp := c.compress(nil, src)
				got, err := c.decompress(make([]byte, 0, n), comp)
				if err != nil || !bytes.Equal(got, src) {
					t.Fatalf("%s %s n %d: round trip gives %d bytes, err %v", c.name, kind, n, len(got), err)
				}
				if n > 0 {
					if _, err := c.decompress(make([]byte, 0, n-1), comp); err == nil {
						t.Fatalf("%s %s n %d: decompressed into a cap of %d", c.name, kind, n, n-1)
					}
				}
			}
		}
	}
	if _, err := newCodecs([]string{"lz4"}); err == nil {
		t.Error("codec lz4 accepted")
	}
}

// FuzzDecompress: a corrupt block never panics nor writes past the cap.
func FuzzDecompress(f *testing.F) {
	cs, err := newCodecs(nil)
	if err != nil {
		f.Fatal(err)
	}
	defer cs.Close()
	for i, c := range cs.list {
		f.Add(uint8(i), c.compress(nil, []byte("gradients gradients gradients 0123456789")), uint16(64))
		f.Add(uint8(i), c.compress(nil, make([]byte, 1000)), uint16(999))
	}
	f.Fuzz(func(t *testing.T, which uint8, src []byte, capacity uint16) {
		c := cs.list[int(which)%len(cs.list)]
		dst := make([]byte, 0, capacity)
		got, err := c.decompress(dst, src)
		if err == nil && len(got) > int(capacity) {
			t.Fatalf("%s: %d bytes out of a cap of %d", c.name, len(got), capacity)
		}
	})
}

// TestBreakEven: whether it pays, from the break-even speeds, agrees with
// the two sides' times computed naively, just below and above the
// break-even and at random speeds.
func TestBreakEven(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for range 2000 {
		raw := rng.IntN(1 << 26)
		comp := rng.IntN(raw + raw/8 + 2)
		tc := time.Duration(rng.Int64N(int64(time.Second)))
		td := time.Duration(rng.Int64N(int64(time.Second)))
		se, st := serialBreakEven(raw, comp, tc, td), streamBreakEven(raw, comp, tc)
		links := []float64{1e3 + rng.Float64()*1e11}
		for _, be := range []float64{se, st} {
			if be > 0 && !math.IsInf(be, 1) {
				links = append(links, be*(1-1e-9), be*(1+1e-9))
			}
		}
		for _, l := range links {
			rawT := float64(raw) * 8 / l
			serial := tc.Seconds() + td.Seconds() + float64(comp)*8/l
			stream := max(tc.Seconds(), float64(comp)*8/l)
			if sv := saved(raw, comp, tc, td, l); raw > 0 && math.Abs(sv-(rawT-serial)/rawT) > 1e-9 {
				t.Fatalf("raw %d comp %d tc %v td %v link %g: saved %v, times say %v", raw, comp, tc, td, l, sv, (rawT-serial)/rawT)
			}
			if got, want := pays(se, l), serial < rawT; got != want {
				t.Fatalf("raw %d comp %d tc %v td %v link %g: serial pays %v, times say %v (break-even %g)", raw, comp, tc, td, l, got, want, se)
			}
			if got, want := pays(st, l), stream < rawT; got != want {
				t.Fatalf("raw %d comp %d tc %v link %g: streaming pays %v, times say %v (break-even %g)", raw, comp, tc, l, got, want, st)
			}
		}
	}
	if serialBreakEven(10, 10, 1, 1) != 0 || streamBreakEven(10, 11, 1) != 0 {
		t.Error("a codec that saves nothing has a break-even speed")
	}
	if !math.IsInf(serialBreakEven(10, 5, 0, 0), 1) || !math.IsInf(streamBreakEven(10, 5, 0), 1) {
		t.Error("a saving in no time is not +Inf")
	}
	if ratio(0, 0) != 1 || ratio(10, 4) != 2.5 {
		t.Error("ratio")
	}
}

func TestTimingBest(t *testing.T) {
	calls := 0
	d, err := timing{runs: 3, minTime: 0}.best(context.Background(), func() error { calls++; return nil })
	if err != nil || d < 0 || calls != 3 {
		t.Fatalf("best: %v, %v after %d calls, want 3 calls", d, err, calls)
	}
	boom := errors.New("boom")
	if _, err := (timing{runs: 2}).best(context.Background(), func() error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("best: %v, want boom", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := (timing{runs: 2}).best(ctx, func() error { return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("best: %v, want canceled", err)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().validate(); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*Config){
		"steps":         func(c *Config) { c.Steps = 0 },
		"batch":         func(c *Config) { c.Batch = 0 },
		"lr":            func(c *Config) { c.LR = math.NaN() },
		"model":         func(c *Config) { c.Models = []string{"rnn"} },
		"model twice":   func(c *Config) { c.Models = []string{"mlp", "mlp"} },
		"no models":     func(c *Config) { c.Models = nil },
		"snapshot late": func(c *Config) { c.Snapshots = []int{1, c.Steps + 1} },
		"snapshot back": func(c *Config) { c.Snapshots = []int{5, 5} },
		"topk":          func(c *Config) { c.TopK = []float64{0} },
		"topk big":      func(c *Config) { c.TopK = []float64{101} },
		"runs":          func(c *Config) { c.Runs = 0 },
		"links":         func(c *Config) { c.Links = []float64{-1} },
		"no links":      func(c *Config) { c.Links = nil },
		"hidden":        func(c *Config) { c.MLPHidden = []int{0} },
		"cnn":           func(c *Config) { c.CNN[1] = 0 },
		"train-n":       func(c *Config) { c.TrainN = -1 },
	} {
		c := DefaultConfig()
		mod(&c)
		if err := c.validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// quickConfig is a tiny run: Fashion-MNIST's test files as training data
// when they are here, synthetic images otherwise.
func quickConfig(t *testing.T) Config {
	cfg := DefaultConfig()
	cfg.TrainImages, cfg.TrainLabels = cfg.TestImages, cfg.TestLabels
	if _, err := os.Stat(cfg.TrainImages); err != nil {
		t.Logf("no Fashion-MNIST (%v): synthetic data", err)
		cfg.Synthetic = true
	}
	cfg.TrainN, cfg.TestN = 300, 0
	cfg.MLPHidden, cfg.CNN = []int{8}, [3]int{2, 2, 4}
	cfg.Steps, cfg.Batch, cfg.Snapshots = 9, 8, []int{1, 5, 9}
	cfg.Runs, cfg.MinTime = 1, 0
	return cfg
}

// TestQuickRun runs the whole measurement on a tiny configuration and
// checks the report: every payload is what its snapshot says and comes
// back from every codec at the reported size; the TSV's figures follow
// from its byte counts and times; the Markdown tables and the verdict say
// what the TSV says.
func TestQuickRun(t *testing.T) {
	cfg := quickConfig(t)
	rep, err := run(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := newCodecs(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	kinds := 2*len(denseFormats) + 2*len(cfg.TopK)
	if want := len(cfg.Models) * len(cfg.Snapshots) * kinds * len(codecNames); len(rep.results) != want {
		t.Fatalf("%d results, want %d", len(rep.results), want)
	}
	checkPayloads(t, rep, cs)

	var md, tsv bytes.Buffer
	if err := writeMarkdown(&md, rep, header{when: time.Now(), commit: "test", machine: "test"}); err != nil {
		t.Fatal(err)
	}
	if err := writeTSV(&tsv, rep); err != nil {
		t.Fatal(err)
	}
	rows := checkTSV(t, tsv.String(), cfg.Links)
	if len(rows) != len(rep.results) {
		t.Fatalf("%d TSV rows, want %d", len(rows), len(rep.results))
	}
	checkMarkdown(t, md.String(), rows, cfg.Links)

	// The verdict and the tables follow from the TSV alone.
	results, links, err := readTSV(strings.NewReader(tsv.String()))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(links, cfg.Links) {
		t.Fatalf("links %v from the TSV, want %v", links, cfg.Links)
	}
	var body bytes.Buffer
	if err := writeBody(&body, results, links, ""); err != nil {
		t.Fatal(err)
	}
	if _, want, _ := strings.Cut(md.String(), "## Verdict"); "## Verdict"+want != body.String() {
		t.Fatalf("the body written from the TSV differs from the report's:\n%s\n---\n%s", body.String(), "## Verdict"+want)
	}
}

// TestRerender: -render keeps the text before the verdict and rewrites
// the rest from the TSV.
func TestRerender(t *testing.T) {
	cfg := quickConfig(t)
	cfg.Models = []string{"mlp"}
	rep, err := run(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	md, tsv := dir+"/r.md", dir+"/r.tsv"
	h := header{when: time.Now(), commit: "abc", machine: "test"}
	if err := writeFile(md, func(w io.Writer) error { return writeMarkdown(w, rep, h) }); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(tsv, func(w io.Writer) error { return writeTSV(w, rep) }); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(md)
	if err := rerender(tsv, md, "def"); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(md)
	note := "This section and the tables were rewritten from the run's TSV by commit def (`-render`): the figures are the run's, the wording newer.\n\n"
	want := strings.Replace(string(before), "computed from the tables below)\n\n", "computed from the tables below)\n\n"+note, 1)
	if string(after) != want {
		t.Fatalf("re-rendered report:\n%s\nwant:\n%s", after, want)
	}
	if err := rerender(tsv, dir+"/missing.md", ""); err == nil {
		t.Error("re-rendered a missing report")
	}
	if err := rerender(md, md, ""); err == nil {
		t.Error("read a Markdown report as a TSV")
	}
}

// checkPayloads checks each result's payload against its snapshot and
// round-trips it through its codec.
func checkPayloads(t *testing.T, rep *report, cs *codecs) {
	t.Helper()
	snaps := map[string]snapshot{}
	for _, m := range rep.models {
		for _, s := range m.snaps {
			snaps[fmt.Sprint(s.model, s.step)] = s
		}
	}
	byName := map[string]codec{}
	for _, c := range cs.list {
		byName[c.name] = c
	}
	for _, r := range rep.results {
		p := r.p
		s, ok := snaps[fmt.Sprint(p.model, p.step)]
		if !ok {
			t.Fatalf("%s step %d: no snapshot", p.model, p.step)
		}
		v := s.grad
		if p.source == "params" {
			v = s.params
		}
		if p.k == 0 {
			want, _, err := dense(p.format, v)
			if err != nil || !bytes.Equal(want, p.data) {
				t.Fatalf("%s step %d %s: payload is not the snapshot's (%v)", p.model, p.step, kindOf(p), err)
			}
		} else {
			f32 := make([]float32, len(v))
			for i, x := range v {
				f32[i] = float32(x)
			}
			vals, idx, err := decodeTopK(p.data, p.elems, p.k, strings.HasSuffix(p.format, "delta"))
			if err != nil {
				t.Fatalf("%s step %d %s: %v", p.model, p.step, kindOf(p), err)
			}
			want := naiveTopK(f32, p.k)
			if !slices.Equal(idx, want) {
				t.Fatalf("%s step %d %s: indices %v, want %v", p.model, p.step, kindOf(p), idx, want)
			}
			for j, i := range idx {
				if math.Float32bits(vals[j]) != math.Float32bits(f32[i]) {
					t.Fatalf("%s step %d %s: value %d is %v, want %v", p.model, p.step, kindOf(p), i, vals[j], f32[i])
				}
			}
		}
		c := byName[r.codec]
		comp := c.compress(nil, p.data)
		got, err := c.decompress(make([]byte, 0, len(p.data)), comp)
		if err != nil || !bytes.Equal(got, p.data) {
			t.Fatalf("%s step %d %s %s: round trip failed (%v)", p.model, p.step, kindOf(p), r.codec, err)
		}
		if len(comp) != r.comp || len(p.data) != r.raw {
			t.Fatalf("%s step %d %s %s: %d -> %d bytes, reported %d -> %d", p.model, p.step, kindOf(p), r.codec, len(p.data), len(comp), r.raw, r.comp)
		}
	}
}

// tsvRow is a TSV row rebuilt as a result.
type tsvRow struct {
	r      result
	fields map[string]string
}

// checkTSV parses the TSV and checks every derived column against its
// recomputation from the row's byte counts and times.
func checkTSV(t *testing.T, text string, links []float64) []tsvRow {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Scan()
	head := strings.Split(sc.Text(), "\t")
	if !slices.Equal(head, tsvHeader(links)) {
		t.Fatalf("TSV header %v", head)
	}
	atoi := func(s string) int {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	near := func(name, s string, want float64) {
		got, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatalf("%s %q: %v", name, s, err)
		}
		if got != want && !(math.Abs(got-want) <= 1e-5*math.Abs(want)) {
			t.Fatalf("%s is %v, recomputed %v", name, got, want)
		}
	}
	var rows []tsvRow
	for sc.Scan() {
		cells := strings.Split(sc.Text(), "\t")
		if len(cells) != len(head) {
			t.Fatalf("TSV row of %d cells: %q", len(cells), sc.Text())
		}
		f := map[string]string{}
		for i, h := range head {
			f[h] = cells[i]
		}
		p := &payload{model: f["model"], step: atoi(f["step"]), phase: f["phase"], source: f["source"], format: f["format"],
			elems: atoi(f["elems"]), k: atoi(f["k"]), zeros: atoi(f["zeros"])}
		r := result{p: p, codec: f["codec"], raw: atoi(f["raw_bytes"]), comp: atoi(f["comp_bytes"]),
			tc: time.Duration(atoi(f["compress_ns"])), td: time.Duration(atoi(f["decompress_ns"]))}
		// The recomputation, written out rather than through derive.
		near("ratio", f["ratio"], float64(r.raw)/float64(r.comp))
		near("compress_MBps", f["compress_MBps"], float64(r.raw)/float64(r.tc.Nanoseconds())*1e3)
		near("decompress_MBps", f["decompress_MBps"], float64(r.raw)/float64(r.td.Nanoseconds())*1e3)
		serial, stream := 0.0, 0.0
		if r.comp < r.raw {
			serial = float64(r.raw-r.comp) * 8 / float64((r.tc + r.td).Nanoseconds()) * 1e3
			stream = float64(r.raw) * 8 / float64(r.tc.Nanoseconds()) * 1e3
		}
		near("serial_breakeven_Mbps", f["serial_breakeven_Mbps"], serial)
		near("stream_breakeven_Mbps", f["stream_breakeven_Mbps"], stream)
		for _, l := range links {
			rawT := float64(r.raw) * 8 / l
			sp := r.tc.Seconds()+r.td.Seconds()+float64(r.comp)*8/l < rawT
			stp := max(r.tc.Seconds(), float64(r.comp)*8/l) < rawT
			if f["serial_pays_"+shortLink(l)] != strconv.FormatBool(sp) || f["stream_pays_"+shortLink(l)] != strconv.FormatBool(stp) {
				t.Fatalf("%v at %s: pays %s/%s, times say %v/%v", f, linkName(l), f["serial_pays_"+shortLink(l)], f["stream_pays_"+shortLink(l)], sp, stp)
			}
		}
		if f["roundtrip"] != "ok" {
			t.Fatalf("round trip %q", f["roundtrip"])
		}
		rows = append(rows, tsvRow{r, f})
	}
	return rows
}

// checkMarkdown checks the Markdown's tables and verdict against the
// TSV's rows.
func checkMarkdown(t *testing.T, md string, rows []tsvRow, links []float64) {
	t.Helper()
	section := func(title string) []string {
		_, rest, ok := strings.Cut(md, "\n## "+title)
		if !ok {
			t.Fatalf("no section %q", title)
		}
		rest, _, _ = strings.Cut(rest, "\n## ")
		var lines []string
		for _, l := range strings.Split(rest, "\n") {
			if strings.HasPrefix(l, "| ") && !strings.HasPrefix(l, "| model |") && !strings.HasPrefix(l, "| payload |") {
				lines = append(lines, l)
			}
		}
		return lines
	}
	cells := func(line string) []string {
		s := strings.Split(strings.Trim(line, "| "), " | ")
		for i := range s {
			s[i] = strings.TrimSpace(s[i])
		}
		return s
	}
	// Every payload: one row per TSV row, in order.
	every := section("Every payload")
	if len(every) != len(rows) {
		t.Fatalf("%d rows in Every payload, %d in the TSV", len(every), len(rows))
	}
	for i, line := range every {
		got, want := cells(line), markdownRow(rows[i].r, links)
		if !slices.Equal(got, want) {
			t.Fatalf("row %d: %q, the TSV gives %q", i, got, want)
		}
		if got[6] != rows[i].fields["raw_bytes"] || got[8] != rows[i].fields["comp_bytes"] {
			t.Fatalf("row %d: bytes %s -> %s, TSV %s -> %s", i, got[6], got[8], rows[i].fields["raw_bytes"], rows[i].fields["comp_bytes"])
		}
	}
	// Summary: the a/n counts per kind and codec.
	type key struct{ kind, codec string }
	count := map[key][]int{}
	total := map[key]int{}
	for _, r := range rows {
		k := key{kindOf(r.r.p), r.r.codec}
		if count[k] == nil {
			count[k] = make([]int, 2*len(links))
		}
		total[k]++
		for li, l := range links {
			if r.fields["serial_pays_"+shortLink(l)] == "true" {
				count[k][li]++
			}
			if r.fields["stream_pays_"+shortLink(l)] == "true" {
				count[k][len(links)+li]++
			}
		}
	}
	summary := section("Summary")
	if len(summary) != len(count) {
		t.Fatalf("%d summary rows, want %d", len(summary), len(count))
	}
	for _, line := range summary {
		c := cells(line)
		k := key{c[0], c[1]}
		var got []string
		got = append(got, c[6:6+len(links)]...)
		got = append(got, c[7+len(links):7+2*len(links)]...)
		for i, g := range got {
			if want := fmt.Sprintf("%d/%d", count[k][i], total[k]); g != want {
				t.Fatalf("summary %v column %d: %s, the TSV gives %s", k, i, g, want)
			}
		}
	}
	// Verdict: "at L in a of n" or "never at L", some codec per payload.
	paying := map[string][]map[string]bool{} // kind -> link -> payload seen paying
	for _, r := range rows {
		kind := kindOf(r.r.p)
		if paying[kind] == nil {
			paying[kind] = make([]map[string]bool, len(links))
			for i := range links {
				paying[kind][i] = map[string]bool{}
			}
		}
		id := fmt.Sprint(r.r.p.model, r.r.p.step)
		for li, l := range links {
			if r.fields["serial_pays_"+shortLink(l)] == "true" {
				paying[kind][li][id] = true
			}
		}
	}
	_, verdict, _ := strings.Cut(md, "## Verdict")
	verdict, _, _ = strings.Cut(verdict, "\n## ")
	seen := 0
	for _, line := range strings.Split(verdict, "\n") {
		m := regexp.MustCompile("^- \\*\\*.*\\*\\* \\(`([^`]+)`\\).* Any codec: (.*?) \\(of (\\d+) payloads").FindStringSubmatch(line)
		if m == nil {
			continue
		}
		seen++
		kind, text := m[1], m[2]
		none := true
		for li := range links {
			none = none && len(paying[kind][li]) == 0
		}
		for li, l := range links {
			n := len(paying[kind][li])
			want := fmt.Sprintf("at %s in %d of %s", linkName(l), n, m[3])
			switch {
			case none:
				want = "never pays at any speed measured"
			case n == 0:
				want = "never at " + linkName(l)
			}
			if !strings.Contains(text, want) {
				t.Fatalf("verdict on %s: %q, the TSV gives %q", kind, text, want)
			}
		}
	}
	if seen != len(paying) {
		t.Fatalf("%d verdict lines, %d kinds", seen, len(paying))
	}
}

// FuzzReadTSV: a malformed TSV is an error, never a panic, and whatever
// reads renders.
func FuzzReadTSV(f *testing.F) {
	h := strings.Join(tsvHeader([]float64{100e6, 1e9}), "\t")
	row := "mlp\t1\tearly\tgrad\tf32\t10\t0\t2\ts2\t40\t30\t1.33333\t1000\t500\t40\t80\t53.3333\t320\ttrue\tfalse\ttrue\tfalse\tok"
	f.Add(h + "\n" + row + "\n")
	f.Add(h + "\n" + strings.Replace(row, "\t30\t", "\t50\t", 1) + "\n" + row + "\n")
	f.Add(h + "\n")
	f.Add("model\n")
	f.Fuzz(func(t *testing.T, text string) {
		results, links, err := readTSV(strings.NewReader(text))
		if err != nil {
			return
		}
		if err := writeBody(io.Discard, results, links, ""); err != nil {
			t.Fatal(err)
		}
	})
}
