package main

import (
	"io"
	"math/big"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/ps"
)

func TestParseSettings(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string // String of each; nil: an error
	}{
		{"dense", []string{"dense"}},
		{defaultSettings, []string{"dense", "topk:0.01", "topk:0.1", "randk:0.01", "randk:0.1"}},
		{"dense,topk:0.01,codec=raw,noef,randk:0.1,seed=4", []string{"dense", "topk:0.01,noef,codec=raw", "randk:0.1,seed=4"}},
		{" topk:0.5 , codec=zstd ", []string{"topk:0.5,codec=zstd"}},
		{"topk:1", []string{"topk:1"}},
		{"", nil},
		{"noef", nil},
		{"codec=raw,topk:0.1", nil},
		{"dense,noef", nil},
		{"dense,,topk:0.1", nil},
		{"topk:0", nil},
		{"topk:1.5", nil},
		{"topk:0.1,codec=lz4", nil},
		{"topk:0.1,topk:0.1", nil},
		{"topk:0.1,randk:0.1,topk:0.1,noef,topk:0.10", nil}, // topk:0.1 twice
		{"randk:x", nil},
		{"dense,dense", nil},
	} {
		got, err := parseSettings(c.in)
		var names []string
		for _, s := range got {
			names = append(names, s.String())
		}
		if (err != nil) != (c.want == nil) || !slices.Equal(names, c.want) {
			t.Errorf("parseSettings(%q) = %q, %v; want %q", c.in, names, err, c.want)
		}
	}
	many := strings.Repeat("topk:0.5,", maxSettings) + "dense"
	if _, err := parseSettings(many); err == nil {
		t.Errorf("%d settings accepted", maxSettings+1)
	}
}

// FuzzParseSettings: parseSettings never panics, and what it accepts is
// 1 to maxSettings valid settings, told apart by their names, that read
// back the same from their names.
func FuzzParseSettings(f *testing.F) {
	for _, s := range []string{defaultSettings, "dense", "topk:0.01,codec=s2,noef,randk:0.5,seed=9", "topk:1e-3", ",", "noef", "randk:0.1,codec=raw,codec=zstd"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := parseSettings(s)
		if err != nil {
			return
		}
		if len(got) == 0 || len(got) > maxSettings {
			t.Fatalf("%q: %d settings", s, len(got))
		}
		var names []string
		for _, c := range got {
			if slices.Contains(names, c.String()) {
				t.Fatalf("%q: %s twice", s, c)
			}
			names = append(names, c.String())
		}
		again, err := parseSettings(strings.Join(names, ","))
		if err != nil || !slices.Equal(again, got) {
			t.Fatalf("%q: %v read back from %q as %v, %v", s, got, strings.Join(names, ","), again, err)
		}
		for _, c := range got {
			if c.Method != ps.Dense && !(c.Ratio > 0 && c.Ratio <= 1) {
				t.Fatalf("%q: ratio %v", s, c.Ratio)
			}
		}
	})
}

// refLayers is a naive -layers: a regular expression and big integers.
func refLayers(s string) ([]int, bool) {
	re := regexp.MustCompile(`^([0-9]+)([KMG]?)$`)
	var out []int
	total := new(big.Int)
	for _, f := range strings.Split(s, ",") {
		m := re.FindStringSubmatch(strings.TrimSpace(f))
		if m == nil {
			return nil, false
		}
		n, _ := new(big.Int).SetString(m[1], 10)
		if !n.IsUint64() || n.Uint64() >= 1<<32 { // at most 32 bits of digits
			return nil, false
		}
		n.Lsh(n, map[string]uint{"": 0, "K": 10, "M": 20, "G": 30}[m[2]])
		if total.Add(total, n); total.Cmp(big.NewInt(maxElements)) > 0 {
			return nil, false
		}
		out = append(out, int(n.Int64()))
	}
	return out, len(out) <= maxLayers
}

func TestParseLayers(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []int
	}{
		{"0", []int{0}},
		{"1,2,3", []int{1, 2, 3}},
		{"2304K, 576K,4K,10", []int{2304 << 10, 576 << 10, 4 << 10, 10}},
		{"1M,255M", []int{1 << 20, 255 << 20}},
		{"256M", []int{256 << 20}},
		{"256M,1", nil}, // over maxElements
		{"1G", nil},
		{"", nil},
		{"-1", nil},
		{"K", nil},
		{"1k", nil},
		{"1.5M", nil},
		{"1,,2", nil},
		{"0x10", nil},
		{"99999999999999999999", nil},
	} {
		got, err := parseLayers(c.in)
		if (err != nil) != (c.want == nil) || !slices.Equal(got, c.want) {
			t.Errorf("parseLayers(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
		ref, ok := refLayers(c.in)
		if ok != (c.want != nil) || !slices.Equal(ref, c.want) {
			t.Errorf("refLayers(%q) = %v, %v; the table says %v", c.in, ref, ok, c.want)
		}
	}
	if _, err := parseLayers(strings.Repeat("1,", maxLayers) + "1"); err == nil {
		t.Errorf("%d layers accepted", maxLayers+1)
	}
}

// FuzzParseLayers: parseLayers agrees with the naive reader, and never
// returns more than maxElements in all.
func FuzzParseLayers(f *testing.F) {
	for _, s := range []string{"0", "1,2,3", "2304K,576K,147K,4K", "256M", "256M,1", " 7 ,8", "1G", "4294967296", "4294967295K", "1,,2", "+5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := parseLayers(s)
		ref, ok := refLayers(s)
		if (err == nil) != ok || !slices.Equal(got, ref) {
			t.Fatalf("parseLayers(%q) = %v, %v; reference %v, %v", s, got, err, ref, ok)
		}
		total := 0
		for _, n := range got {
			if n < 0 {
				t.Fatalf("%q: %d elements", s, n)
			}
			total += n
		}
		if total > maxElements {
			t.Fatalf("%q: %d elements in all", s, total)
		}
	})
}

