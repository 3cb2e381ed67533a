package reduce

import (
	"errors"
	"fmt"
	"strings"
)

// Wire is the format float32 elements take between ranks: full float32, or
// one of two 2-byte formats that halve the bytes on slow links. Its values
// cross the wire; the zero value is WireFull. ONLY APPEND.
//
// # The codec
//
// Encode turns float32 into the wire format, Decode turns it back, and
// DecodeAdd decodes straight into a float32 accumulator (the step of a ring
// reduce-scatter hop). Encoded elements are little-endian, Size() bytes
// each, with no header: the caller frames them.
//
// Sums are always taken in float32: the 2-byte formats only carry values,
// they never accumulate. A hop that receives a chunk calls DecodeAdd into its
// float32 chunk and, if it forwards the partial sum, encodes it afresh, so
// each hop rounds once (a ring of n ranks rounds a chunk's sum n-1 times in
// reduce-scatter, plus once for the all-gather).
//
// Rules for WireFP16 (IEEE 754 binary16: 1 sign, 5 exponent, 10 mantissa
// bits; max finite 65504; subnormals down to 2^-24) and WireBF16 (bfloat16:
// float32's upper 16 bits; 8 exponent, 7 mantissa bits):
//
//   - Rounding is to nearest, ties to even, including into fp16's
//     subnormal range (a tie at half of 2^-24 rounds to ±0). Values below half
//     the smallest subnormal become a zero of the same sign; -0 stays -0.
//   - Saturation: a finite float32 whose magnitude rounds beyond the largest
//     finite value of the format is sent as ± that value (fp16 ±65504, bf16
//     ±3.3895314e38), never as an infinity and never wrapped. For bf16 this
//     touches only the float32 values within half a bf16 ulp of float32's
//     max (magnitude ≥ 0x7f7f8000 as bits), which ties-to-even would
//     otherwise turn into infinities. Saturation is silent: a sum that
//     exceeds 65504 is clipped, so callers that sum many large values in
//     fp16 pre-divide (see below) or use WireBF16, which keeps float32's
//     exponent range.
//   - ±Inf stays ±Inf.
//   - NaN stays NaN: every NaN encodes to the format's quiet NaN with its
//     sign (fp16 0x7e00, bf16 0x7fc0) and decodes to float32's quiet NaN
//     0x7fc00000 with its sign. Payloads are not carried, so decoding then
//     encoding returns every non-NaN bit pattern unchanged and every NaN
//     pattern as the canonical quiet NaN of its sign.
//   - Decoding is exact: every fp16 and bf16 value, subnormals included, is
//     a float32.
//
// Pre-division (Horovod's gradient_predivide_factor) is left to the caller
// and is not a codec option: a ring encodes partial sums at every hop, and
// those must not be scaled again. Scale a rank's own input once, before the
// collective; with fp16 this also keeps the partial sums under 65504.
//
// A ring that hands every rank the same result must also round the owner's
// own copy of a reduced chunk through the wire (Round), since the other ranks
// only receive its encoded form. Decode then Encode is the identity for
// non-NaN patterns, so a rank may forward what it received either as the
// bytes it got or re-encoded.
type Wire uint8

// The wire formats. ONLY APPEND.
const (
	WireFull Wire = iota // float32 as is, 4 bytes
	WireFP16             // IEEE 754 binary16, 2 bytes
	WireBF16             // bfloat16, 2 bytes
)

// ErrLength reports an encoded payload or destination whose length does not
// match the element count: Encode, Decode, DecodeAdd and Round return it
// (wrapped, with the lengths) and never panic on a bad length.
var ErrLength = errors.New("wire length mismatch")

func (w Wire) String() string {
	switch w {
	case WireFull:
		return "full"
	case WireFP16:
		return "fp16"
	case WireBF16:
		return "bf16"
	}
	return fmt.Sprintf("Wire(%d)", uint8(w))
}

// Valid reports whether w is one of the wire formats.
func (w Wire) Valid() bool { return w <= WireBF16 }

// Size is the encoded size in bytes of one float32 element, or 0 if w is
// unknown.
func (w Wire) Size() int {
	switch w {
	case WireFull:
		return 4
	case WireFP16, WireBF16:
		return 2
	}
	return 0
}

// ParseWire reads a wire format name, as String writes it or as the usual
// aliases ("fp32", "float32", "none", "" for full; "float16", "half" for
// fp16; "bfloat16" for bf16), ignoring case.
func ParseWire(s string) (Wire, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "full", "fp32", "float32", "none", "":
		return WireFull, nil
	case "fp16", "float16", "half":
		return WireFP16, nil
	case "bf16", "bfloat16":
		return WireBF16, nil
	}
	return 0, fmt.Errorf("reduce: unknown wire format %q (want full, fp16 or bf16)", s)
}

// check validates w and that nb bytes hold exactly n elements of w.
func (w Wire) check(what string, nb, n int) error {
	size := w.Size()
	if size == 0 {
		return fmt.Errorf("reduce: %s: unknown wire format %d", what, uint8(w))
	}
	if nb%size != 0 {
		return fmt.Errorf("reduce: %s %v: %d bytes is not a whole number of %d-byte elements: %w", what, w, nb, size, ErrLength)
	}
	if nb/size != n {
		return fmt.Errorf("reduce: %s %v: %d bytes hold %d elements, want %d: %w", what, w, nb, nb/size, n, ErrLength)
	}
	return nil
}

// Encode writes src into dst in format w. dst must be exactly
// len(src)*w.Size() bytes.
func Encode(w Wire, dst []byte, src []float32) error {
	if err := w.check("encode", len(dst), len(src)); err != nil {
		return err
	}
	switch w {
	case WireFull:
		copy(dst, AsBytes(src))
	case WireFP16:
		encodeFP16(dst, src)
	case WireBF16:
		encodeBF16(dst, src)
	}
	return nil
}

// Decode reads src, in format w, into dst. src must be exactly
// len(dst)*w.Size() bytes.
func Decode(w Wire, dst []float32, src []byte) error {
	if err := w.check("decode", len(src), len(dst)); err != nil {
		return err
	}
	switch w {
	case WireFull:
		copy(AsBytes(dst), src)
	case WireFP16:
		decodeFP16(dst, src)
	case WireBF16:
		decodeBF16(dst, src)
	}
	return nil
}

// DecodeAdd adds the elements of src, in format w, to acc in float32:
// acc[i] += decoded src[i]. src must be exactly len(acc)*w.Size() bytes.
// The result equals Decode into a scratch slice followed by a float32 add.
func DecodeAdd(w Wire, acc []float32, src []byte) error {
	if err := w.check("decode-add", len(src), len(acc)); err != nil {
		return err
	}
	switch w {
	case WireFull:
		SumInto(acc, FromBytes[float32](src))
	case WireFP16:
		decodeAddFP16(acc, src)
	case WireBF16:
		decodeAddBF16(acc, src)
	}
	return nil
}

// Round replaces each element of buf with the value it has after Encode
// then Decode in format w (a no-op for WireFull), without a scratch buffer.
// A ring's owner of a reduced chunk calls it so that its copy equals what
// the other ranks decode.
func Round(w Wire, buf []float32) error {
	switch w {
	case WireFull:
	case WireFP16:
		for i, f := range buf {
			buf[i] = fp16ToF32(f32ToFP16(f))
		}
	case WireBF16:
		for i, f := range buf {
			buf[i] = bf16ToF32(f32ToBF16(f))
		}
	default:
		return fmt.Errorf("reduce: round: unknown wire format %d", uint8(w))
	}
	return nil
}
