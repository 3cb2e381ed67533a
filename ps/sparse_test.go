package ps

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gorun/gorun/reduce"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
)

// sizes are the lengths the tests try: 0, 1, primes, and small ones
// below k.
var sizes = []int{0, 1, 2, 3, 5, 7, 11, 13, 31, 97, 101, 257, 1009}

func TestSparseK(t *testing.T) {
	for _, c := range []struct {
		n     int
		ratio float64
		want  int
	}{
		{0, 0.5, 0}, {1, 0.01, 1}, {100, 0.01, 1}, {100, 0.07, 7}, {101, 0.01, 2},
		{10, 1, 10}, {10, 0.95, 10}, {10, 0.91, 10}, {10, 0.9, 9}, {1 << 20, 0.01, 10486},
		{1 << 20, 0.1, 104858}, {3, 1e-9, 1}, {5, 0, 0},
	} {
		if got := SparseK(c.n, c.ratio); got != c.want {
			t.Errorf("SparseK(%d, %v) = %d, want %d", c.n, c.ratio, got, c.want)
		}
	}
	// Against exact rational arithmetic: ratio p/q as a float64.
	rng := rand.New(rand.NewPCG(3, 6))
	for range 2000 {
		q := 1 + rng.IntN(1000)
		p := 1 + rng.IntN(q)
		n := rng.IntN(5000)
		want := min(n, (p*n+q-1)/q)
		if n > 0 {
			want = max(1, want)
		}
		if got := SparseK(n, float64(p)/float64(q)); got != want {
			t.Fatalf("SparseK(%d, %d/%d) = %d, want %d", n, p, q, got, want)
		}
	}
}

// gradient returns n gradient-like values: normal with a heavy tail
// (one in 20 scaled by up to 100), some ties and special values if odd.
func gradient(rng *rand.Rand, n int, odd bool) []float64 {
	g := make([]float64, n)
	for i := range g {
		g[i] = rng.NormFloat64()
		if rng.IntN(20) == 0 {
			g[i] *= 1 + 99*rng.Float64()
		}
		if odd {
			switch rng.IntN(12) {
			case 0:
				g[i] = float64(rng.IntN(3) - 1) // ties, ±0
			case 1:
				g[i] = -g[max(0, i-1)] // equal magnitudes
			case 2:
				g[i] = math.Copysign(0, -1)
			}
		}
	}
	if odd && n > 3 {
		g[rng.IntN(n)] = math.Inf(1 - 2*rng.IntN(2))
		g[rng.IntN(n)] = math.NaN()
	}
	return g
}

func as32(g []float64) []float32 {
	out := make([]float32, len(g))
	for i, v := range g {
		out[i] = float32(v)
	}
	return out
}

func ints32(idx []int) []int32 {
	out := make([]int32, len(idx))
	for i, v := range idx {
		out[i] = int32(v)
	}
	return out
}

// TestTopKMatchesNaive: the radix selection picks what sorting picks,
// ties to the lower index, NaN first, for random sizes and every k.
func TestTopKMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 7))
	check := func(v []float64, k int, got []int32) {
		t.Helper()
		if want := ints32(naiveTopK(v, k)); !slices.Equal(got, want) {
			t.Fatalf("n %d k %d: got %v, want %v (of %v)", len(v), k, got, want, v)
		}
	}
	for _, n := range append(sizes, 4096, 10007) {
		for _, odd := range []bool{false, true} {
			g := gradient(rng, n, odd)
			ks := []int{0, 1, 2, n / 100, n / 10, n / 2, n - 1, n, n + 3, rng.IntN(n + 1)}
			for _, k := range ks {
				if k < 0 {
					continue
				}
				check(g, k, topK(g, k))
				g32 := as32(g)
				back := make([]float64, n)
				for i, v := range g32 {
					back[i] = float64(v)
				}
				check(back, k, topK(g32, k))
			}
		}
	}
	// All equal: the first k.
	eq := slices.Repeat([]float64{2}, 50)
	eq[7] = -2
	check(eq, 5, topK(eq, 5))
	if got := topK(eq, 5); !slices.Equal(got, []int32{0, 1, 2, 3, 4}) {
		t.Fatalf("ties: %v", got)
	}
}

