package ps

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/bits"
	"strconv"
	"strings"
)

// SparseMethod chooses which elements of a partition a sparse push sends.
// The values cross the wire (msgDeclare, msgSparsePush): ONLY APPEND.
type SparseMethod uint8

const (
	// Dense, the zero value: every element is pushed.
	Dense SparseMethod = iota
	// TopK sends the k largest-magnitude elements of each partition, as
	// indices and values. Ties of magnitude go to the lower index; NaN
	// counts as larger than every number.
	TopK
	// RandomK sends k elements of each partition drawn from a seed every
	// worker and the hub derive alike (SparseConfig.Seed, the partition
	// and the push's clock), so no index travels.
	RandomK
	sparseMethodEnd
)

func (m SparseMethod) String() string {
	switch m {
	case Dense:
		return "dense"
	case TopK:
		return "top-k"
	case RandomK:
		return "random-k"
	}
	return fmt.Sprintf("method(%d)", uint8(m))
}

// SparseCodec says how a sparse push's payload is laid out. The values
// cross the wire (msgSparsePush's Kind): ONLY APPEND.
type SparseCodec uint8

const (
	// CodecDefault is DefaultSparseCodec.
	CodecDefault SparseCodec = iota
	// CodecRaw: the values, then each index as 4 bytes (top-k).
	CodecRaw
	// CodecVarint: the values, then the indices delta-encoded as uvarints
	// (top-k): about 1 to 2 bytes an index instead of 4 at ratios of 1 to
	// 10 %.
	CodecVarint
	// CodecS2: CodecVarint's payload compressed with S2.
	CodecS2
	// CodecZstd: CodecVarint's payload compressed with zstd (fastest).
	CodecZstd
	sparseCodecEnd
)

// DefaultSparseCodec is what CodecDefault means: delta-encoded indices
// and no compression of the whole payload. On top-k selections of a
// gradient (BenchmarkSparseCodec) the deltas take a varint payload to
// 0.66 of CodecRaw's at 1 % and 0.625 at 10 %; S2 and zstd (fastest)
// then save nothing (the values, float bits, are most of the payload) at
// several times the encoding cost. The figures are in docs/paramhub.md.
const DefaultSparseCodec = CodecVarint

func (c SparseCodec) String() string {
	switch c {
	case CodecDefault:
		return "default"
	case CodecRaw:
		return "raw"
	case CodecVarint:
		return "varint"
	case CodecS2:
		return "s2"
	case CodecZstd:
		return "zstd"
	}
	return fmt.Sprintf("codec(%d)", uint8(c))
}

// SparseConfig makes a key's pushes sparse (KeyConfig.Sparse). Every
// worker declares a key with the same Method, Ratio and Seed (the hubs
// refuse a declare that differs); ErrorFeedback and Codec are each
// worker's own choice.
type SparseConfig struct {
	Method SparseMethod
	// Ratio is the fraction of each partition's elements a push sends:
	// k = ⌈Ratio·n⌉ of a partition of n (SparseK), in (0, 1].
	Ratio float64
	// ErrorFeedback keeps, per key on the worker, what a push did not
	// send (the residual: gradient + previous residual − what was sent)
	// and adds it to the next push. It is off unless set: a SparseConfig
	// literal without it drops what a push does not send. ParseSparse
	// turns it on unless the flag says ",noef".
	ErrorFeedback bool
	// Codec lays out the payload (CodecDefault: DefaultSparseCodec).
	Codec SparseCodec
	// Seed is mixed into random-k's shared seed.
	Seed uint64
}

// ErrCorrupt: a hub could not decode a sparse push. The hub fails the
// partition of the key for good: the sender and every worker waiting on
// it, or asking later, get the error, which names the key, the partition
// and the worker that sent it.
var ErrCorrupt = errors.New("ps: corrupt sparse push")

func (s *SparseConfig) validate() error {
	switch {
	case s.Method >= sparseMethodEnd:
		return fmt.Errorf("unknown sparse method %d", s.Method)
	case s.Codec >= sparseCodecEnd:
		return fmt.Errorf("unknown sparse codec %d", s.Codec)
	case s.Method == Dense:
		if *s != (SparseConfig{}) {
			return errors.New("sparse settings without a sparse method")
		}
	case !(s.Ratio > 0 && s.Ratio <= 1):
		return fmt.Errorf("sparse ratio %v is not in (0, 1]", s.Ratio)
	}
	return nil
}

