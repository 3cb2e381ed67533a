package ps

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/gorun/gorun/reduce"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
)

// A sparse push's payload (the data of msgSparsePush and
// msgSparsePushPull) holds one partition's selection:
//
//	values   k elements of the push's type (DType), little-endian
//	indices  top-k only: k indices in increasing order, each 4 bytes
//	         little-endian (CodecRaw), or the first and then each one's
//	         distance from the one before as minimal uvarints
//	         (CodecVarint; a distance is at least 1)
//
// CodecS2 and CodecZstd compress CodecVarint's payload whole. Random-k
// sends the values alone: the hub draws the indices as the worker did.
// The header carries the partition's length n (Count), k (N), the method
// (Code) and the codec (Kind); a push of k = 0 has an empty payload.

// sparseSpec is what a hub knows of a sparse push before it reads the
// payload: from the header, checked against the key's declaration.
type sparseSpec struct {
	method SparseMethod
	codec  SparseCodec
	dtype  uint8
	n, k   int
	seed   uint64 // random-k: randomSeed of the partition and clock
}

// uvarintLen is the length of x's uvarint.
func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

// maxPayload is the most bytes a well-formed uncompressed payload of s
// can have: the cap on what a compressed one may expand to. It is
// computed in uint64; false if it does not fit in an int (a partition
// too large for this platform: 32-bit ints).
func (s sparseSpec) maxPayload() (int, bool) {
	per := uint64(reduce.Size(s.dtype)) // bytes an element sent
	if s.method == TopK {
		switch s.codec {
		case CodecRaw:
			per += 4
		default:
			per += uint64(uvarintLen(uint64(max(s.n, 0))))
		}
	}
	k := uint64(max(s.k, 0))
	if k != 0 && per > uint64(math.MaxInt)/k {
		return 0, false
	}
	return int(k * per), true
}

// maxWire bounds the encoded payload of s (compression can add a little
// to what it cannot shrink): what must fit in a frame. False if the
// bound does not fit in an int.
func (s sparseSpec) maxWire() (int, bool) {
	p, ok := s.maxPayload()
	if !ok {
		return 0, false
	}
	if s.codec == CodecS2 || s.codec == CodecZstd {
		e := s2.MaxEncodedLen(p) // -1 if too large
		if e < 0 || e > math.MaxInt-p/64-1024 {
			return 0, false
		}
		p = e + p/64 + 1024 // zstd's bound is smaller
	}
	return p, true
}

// zstdCodec holds a zstd encoder and decoder, made when first needed.
// Both are safe for concurrent use and start no goroutine.
type zstdCodec struct {
	encOnce, decOnce sync.Once
	enc              *zstd.Encoder
	dec              *zstd.Decoder
	encErr, decErr   error
}

func (z *zstdCodec) encoder() (*zstd.Encoder, error) {
	z.encOnce.Do(func() {
		z.enc, z.encErr = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	})
	return z.enc, z.encErr
}

func (z *zstdCodec) decoder() (*zstd.Decoder, error) {
	z.decOnce.Do(func() {
		// DecodeAll writes no more than its destination's capacity.
		z.dec, z.decErr = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecodeAllCapLimit(true), zstd.WithDecoderMaxWindow(64<<20))
	})
	return z.dec, z.decErr
}

// appendSparse appends the payload of a selection to dst: vals are the
// values at idx (idx is nil for random-k). Its only error is zstd's
// encoder failing to start.
func appendSparse[T Float](dst []byte, codec SparseCodec, vals []T, idx []int32, z *zstdCodec) ([]byte, error) {
	var enc *zstd.Encoder
	if codec == CodecZstd {
		var err error
		if enc, err = z.encoder(); err != nil {
			return nil, err
		}
	}
	return encodeSparse(dst, codec, vals, idx, enc), nil
}