// TestRandomK: k distinct indices below n in increasing order, the same
// for the same seed, spread evenly over many seeds.
func TestRandomK(t *testing.T) {
	for _, n := range sizes {
		for _, k := range []int{0, 1, n / 3, n - 1, n} {
			if k < 0 || k > n {
				continue
			}
			a := randomK(n, k, 42)
			if len(a) != k || !slices.IsSorted(a) || len(slices.Compact(slices.Clone(a))) != k || k > 0 && (a[0] < 0 || int(a[k-1]) >= n) {
				t.Fatalf("randomK(%d, %d) = %v", n, k, a)
			}
			if b := randomK(n, k, 42); !slices.Equal(a, b) {
				t.Fatalf("randomK(%d, %d) not deterministic", n, k)
			}
		}
	}
	// Every index about equally often: 3 of 10, 30 000 draws from
	// consecutive clocks, each index expected 9000 times.
	count := make([]int, 10)
	for c := range 30000 {
		for _, i := range randomK(10, 3, randomSeed(0, "w@0", uint32(c))) {
			count[i]++
		}
	}
	for i, c := range count {
		if c < 8400 || c > 9600 {
			t.Fatalf("index %d drawn %d times of 90000, want about 9000: %v", i, c, count)
		}
	}
	// The seed depends on the partition, the clock and the key's seed.
	s := randomSeed(1, "w@0", 5)
	for _, o := range []uint64{randomSeed(2, "w@0", 5), randomSeed(1, "w@64", 5), randomSeed(1, "v@0", 5), randomSeed(1, "w@0", 6)} {
		if o == s {
			t.Fatal("random-k seeds collide")
		}
	}
	// The draw is pinned: a worker and a hub of other builds draw alike.
	if got := randomK(20, 4, randomSeed(7, "layer1/w@0", 3)); !slices.Equal(got, pinnedDraw) {
		t.Fatalf("random-k's draw changed: %v, was %v", got, pinnedDraw)
	}
}

// pinnedDraw is randomK(20, 4, randomSeed(7, "layer1/w@0", 3)) as first
// computed: changing it breaks jobs whose workers and hubs differ.
var pinnedDraw = []int32{3, 6, 8, 14}

var codecs = []SparseCodec{CodecRaw, CodecVarint, CodecS2, CodecZstd}

// encodeFor encodes a selection of g as a worker does.
func encodeFor[T Float](t testing.TB, s sparseSpec, g []T, z *zstdCodec) ([]int32, []T, []byte) {
	t.Helper()
	var idx []int32
	if s.method == TopK {
		idx = topK(g, s.k)
	} else {
		idx = randomK(s.n, s.k, s.seed)
	}
	vals := make([]T, len(idx))
	for j, i := range idx {
		vals[j] = g[i]
	}
	wire := idx
	if s.method == RandomK {
		wire = nil
	}
	p, err := appendSparse(nil, s.codec, vals, wire, z)
	if err != nil {
		t.Fatal(err)
	}
	return idx, vals, p
}

func sameFloat(a, b float64) bool { return a == b || math.IsNaN(a) && math.IsNaN(b) }

// TestSparseCodecRoundTrip: every codec, method and element type decodes
// what it encodes, within maxWire; a payload cut short never decodes.
func TestSparseCodecRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	var z zstdCodec
	for _, n := range sizes {
		for _, codec := range codecs {
			for _, method := range []SparseMethod{TopK, RandomK} {
				for _, dtype := range []uint8{reduce.Float32, reduce.Float64} {
					ratio := []float64{0.01, 0.1, 0.5, 1}[rng.IntN(4)]
					s := sparseSpec{method: method, codec: codec, dtype: dtype, n: n, k: SparseK(n, ratio), seed: rng.Uint64()}
					g := gradient(rng, n, true)
					var idx []int32
					var want []float64
					var p []byte
					if dtype == reduce.Float32 {
						var vals []float32
						idx, vals, p = encodeFor(t, s, as32(g), &z)
						for _, v := range vals {
							want = append(want, float64(v))
						}
					} else {
						idx, want, p = encodeFor(t, s, g, &z)
					}
					if w, ok := s.maxWire(); !ok || len(p) > w {
						t.Fatalf("%+v: %d bytes, more than maxWire %d (%v)", s, len(p), w, ok)
					}
					gotIdx, got, err := decodeSparse(s, p, &z)
					if err != nil {
						t.Fatalf("%+v: %v", s, err)
					}
					if !slices.Equal(gotIdx, idx) || !slices.EqualFunc(got, want, sameFloat) {
						t.Fatalf("%+v: round trip changed the selection", s)
					}
					for i := range len(p) {
						if _, _, err := decodeSparse(s, p[:i], &z); err == nil {
							t.Fatalf("%+v: cut at %d of %d decoded", s, i, len(p))
						}
					}
				}
			}
		}
	}
}

