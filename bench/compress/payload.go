package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/gorun/gorun/reduce"
)

// A payload is one frame's bytes as a trainer would send them: a model's
// gradient or parameter vector at one snapshot, in one format.
type payload struct {
	model  string // "mlp", "cnn"
	step   int    // the training step (from 1) of the snapshot
	phase  string // "early", "middle", "late"
	source string // "grad" or "params"
	format string // "f64", "f32", "fp16", "bf16", "top1% u32", "top1% delta", ...
	elems  int    // the vector's length
	k      int    // top-k: the elements kept (0 for a dense format)
	zeros  int    // values that are ±0 in this format (of elems, or of k)
	data   []byte
}

// The dense formats, in the order the report lists them.
var denseFormats = []string{"f64", "f32", "fp16", "bf16"}

// dense encodes v in format f: little-endian float64 or float32, or
// float32 through reduce's fp16 and bf16 wire codecs. It also returns the
// number of elements that are zero in that format.
func dense(f string, v []float64) ([]byte, int, error) {
	le := binary.LittleEndian
	zeros := 0
	switch f {
	case "f64":
		b := make([]byte, 0, 8*len(v))
		for _, x := range v {
			b = le.AppendUint64(b, math.Float64bits(x))
			if x == 0 {
				zeros++
			}
		}
		return b, zeros, nil
	case "f32", "fp16", "bf16":
	default:
		return nil, 0, fmt.Errorf("compress: unknown dense format %q", f)
	}
	f32 := make([]float32, len(v))
	for i, x := range v {
		f32[i] = float32(x)
	}
	w := map[string]reduce.Wire{"f32": reduce.WireFull, "fp16": reduce.WireFP16, "bf16": reduce.WireBF16}[f]
	b := make([]byte, len(v)*w.Size())
	if err := reduce.Encode(w, b, f32); err != nil {
		return nil, 0, err
	}
	for i := 0; i < len(b); i += w.Size() {
		// ±0 in every format: all bits but the sign are zero.
		var bits uint64
		if w.Size() == 4 {
			bits = uint64(le.Uint32(b[i:]) &^ (1 << 31))
		} else {
			bits = uint64(le.Uint16(b[i:]) &^ (1 << 15))
		}
		if bits == 0 {
			zeros++
		}
	}
	return b, zeros, nil
}

// topKCount is the k of a top-k selection of pct percent of n elements:
// ⌊n·pct/100⌋, but at least 1 when n > 0 and at most n.
func topKCount(n int, pct float64) int {
	if n <= 0 || pct <= 0 {
		return 0
	}
	k := int(float64(n) * pct / 100)
	return min(max(k, 1), n)
}

// magnitude orders elements for top-k: |x|, with NaN above everything.
func magnitude(x float32) float64 {
	if x != x {
		return math.Inf(1)
	}
	return math.Abs(float64(x))
}

// worse reports whether element (a, i) ranks below (b, j) in a top-k
// selection: a smaller magnitude, or the same magnitude at a higher index
// (ties go to the lower index).
func worse(a float64, i uint32, b float64, j uint32) bool {
	return a < b || (a == b && i > j)
}

// topK returns the indices of the k elements of v largest in magnitude
// (ties to the lower index), in increasing order. It keeps a heap of the
// best k seen so far: O(n log k). k is clamped to [0, len(v)]; v must
// have fewer than 2^32 elements.
func topK(v []float32, k int) []uint32 {
	k = min(max(k, 0), len(v))
	if k == 0 {
		return []uint32{}
	}
	// h is a min-heap under "worse": h[0] is the worst element kept.
	h := make([]uint32, 0, k)
	less := func(a, b int) bool {
		return worse(magnitude(v[h[a]]), h[a], magnitude(v[h[b]]), h[b])
	}
	down := func(i int) {
		for {
			l := 2*i + 1
			if l >= len(h) {
				return
			}
			c := l
			if r := l + 1; r < len(h) && less(r, l) {
				c = r
			}
			if !less(c, i) {
				return
			}
			h[i], h[c] = h[c], h[i]
			i = c
		}
	}
	for i := range v {
		if len(h) < k {
			h = append(h, uint32(i))
			for j := len(h) - 1; j > 0; {
				p := (j - 1) / 2
				if !less(j, p) {
					break
				}
				h[j], h[p] = h[p], h[j]
				j = p
			}
			continue
		}
		// A later index never wins a tie, so only a larger magnitude
		// displaces the worst kept.
		if magnitude(v[i]) > magnitude(v[h[0]]) {
			h[0] = uint32(i)
			down(0)
		}
	}
	slices.Sort(h)
	return h
}

// The top-k payload, this bench's own stand-in for a sparse push (package
// ps has its own wire format; this one only measures what such payloads
// compress to):
//
//	values   k float32, little-endian, in index order
//	indices  k indices in increasing order: each a 4-byte little-endian
//	         uint32 (u32), or the first and then each one's distance from
//	         the one before as minimal uvarints (delta; distances ≥ 1)
//
// The vector's length n and k travel outside the payload.