// TestMedian against the middle of a sorted copy, over random sizes.
func TestMedian(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 2, 3, 4, 7, 10, 13, 64, 101} {
		v := make([]float64, n)
		for i := range v {
			v[i] = float64(rng.IntN(10)) // ties too
		}
		orig := slices.Clone(v)
		got := median(v)
		want := 0.0
		if n > 0 {
			s := slices.Clone(v)
			slices.Sort(s)
			want = (s[(n-1)/2] + s[n/2]) / 2
		}
		if got != want || !slices.Equal(v, orig) {
			t.Errorf("median(%v) = %v, want %v (input kept: %v)", orig, got, want, slices.Equal(v, orig))
		}
	}
}

// TestLoopCount replays the job's loop (blockRounds, then more after
// every block) and checks that with -target 0 every setting runs exactly
// warmup+rounds rounds, and with a target at least rounds timed ones,
// stopping at the first block that reaches the target.
func TestLoopCount(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 500 {
		block, warmup, rounds, settings := 1+rng.IntN(6), rng.IntN(7), 1+rng.IntN(9), 1+rng.IntN(5)
		per := time.Duration(1+rng.IntN(5)) * time.Millisecond // each timed round, each setting
		target := time.Duration(rng.IntN(3)) * time.Duration(rng.IntN(40)) * time.Millisecond
		r, spent, blocks := 0, time.Duration(0), 0
		for {
			nb := blockRounds(r, block, warmup, rounds, target)
			if nb < 1 || nb > block {
				t.Fatalf("block of %d rounds (block %d, warmup %d, rounds %d, target %v, at %d)", nb, block, warmup, rounds, target, r)
			}
			for j := range nb {
				if r+j >= warmup {
					spent += time.Duration(settings) * per
				}
			}
			r += nb
			blocks++
			if !more(max(0, r-warmup), rounds, settings, spent, target) {
				break
			}
		}
		timed := r - warmup
		switch {
		case target == 0 && timed != rounds:
			t.Fatalf("target 0: %d timed rounds, want %d (block %d, warmup %d)", timed, rounds, block, warmup)
		case timed < rounds:
			t.Fatalf("%d timed rounds, want at least %d", timed, rounds)
		case target > 0 && spent < time.Duration(settings)*target:
			t.Fatalf("stopped at %v of %v", spent, time.Duration(settings)*target)
		case target > 0 && timed-block >= rounds && spent-time.Duration(settings*block)*per >= time.Duration(settings)*target:
			t.Fatalf("one block too many: %d timed rounds, %v spent for a target of %v", timed, spent, target)
		}
	}
}

func TestCheckTolerance(t *testing.T) {
	// Half an ulp of a float32 at a power of two, plus the float64 part.
	if got := checkTolerance(1, 0, 1, 1); got != 0x1p-24 {
		t.Errorf("checkTolerance(1, 0, ...) = %v", got)
	}
	if got := checkTolerance(-2, 8, 2, 3); got != 2*0x1p-24+16*3*0x1p-52*8 {
		t.Errorf("checkTolerance(-2, 8, 2, 3) = %v", got)
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-n", "-1"},
		{"-n", "10", "-layers", "10"},
		{"-layers", "x"},
		{"-compress", "dense", "-settings", "dense"},
		{"-compress", "dense,topk:0.1"},
		{"-compress", "topk:2"},
		{"-settings", "sparse"},
		{"-partition", "3"},
		{"-partition", "4"},
		{"-rounds", "0"},
		{"-warmup", "-1"},
		{"-block", "0"},
		{"-target", "-1s"},
		{"extra"},
		{"-nosuchflag"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
	o, err := parseFlags([]string{"-compress", "randk:0.5,noef", "-layers", "3,0", "-partition", "1KiB"}, io.Discard)
	if err != nil || len(o.settings) != 1 || o.settings[0].String() != "randk:0.5,noef" || !slices.Equal(o.layers, []int{3, 0}) || o.partition != 1024 {
		t.Errorf("parseFlags: %+v, %v", o, err)
	}
	o, err = parseFlags(nil, io.Discard)
	if err != nil || len(o.settings) != 5 || !slices.Equal(o.layers, []int{1 << 20}) || o.partition != 0 {
		t.Errorf("defaults: %+v, %v", o, err)
	}
}