// TestSparseCorrupt: each way a payload can be wrong is an error that
// says what, never a panic or a wrong selection.
func TestSparseCorrupt(t *testing.T) {
	var z zstdCodec
	le := binary.LittleEndian
	vals := func(k int) []byte { return make([]byte, 4*k) }
	raw := func(idx ...uint32) []byte {
		b := vals(len(idx))
		for _, i := range idx {
			b = le.AppendUint32(b, i)
		}
		return b
	}
	varint := func(d ...uint64) []byte {
		b := vals(len(d))
		for _, x := range d {
			b = binary.AppendUvarint(b, x)
		}
		return b
	}
	top := func(codec SparseCodec, n, k int) sparseSpec {
		return sparseSpec{method: TopK, codec: codec, dtype: reduce.Float32, n: n, k: k}
	}
	good := varint(1, 2, 3) // indices 1, 3, 6
	bomb := make([]byte, 1<<20)
	zenc, _ := z.encoder()
	for _, c := range []struct {
		name string
		s    sparseSpec
		p    []byte
		want string
	}{
		{"raw out of range", top(CodecRaw, 10, 3), raw(1, 5, 10), "out of range"},
		{"raw duplicate", top(CodecRaw, 10, 3), raw(1, 5, 5), "repeated"},
		{"raw unsorted", top(CodecRaw, 10, 3), raw(1, 5, 4), "must increase"},
		{"raw short", top(CodecRaw, 10, 3), raw(1, 5)[:10], "cannot hold"},
		{"raw long", top(CodecRaw, 10, 2), raw(1, 5, 6), "index bytes"},
		{"varint out of range", top(CodecVarint, 10, 3), varint(1, 2, 7), "out of range"},
		{"varint first out of range", top(CodecVarint, 10, 1), varint(10), "out of range"},
		{"varint duplicate", top(CodecVarint, 10, 3), varint(1, 0, 3), "repeated"},
		{"varint huge step", top(CodecVarint, 10, 2), varint(1, math.MaxUint64), "out of range"},
		{"varint too few", top(CodecVarint, 10, 3), good[:len(good)-1], "ends after 2 of 3"},
		{"varint trailing", top(CodecVarint, 10, 3), append(slices.Clone(good), 1), "after the 3 indices"},
		{"varint overlong", top(CodecVarint, 10, 1), append(vals(1), 0x81, 0x00), "not minimal"},
		{"varint overflow", top(CodecVarint, 10, 1), append(vals(1), bytes.Repeat([]byte{0xff}, 11)...), "overflows"},
		{"wrong count", top(CodecVarint, 10, 11), varint(1), "11 elements of a partition of 10"},
		{"random-k trailing", sparseSpec{method: RandomK, codec: CodecVarint, dtype: reduce.Float64, n: 10, k: 2}, make([]byte, 17), "after the 2 values"},
		{"no payload", top(CodecVarint, 10, 3), nil, "cannot hold"},
		{"payload for nothing", top(CodecVarint, 0, 0), []byte{1}, "for no element"},
		{"int element", sparseSpec{method: TopK, codec: CodecVarint, dtype: reduce.Int32, n: 10, k: 1}, varint(1), "float32 or float64"},
		{"no codec", top(CodecDefault, 10, 3), good, "unknown sparse codec"},
		{"unknown codec", top(sparseCodecEnd, 10, 3), good, "unknown sparse codec"},
		{"unknown method", sparseSpec{method: 9, codec: CodecVarint, dtype: reduce.Float32, n: 10, k: 3}, good, "unknown sparse method"},
		{"s2 garbage", top(CodecS2, 10, 3), []byte{9, 1, 2, 3}, "s2"},
		{"s2 empty", top(CodecS2, 10, 3), nil, "s2"},
		{"s2 bomb", top(CodecS2, 10, 3), s2.Encode(nil, bomb), "more than the 15"},
		{"s2 wrong inside", top(CodecS2, 10, 3), s2.Encode(nil, varint(1, 0, 3)), "repeated"},
		{"zstd garbage", top(CodecZstd, 10, 3), []byte{0x28, 0xb5, 0x2f, 0xfd, 1, 2, 3}, "zstd"},
		{"zstd not zstd", top(CodecZstd, 10, 3), good, "zstd"},
		{"zstd bomb", top(CodecZstd, 10, 3), zenc.EncodeAll(bomb, nil), "more than the 15"},
		{"zstd wrong inside", top(CodecZstd, 10, 3), zenc.EncodeAll(varint(1, 2, 70), nil), "out of range"},
	} {
		_, _, err := decodeSparse(c.s, c.p, &z)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error with %q", c.name, err, c.want)
		}
	}
	// A zstd frame that hides its size still stops at the cap.
	w, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest))
	var hidden bytes.Buffer
	w.Reset(&hidden)
	_, _ = w.Write(bomb)
	_ = w.Close()
	if _, _, err := decodeSparse(top(CodecZstd, 10, 3), hidden.Bytes(), &z); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("streamed zstd bomb: %v", err)
	}
	if idx, v, err := decodeSparse(top(CodecVarint, 10, 3), good, &z); err != nil || !slices.Equal(idx, []int32{1, 3, 6}) || len(v) != 3 {
		t.Errorf("the good payload: %v %v %v", idx, v, err)
	}
}