// appendTopK appends the payload of vals at idx (same length, idx
// increasing) to dst.
func appendTopK(dst []byte, vals []float32, idx []uint32, delta bool) []byte {
	le := binary.LittleEndian
	for _, x := range vals {
		dst = le.AppendUint32(dst, math.Float32bits(x))
	}
	prev := uint32(0)
	for j, i := range idx {
		switch {
		case !delta:
			dst = le.AppendUint32(dst, i)
		case j == 0:
			dst = binary.AppendUvarint(dst, uint64(i))
		default:
			dst = binary.AppendUvarint(dst, uint64(i-prev))
		}
		prev = i
	}
	return dst
}

// errTopK reports a malformed top-k payload.
var errTopK = errors.New("compress: malformed top-k payload")

// maxElems caps a top-k vector's length: indices are uint32.
const maxElems = math.MaxUint32

// decodeTopK reads a top-k payload of k elements of a vector of n. It
// allocates only after checking that p holds k values and at least k
// index bytes, and accepts exactly what appendTopK writes: indices strictly
// increasing and below n, minimal uvarints, no trailing bytes.
func decodeTopK(p []byte, n, k int, delta bool) (vals []float32, idx []uint32, err error) {
	if n < 0 || int64(n) > maxElems || k < 0 || k > n {
		return nil, nil, fmt.Errorf("%w: k %d of n %d", errTopK, k, n)
	}
	// k values of 4 bytes, then at least 1 byte (delta) or exactly 4
	// bytes (u32) an index; k ≤ len(p)/4 first, so nothing overflows.
	if k > len(p)/4 {
		return nil, nil, fmt.Errorf("%w: %d bytes for k %d", errTopK, len(p), k)
	}
	if rest := len(p) - 4*k; (delta && rest < k) || (!delta && rest != 4*k) {
		return nil, nil, fmt.Errorf("%w: %d bytes for k %d", errTopK, len(p), k)
	}
	le := binary.LittleEndian
	vals = make([]float32, k)
	for j := range vals {
		vals[j] = math.Float32frombits(le.Uint32(p[4*j:]))
	}
	q := p[4*k:]
	idx = make([]uint32, k)
	var cur uint64
	for j := range idx {
		var x uint64
		if delta {
			m := 0
			x, m = binary.Uvarint(q)
			if m <= 0 || m != uvarintLen(x) {
				return nil, nil, fmt.Errorf("%w: index %d: bad uvarint at byte %d", errTopK, j, len(p)-len(q))
			}
			q = q[m:]
			if j > 0 && x == 0 {
				return nil, nil, fmt.Errorf("%w: index %d repeats", errTopK, j)
			}
			if j > 0 {
				x += cur
				if x < cur {
					return nil, nil, fmt.Errorf("%w: index %d overflows", errTopK, j)
				}
			}
		} else {
			x = uint64(le.Uint32(q[4*j:]))
			if j > 0 && x <= cur {
				return nil, nil, fmt.Errorf("%w: index %d not above %d", errTopK, x, cur)
			}
		}
		if x >= uint64(n) {
			return nil, nil, fmt.Errorf("%w: index %d of n %d", errTopK, x, n)
		}
		cur = x
		idx[j] = uint32(x)
	}
	if delta && len(q) != 0 {
		return nil, nil, fmt.Errorf("%w: %d trailing bytes", errTopK, len(q))
	}
	return vals, idx, nil
}

// uvarintLen is the length of x's minimal uvarint.
func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

// topKPayloads returns the top-k payloads of g (as float32) for each
// percentage: one with u32 indices and one with delta indices.
func topKPayloads(g []float64, pcts []float64) ([]payload, error) {
	if int64(len(g)) > maxElems {
		return nil, fmt.Errorf("compress: %d elements: top-k indices are uint32", len(g))
	}
	f32 := make([]float32, len(g))
	for i, x := range g {
		f32[i] = float32(x)
	}
	var out []payload
	for _, pct := range pcts {
		k := topKCount(len(g), pct)
		idx := topK(f32, k)
		vals := make([]float32, len(idx))
		zeros := 0
		for j, i := range idx {
			vals[j] = f32[i]
			if vals[j] == 0 {
				zeros++
			}
		}
		for _, delta := range []bool{false, true} {
			name := "u32"
			if delta {
				name = "delta"
			}
			out = append(out, payload{
				format: fmt.Sprintf("top%s%% %s", fmtPct(pct), name),
				elems:  len(g), k: len(idx), zeros: zeros,
				data: appendTopK(nil, vals, idx, delta),
			})
		}
	}
	return out, nil
}

// fmtPct writes a percentage without trailing zeros: 1, 10, 0.5.
func fmtPct(p float64) string { return fmt.Sprintf("%g", p) }