// encodeSparse is appendSparse with zstd's encoder at hand (enc, used
// for CodecZstd only): it cannot fail.
func encodeSparse[T Float](dst []byte, codec SparseCodec, vals []T, idx []int32, enc *zstd.Encoder) []byte {
	if len(vals) == 0 {
		return dst
	}
	raw := dst
	if codec == CodecS2 || codec == CodecZstd {
		raw = nil
	}
	le := binary.LittleEndian
	switch vs := any(vals).(type) {
	case []float32:
		for _, v := range vs {
			raw = le.AppendUint32(raw, math.Float32bits(v))
		}
	case []float64:
		for _, v := range vs {
			raw = le.AppendUint64(raw, math.Float64bits(v))
		}
	}
	if codec == CodecRaw {
		for _, i := range idx {
			raw = le.AppendUint32(raw, uint32(i))
		}
		return raw
	}
	prev := int32(0)
	for j, i := range idx {
		if j == 0 {
			raw = binary.AppendUvarint(raw, uint64(i))
		} else {
			raw = binary.AppendUvarint(raw, uint64(i-prev))
		}
		prev = i
	}
	switch codec {
	case CodecS2:
		return append(dst, s2.Encode(nil, raw)...)
	case CodecZstd:
		return enc.EncodeAll(raw, dst)
	}
	return raw
}

// decodeSparse reads a payload of spec s: the indices (in increasing
// order, each below n) and their values. It checks everything: the
// lengths, every index, and what a compressed payload expands to, which
// is capped by the partition's length before anything is allocated.
func decodeSparse(s sparseSpec, p []byte, z *zstdCodec) (idx []int32, vals []float64, err error) {
	if err := s.check(); err != nil {
		return nil, nil, err
	}
	if s.k == 0 {
		if len(p) != 0 {
			return nil, nil, fmt.Errorf("%d payload bytes for no element", len(p))
		}
		return nil, nil, nil
	}
	limit, ok := s.maxPayload()
	if !ok {
		return nil, nil, fmt.Errorf("%d elements of a partition of %d are more than this platform can hold", s.k, s.n)
	}
	if p, err = expandSparse(s, p, limit, z); err != nil {
		return nil, nil, err
	}
	vals, rest, err := sparseValues(s, p)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case s.method == RandomK:
		if len(rest) != 0 {
			return nil, nil, fmt.Errorf("%d bytes after the %d values of a random-k push", len(rest), s.k)
		}
		return randomK(s.n, s.k, s.seed), vals, nil
	case s.codec == CodecRaw:
		idx, err = rawIndices(s, rest)
	default:
		idx, err = varintIndices(s, rest)
	}
	if err != nil {
		return nil, nil, err
	}
	return idx, vals, nil
}

// check checks a spec's element type, method, codec and counts, before
// decodeSparse looks at the payload.
func (s sparseSpec) check() error {
	switch {
	case s.dtype != reduce.Float32 && s.dtype != reduce.Float64:
		return fmt.Errorf("element type %s: keys hold float32 or float64", reduce.DTypeName(s.dtype))
	case s.method != TopK && s.method != RandomK:
		return fmt.Errorf("unknown sparse method %d", s.method)
	case s.codec == CodecDefault || s.codec >= sparseCodecEnd:
		return fmt.Errorf("unknown sparse codec %d", s.codec)
	case s.n < 0 || s.k < 0 || s.k > s.n:
		return fmt.Errorf("%d elements of a partition of %d", s.k, s.n)
	}
	return nil
}