// FuzzDecodeSparse: the payload decoder never panics, caps what it
// expands, and whatever it accepts is a valid selection that encodes
// back to the same.
func FuzzDecodeSparse(f *testing.F) {
	rng := rand.New(rand.NewPCG(9, 9))
	var z zstdCodec
	for _, n := range []int{0, 1, 7, 64, 300} {
		for _, codec := range codecs {
			for _, method := range []SparseMethod{TopK, RandomK} {
				dtype := []uint8{reduce.Float32, reduce.Float64}[rng.IntN(2)]
				s := sparseSpec{method: method, codec: codec, dtype: dtype, n: n, k: SparseK(n, 0.2), seed: 5}
				_, _, p := encodeFor(f, s, gradient(rng, n, true), &z)
				f.Add(uint8(method), uint8(codec), dtype, uint16(n), uint16(s.k), p)
			}
		}
	}
	f.Fuzz(func(t *testing.T, method, codec, dtype uint8, n, k uint16, p []byte) {
		s := sparseSpec{method: SparseMethod(method), codec: SparseCodec(codec), dtype: dtype, n: int(n), k: int(k), seed: 5}
		idx, vals, err := decodeSparse(s, p, &z)
		if err != nil {
			return
		}
		if len(idx) != s.k || len(vals) != s.k || !slices.IsSorted(idx) || len(slices.Compact(slices.Clone(idx))) != s.k || s.k > 0 && (idx[0] < 0 || int(idx[s.k-1]) >= s.n) {
			t.Fatalf("%+v: accepted a bad selection %v", s, idx)
		}
		if s.method == RandomK && !slices.Equal(idx, randomK(s.n, s.k, s.seed)) {
			t.Fatalf("%+v: random-k's indices are not the draw", s)
		}
		// Encode again, uncompressed, and decode: the same selection.
		again := s
		again.codec = CodecVarint
		wire := idx
		if s.method == RandomK {
			wire = nil
		}
		var q []byte
		if dtype == reduce.Float32 {
			q, _ = appendSparse(nil, CodecVarint, as32(vals), wire, &z)
		} else {
			q, _ = appendSparse(nil, CodecVarint, vals, wire, &z)
		}
		idx2, vals2, err := decodeSparse(again, q, &z)
		if err != nil || !slices.Equal(idx, idx2) || !slices.EqualFunc(vals, vals2, sameFloat) {
			t.Fatalf("%+v: re-encoded selection differs: %v", s, err)
		}
		if limit, _ := s.maxPayload(); (s.codec == CodecVarint || s.codec == CodecRaw) && len(p) > limit {
			t.Fatalf("%+v: %d bytes accepted, more than the %d cap", s, len(p), limit)
		}
	})
}