// ParseSparse reads a sparse configuration as a trainer's flag gives it:
// "" or "dense", or "topk:RATIO" or "randk:RATIO" (error feedback on),
// then optionally ",noef" (error feedback off), ",codec=NAME" (raw,
// varint, s2, zstd) and ",seed=N". String writes the same form.
func ParseSparse(s string) (SparseConfig, error) {
	var c SparseConfig
	if s == "" || s == "dense" {
		return c, nil
	}
	fields := strings.Split(s, ",")
	method, ratio, ok := strings.Cut(fields[0], ":")
	switch method {
	case "topk":
		c.Method = TopK
	case "randk":
		c.Method = RandomK
	default:
		return c, fmt.Errorf("ps: sparse %q: the method is topk or randk", s)
	}
	r, err := strconv.ParseFloat(ratio, 64)
	if !ok || err != nil {
		return c, fmt.Errorf("ps: sparse %q: want a ratio after %q, e.g. %s:0.01", s, method+":", method)
	}
	c.Ratio, c.ErrorFeedback = r, true
	for _, f := range fields[1:] {
		name, val, _ := strings.Cut(f, "=")
		switch {
		case f == "noef":
			c.ErrorFeedback = false
		case name == "codec":
			c.Codec = sparseCodecEnd
			for k := CodecRaw; k < sparseCodecEnd; k++ {
				if val == k.String() {
					c.Codec = k
				}
			}
			if c.Codec == sparseCodecEnd {
				return c, fmt.Errorf("ps: sparse %q: unknown codec %q", s, val)
			}
		case name == "seed":
			if c.Seed, err = strconv.ParseUint(val, 10, 64); err != nil {
				return c, fmt.Errorf("ps: sparse %q: seed: %w", s, err)
			}
		default:
			return c, fmt.Errorf("ps: sparse %q: unknown option %q", s, f)
		}
	}
	if err := c.validate(); err != nil {
		return c, fmt.Errorf("ps: sparse %q: %w", s, err)
	}
	return c, nil
}

// String is c in ParseSparse's form, which ParseSparse reads back as c.
// An invalid c (one Declare and ParseSparse refuse) is written as
// "invalid sparse config (WHY)", which does not parse.
func (c SparseConfig) String() string {
	if err := c.validate(); err != nil {
		return "invalid sparse config (" + err.Error() + ")"
	}
	if c == (SparseConfig{}) {
		return "dense"
	}
	m := map[SparseMethod]string{TopK: "topk", RandomK: "randk"}[c.Method]
	s := m + ":" + strconv.FormatFloat(c.Ratio, 'g', -1, 64)
	if !c.ErrorFeedback {
		s += ",noef"
	}
	if c.Codec != CodecDefault {
		s += ",codec=" + c.Codec.String()
	}
	if c.Seed != 0 {
		s += ",seed=" + strconv.FormatUint(c.Seed, 10)
	}
	return s
}

// sameOnHub: what every worker must declare alike (what the hub knows).
func (s SparseConfig) sameOnHub(o SparseConfig) bool {
	return s.Method == o.Method && s.Ratio == o.Ratio && s.Seed == o.Seed
}

// codec resolves CodecDefault.
func (s SparseConfig) codec() SparseCodec {
	if s.Codec == CodecDefault {
		return DefaultSparseCodec
	}
	return s.Codec
}

// SparseK is how many of a partition's n elements a sparse push sends at
// ratio: ⌈ratio·n⌉, computed in float64 with a relative slack of 1e-12
// so that a product a rounding above an integer (0.07·100) does not count
// one more; at least 1 when n > 0, at most n.
func SparseK(n int, ratio float64) int {
	if n <= 0 || !(ratio > 0) {
		return 0
	}
	k := int(math.Ceil(ratio * float64(n) * (1 - 1e-12)))
	return min(n, max(1, k))
}

// magKey orders magnitudes: the bits of |x|, larger for a larger |x|,
// NaN above +Inf, +0 and -0 alike.
func magKey(x float64) uint64 { return math.Float64bits(x) &^ (1 << 63) }