// expandSparse decompresses a CodecS2 or CodecZstd payload, refusing one
// that would expand to more than limit bytes before it allocates; other
// codecs' payloads are returned as they are.
func expandSparse(s sparseSpec, p []byte, limit int, z *zstdCodec) ([]byte, error) {
	switch s.codec {
	case CodecS2:
		n, err := s2.DecodedLen(p)
		if err != nil {
			return nil, fmt.Errorf("s2: %w", err)
		}
		if n > limit {
			return nil, fmt.Errorf("s2 payload expands to %d bytes, more than the %d of %d elements of a partition of %d", n, limit, s.k, s.n)
		}
		if p, err = s2.Decode(make([]byte, n), p); err != nil {
			return nil, fmt.Errorf("s2: %w", err)
		}
	case CodecZstd:
		var h zstd.Header
		if err := h.Decode(p); err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
		if h.HasFCS && h.FrameContentSize > uint64(limit) {
			return nil, fmt.Errorf("zstd payload expands to %d bytes, more than the %d of %d elements of a partition of %d", h.FrameContentSize, limit, s.k, s.n)
		}
		dec, err := z.decoder()
		if err != nil {
			return nil, err
		}
		if p, err = dec.DecodeAll(p, make([]byte, 0, limit)); err != nil {
			if errors.Is(err, zstd.ErrDecoderSizeExceeded) {
				return nil, fmt.Errorf("zstd payload expands to more than the %d bytes of %d elements of a partition of %d", limit, s.k, s.n)
			}
			return nil, fmt.Errorf("zstd: %w", err)
		}
	}
	return p, nil
}

// sparseValues reads the k values at the head of an expanded payload,
// and returns them and the bytes after them.
func sparseValues(s sparseSpec, p []byte) (vals []float64, rest []byte, err error) {
	size := reduce.Size(s.dtype)
	if len(p) < s.k*size {
		return nil, nil, fmt.Errorf("payload of %d bytes cannot hold %d %s values", len(p), s.k, reduce.DTypeName(s.dtype))
	}
	vals = make([]float64, s.k)
	le := binary.LittleEndian
	for j := range vals {
		if size == 4 {
			vals[j] = float64(math.Float32frombits(le.Uint32(p[4*j:])))
		} else {
			vals[j] = math.Float64frombits(le.Uint64(p[8*j:]))
		}
	}
	return vals, p[s.k*size:], nil
}

// rawIndices reads CodecRaw's k indices, 4 bytes each, which must fill
// rest, increase and be below n.
func rawIndices(s sparseSpec, rest []byte) ([]int32, error) {
	if len(rest) != 4*s.k {
		return nil, fmt.Errorf("%d index bytes for %d indices of 4 bytes", len(rest), s.k)
	}
	idx := make([]int32, s.k)
	le := binary.LittleEndian
	for j := range idx {
		i := le.Uint32(rest[4*j:])
		switch {
		case i >= uint32(s.n):
			return nil, fmt.Errorf("index %d (#%d) out of range for a partition of %d", i, j, s.n)
		case j > 0 && int32(i) == idx[j-1]:
			return nil, fmt.Errorf("index %d (#%d) repeated", i, j)
		case j > 0 && int32(i) < idx[j-1]:
			return nil, fmt.Errorf("index %d (#%d) after %d: indices must increase", i, j, idx[j-1])
		}
		idx[j] = int32(i)
	}
	return idx, nil
}

// varintIndices reads the k indices of the other codecs (CodecVarint's
// layout, once expanded): the first, then each one's distance from the
// one before, as minimal uvarints that must fill rest, each distance at
// least 1 and every index below n.
func varintIndices(s sparseSpec, rest []byte) ([]int32, error) {
	idx := make([]int32, s.k)
	at := uint64(0)
	for j := range idx {
		d, w := binary.Uvarint(rest)
		switch {
		case w == 0:
			return nil, fmt.Errorf("payload ends after %d of %d indices", j, s.k)
		case w < 0:
			return nil, fmt.Errorf("index #%d: uvarint overflows", j)
		case w > 1 && rest[w-1] == 0:
			return nil, fmt.Errorf("index #%d: uvarint not minimal", j)
		case j > 0 && d == 0:
			return nil, fmt.Errorf("index %d (#%d) repeated", at, j)
		case d >= uint64(s.n)-at:
			return nil, fmt.Errorf("index #%d (%d after %d) out of range for a partition of %d", j, d, at, s.n)
		}
		rest = rest[w:]
		if j == 0 {
			at = d
		} else {
			at += d
		}
		idx[j] = int32(at)
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("%d bytes after the %d indices", len(rest), s.k)
	}
	return idx, nil
}