func TestSparseConfigValidate(t *testing.T) {
	for _, c := range []struct {
		s  SparseConfig
		ok bool
	}{
		{SparseConfig{}, true},
		{SparseConfig{Method: TopK, Ratio: 0.01}, true},
		{SparseConfig{Method: RandomK, Ratio: 1, ErrorFeedback: true, Codec: CodecZstd, Seed: 3}, true},
		{SparseConfig{Method: TopK}, false},
		{SparseConfig{Method: TopK, Ratio: 1.5}, false},
		{SparseConfig{Method: TopK, Ratio: math.NaN()}, false},
		{SparseConfig{Method: TopK, Ratio: -0.1}, false},
		{SparseConfig{Method: 7, Ratio: 0.1}, false},
		{SparseConfig{Method: TopK, Ratio: 0.1, Codec: 9}, false},
		{SparseConfig{ErrorFeedback: true}, false},
		{SparseConfig{Ratio: 0.1}, false},
	} {
		if err := c.s.validate(); (err == nil) != c.ok {
			t.Errorf("%+v: %v", c.s, err)
		}
		// String says what is wrong with an invalid config, in a form
		// ParseSparse refuses; a valid one reads back as itself.
		text := c.s.String()
		back, err := ParseSparse(text)
		if c.ok && (err != nil || back != c.s) {
			t.Errorf("%q: %+v, %v", text, back, err)
		}
		if !c.ok && (err == nil || !strings.HasPrefix(text, "invalid sparse config (")) {
			t.Errorf("an invalid config is written %q, which parses: %v", text, err)
		}
	}
	for _, m := range []SparseMethod{Dense, TopK, RandomK, 9} {
		if m.String() == "" {
			t.Error("no name")
		}
	}
	for _, c := range append(codecs, CodecDefault, 9) {
		if c.String() == "" {
			t.Error("no name")
		}
	}
	_ = fmt.Sprint(DefaultSparseCodec)
}

// TestSparseMaxPayloadOverflow: the bounds on a payload are computed
// without overflow: against math/big over random counts up to the
// largest, they are the exact product when it fits in an int, and say
// it does not otherwise (on 32-bit ints from about 180 million elements).
func TestSparseMaxPayloadOverflow(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 386))
	maxInt := new(big.Int).SetUint64(math.MaxInt)
	for range 5000 {
		s := sparseSpec{method: []SparseMethod{TopK, RandomK}[rng.IntN(2)], codec: codecs[rng.IntN(len(codecs))],
			dtype: []uint8{reduce.Float32, reduce.Float64}[rng.IntN(2)]}
		switch rng.IntN(3) {
		case 0:
			s.n = rng.IntN(1 << 20)
		case 1:
			s.n = int(rng.Int64N(math.MaxInt))
		default:
			s.n = math.MaxInt - rng.IntN(1000)
		}
		switch rng.IntN(5) {
		case 0:
			s.k = s.n
		case 1:
			s.k = s.n / 3
		case 2:
			s.k = int(rng.Int64N(int64(s.n)/2+1)) * 2
		default:
			s.k = math.MaxInt/12 + rng.IntN(3) - 1 // the edge for 12 bytes an element
		}
		s.k = min(s.k, s.n)
		per := int64(reduce.Size(s.dtype))
		if s.method == TopK && s.codec == CodecRaw {
			per += 4
		} else if s.method == TopK {
			per += int64(len(binary.AppendUvarint(nil, uint64(s.n))))
		}
		want := new(big.Int).Mul(big.NewInt(int64(s.k)), big.NewInt(per))
		got, ok := s.maxPayload()
		if fits := want.Cmp(maxInt) <= 0; ok != fits || ok && int64(got) != want.Int64() {
			t.Fatalf("%+v: maxPayload %d %v, want %v (fits %v)", s, got, ok, want, fits)
		}
		w, wok := s.maxWire()
		if wok && (!ok || w < got) || !ok && wok {
			t.Fatalf("%+v: maxWire %d %v under maxPayload %d %v", s, w, wok, got, ok)
		}
	}
	// A partition too large to bound is refused by the decoder.
	huge := sparseSpec{method: TopK, codec: CodecVarint, dtype: reduce.Float64, n: math.MaxInt, k: math.MaxInt / 2}
	if _, _, err := decodeSparse(huge, make([]byte, 64), nil); err == nil || !strings.Contains(err.Error(), "more than this platform") {
		t.Fatalf("a partition too large to bound: %v", err)
	}
}