// topK returns the indices of v's k largest-magnitude elements in
// increasing order; of equal magnitudes, the lower indices. It finds the
// k-th largest magnitude by a radix selection on magKey, a byte at a
// time from the top, then takes every element above it and the first
// ones equal to it.
func topK[T Float](v []T, k int) []int32 {
	n := len(v)
	if k <= 0 || n == 0 {
		return nil
	}
	if k >= n {
		all := make([]int32, n)
		for i := range all {
			all[i] = int32(i)
		}
		return all
	}
	var prefix, mask uint64
	need := k         // still to take among the candidates, from the top
	var cand []int32  // nil: every element is a candidate
	var hist [256]int // reused every pass
	for shift := 56; shift >= 0; shift -= 8 {
		clear(hist[:])
		if cand == nil {
			for i := range v {
				if key := magKey(float64(v[i])); key&mask == prefix {
					hist[key>>shift&0xff]++
				}
			}
		} else {
			for _, i := range cand {
				hist[magKey(float64(v[i]))>>shift&0xff]++
			}
		}
		b, above := 255, 0
		for ; above+hist[b] < need; b-- {
			above += hist[b]
		}
		need -= above
		prefix |= uint64(b) << shift
		mask |= 0xff << shift
		// Narrow the candidates to the bucket once that is cheap.
		if cand != nil || hist[b] <= n/4 {
			kept := cand[:0]
			if cand == nil {
				kept = make([]int32, 0, hist[b])
				for i := range v {
					if magKey(float64(v[i]))&mask == prefix {
						kept = append(kept, int32(i))
					}
				}
			} else {
				for _, i := range cand {
					if magKey(float64(v[i]))&mask == prefix {
						kept = append(kept, i)
					}
				}
			}
			cand = kept
		}
	}
	// prefix is the k-th largest magnitude: need elements equal to it are
	// taken, the lowest indices first, with every one above it.
	out := make([]int32, 0, k)
	for i := range v {
		key := magKey(float64(v[i]))
		if key > prefix || key == prefix && need > 0 {
			if key == prefix {
				need--
			}
			out = append(out, int32(i))
		}
	}
	return out
}

// splitmix is SplitMix64: random-k's generator, spelled out here so that
// a worker and a hub built with different Go versions draw alike.
type splitmix struct{ s uint64 }

func (r *splitmix) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// below returns a uniform integer in [0, n), n > 0 (Lemire's method).
func (r *splitmix) below(n uint64) uint64 {
	thresh := -n % n
	for {
		hi, lo := bits.Mul64(r.next(), n)
		if lo >= thresh {
			return hi
		}
	}
}

// randomSeed is the seed of random-k's draw for the partition partKey
// ("key@offset") at clock: the same on every worker and on the hub.
func randomSeed(seed uint64, partKey string, clock uint32) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(partKey))
	r := splitmix{seed ^ h.Sum64()}
	r.s ^= r.next() + uint64(clock)*0xd1342543de82ef95
	return r.next()
}

// randomK returns k distinct indices of [0, n) in increasing order, drawn
// from seed by Floyd's algorithm over a bitmap of n bits.
func randomK(n, k int, seed uint64) []int32 {
	if k <= 0 || n <= 0 {
		return nil
	}
	k = min(k, n)
	set := make([]uint64, (n+63)/64)
	r := splitmix{seed}
	for j := n - k; j < n; j++ {
		t := int(r.below(uint64(j + 1)))
		if set[t/64]&(1<<(t%64)) != 0 {
			t = j
		}
		set[t/64] |= 1 << (t % 64)
	}
	out := make([]int32, 0, k)
	for w, word := range set {
		for word != 0 {
			b := bits.TrailingZeros64(word)
			out = append(out, int32(w*64+b))
			word &= word - 1
		}
	}
	return out
}

// sparseIndices is the selection of a partition: top-k of v, or
// random-k's draw for partKey at clock.
func sparseIndices[T Float](cfg SparseConfig, v []T, partKey string, clock uint32) []int32 {
	k := SparseK(len(v), cfg.Ratio)
	if cfg.Method == RandomK {
		return randomK(len(v), k, randomSeed(cfg.Seed, partKey, clock))
	}
	return topK(v, k)
}
