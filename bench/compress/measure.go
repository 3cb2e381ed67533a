package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"runtime"
	"time"
)

// A result is one payload through one codec.
type result struct {
	p         *payload
	codec     string
	raw, comp int           // bytes before and after compression
	tc, td    time.Duration // best time of one compress and one decompress
}

// ratio is raw/comp, the compression ratio (above 1: smaller); an empty
// block of an empty payload counts as 1.
func ratio(raw, comp int) float64 {
	if comp == 0 {
		if raw == 0 {
			return 1
		}
		return math.Inf(1)
	}
	return float64(raw) / float64(comp)
}

// mbps is the throughput in MB/s (10^6 bytes a second) of b bytes in d.
func mbps(b int, d time.Duration) float64 {
	if d <= 0 {
		return math.Inf(1)
	}
	return float64(b) / d.Seconds() / 1e6
}

// serialBreakEven is the link speed, in bit/s, below which compressing
// pays when nothing overlaps: tc + td + comp/link < raw/link, that is
// link < (raw − comp)·8 / (tc + td). It is 0 when compression saves
// nothing (comp ≥ raw), +Inf when it saves bytes in no time.
func serialBreakEven(raw, comp int, tc, td time.Duration) float64 {
	if comp >= raw {
		return 0
	}
	t := (tc + td).Seconds()
	if t <= 0 {
		return math.Inf(1)
	}
	return float64(raw-comp) * 8 / t
}

// streamBreakEven is the link speed, in bit/s, below which compressing
// pays when compression and sending overlap (a pipeline of chunks, where
// only the slower stage counts): max(tc, comp·8/link) < raw·8/link, that
// is comp < raw and link < raw·8/tc. Decompression is taken to overlap
// too (on the receiver), so it does not enter.
func streamBreakEven(raw, comp int, tc time.Duration) float64 {
	if comp >= raw {
		return 0
	}
	if tc <= 0 {
		return math.Inf(1)
	}
	return float64(raw) * 8 / tc.Seconds()
}

// saved is the share of the raw send time (raw·8/link) that compressing
// saves when nothing overlaps: 1 − (tc + td + comp·8/link) / (raw·8/link),
// negative when it costs more; 0 for an empty payload.
func saved(raw, comp int, tc, td time.Duration, link float64) float64 {
	if raw == 0 {
		return 0
	}
	return 1 - ((tc+td).Seconds()+float64(comp)*8/link)/(float64(raw)*8/link)
}

// pays reports whether compressing pays on a link of link bit/s, given
// the break-even speed: strictly below it.
func pays(breakEven, link float64) bool { return link < breakEven }

// timing says how the codecs are timed.
type timing struct {
	runs    int           // best of this many runs
	minTime time.Duration // each run repeats the call until it took this long
}

// best returns the shortest time per call of f over t.runs runs of a
// loop: the first run doubles its call count until the loop takes at
// least t.minTime, and later runs make that many calls.
func (t timing) best(ctx context.Context, f func() error) (time.Duration, error) {
	best := time.Duration(math.MaxInt64)
	iters := 1
	for r := 0; r < t.runs; r++ {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		for {
			start := time.Now()
			for range iters {
				if err := f(); err != nil {
					return 0, err
				}
			}
			el := time.Since(start)
			best = min(best, el/time.Duration(iters))
			if r > 0 || el >= t.minTime {
				break
			}
			iters *= 2
		}
	}
	return best, nil
}

// measure compresses p with c, checks that it decompresses to p's bytes,
// and times both on this goroutine.
func measure(ctx context.Context, p *payload, c codec, t timing) (result, error) {
	dst := make([]byte, 0, len(p.data)+len(p.data)/8+1024)
	comp := c.compress(dst, p.data)
	comp = append([]byte(nil), comp...)
	out := make([]byte, 0, len(p.data))
	got, err := c.decompress(out, comp)
	if err != nil {
		return result{}, fmt.Errorf("%s %s %s %s: %s: decompress: %w", p.model, p.phase, p.source, p.format, c.name, err)
	}
	if !bytes.Equal(got, p.data) {
		return result{}, fmt.Errorf("%s %s %s %s: %s: round trip gives %d different bytes", p.model, p.phase, p.source, p.format, c.name, len(got))
	}
	runtime.GC()
	tc, err := t.best(ctx, func() error { dst = c.compress(dst, p.data); return nil })
	if err != nil {
		return result{}, err
	}
	td, err := t.best(ctx, func() error { out, err = c.decompress(out, comp); return err })
	if err != nil {
		return result{}, err
	}
	return result{p: p, codec: c.name, raw: len(p.data), comp: len(comp), tc: tc, td: td}, nil
}