// TestSparseMessageRoundTrip: sparse pushes, a sparse declare and the
// error flags cross the wire unchanged; old fields keep their places.
func TestSparseMessageRoundTrip(t *testing.T) {
	for _, m := range []message{
		{Type: msgSparsePush, ID: 3, Key: "layer1/w@1048576", Clock: 9, Samples: 32, DType: reduce.Float32, Code: uint8(TopK), Kind: uint8(CodecZstd), Count: 1 << 20, N: 10486, Data: []byte{1, 2, 3}},
		{Type: msgSparsePushPull, ID: 4, Key: "b@0", DType: reduce.Float64, Code: uint8(RandomK), Kind: uint8(CodecVarint), Count: 7, N: 1, Data: make([]byte, 8)},
		{Type: msgSparsePush, ID: 5, Key: "empty@0", DType: reduce.Float64, Code: uint8(TopK), Kind: uint8(CodecRaw)},
		{Type: msgDeclare, ID: 6, Key: "w@0", Count: 100, Kind: uint8(TopK), WantOff: math.Float64bits(0.01), WantLen: 77},
		{Type: msgError, ID: 7, Code: codeBadRequest, Kind: errPushed | errCorruptFlag, Data: []byte("corrupt")},
		{Type: msgSparsePushPull, ID: 8, Key: "w@0", DType: reduce.Float32, Code: uint8(TopK), Kind: uint8(CodecVarint), Part: askPushed, Count: 4, N: 1, Data: make([]byte, 5)},
		{Type: msgPushed, ID: 8},
	} {
		got, err := decodeMessage(m.encode())
		if err != nil {
			t.Fatalf("%v: %v", m.Type, err)
		}
		if !bytes.Equal(got.Data, m.Data) {
			t.Fatalf("%v: data changed", m.Type)
		}
		got.Data, m.Data = nil, nil
		if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", m) {
			t.Fatalf("round trip: got %+v, want %+v", got, m)
		}
		if !strings.HasPrefix(m.Type.String(), "sparse") && m.Type >= msgSparsePush && m.Type != msgPushed {
			t.Fatalf("%d is named %q", m.Type, m.Type)
		}
	}
	if msgPushed.String() != "pushed" || msgPushed != 12 || askPushed != 1 {
		t.Fatal("msgPushed or askPushed changed")
	}
	if msgSparsePush != 10 || msgSparsePushPull != 11 || TopK != 1 || RandomK != 2 || CodecRaw != 1 || CodecZstd != 4 || errPushed != 1 || errCorruptFlag != 2 {
		t.Fatal("a value that crosses the wire changed")
	}
}

// TestParseSparse: a trainer's flag, both ways.
func TestParseSparse(t *testing.T) {
	for _, c := range []struct {
		in   string
		want SparseConfig
	}{
		{"", SparseConfig{}},
		{"dense", SparseConfig{}},
		{"topk:0.01", SparseConfig{Method: TopK, Ratio: 0.01, ErrorFeedback: true}},
		{"randk:0.1,noef", SparseConfig{Method: RandomK, Ratio: 0.1}},
		{"topk:1,codec=zstd,seed=7", SparseConfig{Method: TopK, Ratio: 1, ErrorFeedback: true, Codec: CodecZstd, Seed: 7}},
		{"randk:0.5,codec=raw", SparseConfig{Method: RandomK, Ratio: 0.5, ErrorFeedback: true, Codec: CodecRaw}},
	} {
		got, err := ParseSparse(c.in)
		if err != nil || got != c.want {
			t.Fatalf("%q: %+v, %v; want %+v", c.in, got, err, c.want)
		}
		if again, err := ParseSparse(got.String()); err != nil || again != got {
			t.Fatalf("%q: %q reads back as %+v, %v", c.in, got.String(), again, err)
		}
	}
	for _, bad := range []string{"topk", "topk:", "topk:x", "topk:0", "topk:2", "best:0.1", "topk:0.1,codec=lz4", "topk:0.1,seed=-1", "topk:0.1,fast", "none"} {
		if _, err := ParseSparse(bad); err == nil {
			t.Fatalf("%q parsed", bad)
		}
	}
}

// FuzzParseSparse: whatever parses is valid and reads back the same.
func FuzzParseSparse(f *testing.F) {
	for _, s := range []string{"", "dense", "topk:0.01", "randk:0.1,noef,codec=s2,seed=3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseSparse(s)
		if err != nil {
			return
		}
		if err := c.validate(); err != nil {
			t.Fatalf("%q parsed to an invalid %+v: %v", s, c, err)
		}
		if again, err := ParseSparse(c.String()); err != nil || again != c {
			t.Fatalf("%q: %q reads back as %+v, %v", s, c.String(), again, err)
		}
	})
}
