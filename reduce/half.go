package reduce

import (
	"encoding/binary"
	"math"
	"unsafe"
)

// The scalar conversions behind Wire, table-free and branch-light: each
// computes the common case and picks the rare ones with selects the compiler
// turns into conditional moves. See Wire for the rules they implement.

const (
	f32Abs     = 0x7fffffff
	f32Inf     = 0x7f800000
	f32QNaN    = 0x7fc00000
	fp16MaxF32 = 0x477fe000 // 65504, fp16's largest finite value, as float32 bits
	fp16MinN   = 0x38800000 // 2^-14, fp16's smallest normal, as float32 bits
	fp16Rebias = 0xc8000000 // -(127-15)<<23 mod 2^32: float32 to fp16 exponent bias
	bf16MaxF32 = 0x7f7f7fff // the largest float32 that rounds to bf16's max finite
	half       = 0x3f000000 // 0.5 as float32 bits
)

// f32ToFP16 rounds f to the nearest fp16, ties to even, saturating finite
// values at ±65504.
func f32ToFP16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := b >> 16 & 0x8000
	a := b & f32Abs
	c := min(a, fp16MaxF32) // saturate; Inf and NaN are replaced below
	// Normal fp16: rebias the exponent and round the 13 dropped mantissa
	// bits to nearest even; a carry out of the mantissa bumps the exponent,
	// which is right (and cannot pass 65504, as c <= 65504).
	h := (c + fp16Rebias + 0xfff + c>>13&1) >> 13
	// Subnormal fp16 (or zero): adding 0.5, whose float32 ulp is 2^-24 (the
	// fp16 subnormal step), makes the FPU round to nearest even for us; the
	// mantissa bits of the sum are then the fp16 pattern (0x400, the
	// smallest normal, if it rounds up to 2^-14).
	s := math.Float32bits(math.Float32frombits(c)+0.5) - half
	if c < fp16MinN {
		h = s
	}
	special := uint32(0x7c00)
	if a > f32Inf {
		special = 0x7e00
	}
	if a >= f32Inf {
		h = special
	}
	return uint16(h | sign)
}

// fp16ToF32 is the exact float32 value of the fp16 h.
func fp16ToF32(h uint16) float32 {
	x := uint32(h)
	sign := x & 0x8000 << 16
	a := x & 0x7fff
	o := a<<13 + 0x38000000 // normal: rebias the exponent
	// Subnormal or zero: 2^-14*(1+m/1024) - 2^-14 = m*2^-24, exact, and
	// without float32 subnormal arithmetic.
	s := math.Float32bits(math.Float32frombits(o+0x00800000) - 0x1p-14)
	if a < 0x400 {
		o = s
	}
	if a >= 0x7c00 {
		o = f32Inf
	}
	if a > 0x7c00 {
		o = f32QNaN
	}
	return math.Float32frombits(o | sign)
}

// f32ToBF16 rounds f to the nearest bf16, ties to even, saturating finite
// values at ±bf16's max.
func f32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := b >> 16 & 0x8000
	a := b & f32Abs
	c := min(a, bf16MaxF32)
	h := (c + 0x7fff + c>>16&1) >> 16
	special := uint32(0x7f80)
	if a > f32Inf {
		special = 0x7fc0
	}
	if a >= f32Inf {
		h = special
	}
	return uint16(h | sign)
}

// bf16ToF32 is the exact float32 value of the bf16 h.
func bf16ToF32(h uint16) float32 {
	x := uint32(h) << 16
	if x&f32Abs > f32Inf {
		x = x&0x80000000 | f32QNaN
	}
	return math.Float32frombits(x)
}

// The slice kernels. Lengths are checked by the callers in wire.go. They
// run the scalar conversions, inlined by the compiler (encodeFP16 repeats
// f32ToFP16 by hand: it is over the inlining budget), over a []uint16 view of the payload when it is 2-byte aligned, and
// falls back to the scalar conversion on a misaligned payload. The
// exhaustive tests run through these kernels, and Round through the scalar
// ones, so both are checked against the reference.

// u16 views b as little-endian uint16s when b is 2-byte aligned (every
// platform gorun supports is little-endian; see AsBytes).
func u16(b []byte) ([]uint16, bool) {
	if len(b) < 2 {
		return nil, true
	}
	if uintptr(unsafe.Pointer(&b[0]))%2 != 0 {
		return nil, false
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), len(b)/2), true
}

func encodeFP16(dst []byte, src []float32) {
	d, ok := u16(dst)
	if !ok {
		for i, f := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], f32ToFP16(f))
		}
		return
	}
	d = d[:len(src)]
	for i, f := range src {
		b := math.Float32bits(f)
		a := b & f32Abs
		c := min(a, fp16MaxF32)
		h := (c + fp16Rebias + 0xfff + c>>13&1) >> 13
		s := math.Float32bits(math.Float32frombits(c)+0.5) - half
		if c < fp16MinN {
			h = s
		}
		special := uint32(0x7c00)
		if a > f32Inf {
			special = 0x7e00
		}
		if a >= f32Inf {
			h = special
		}
		d[i] = uint16(h | b>>16&0x8000)
	}
}

func encodeBF16(dst []byte, src []float32) {
	d, ok := u16(dst)
	if !ok {
		for i, f := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], f32ToBF16(f))
		}
		return
	}
	d = d[:len(src)]
	for i, f := range src {
		d[i] = f32ToBF16(f)
	}
}

func decodeFP16(dst []float32, src []byte) {
	s, ok := u16(src)
	if !ok {
		for i := range dst {
			dst[i] = fp16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
		}
		return
	}
	s = s[:len(dst)]
	for i, h := range s {
		dst[i] = fp16ToF32(h)
	}
}

func decodeAddFP16(acc []float32, src []byte) {
	s, ok := u16(src)
	if !ok {
		for i := range acc {
			acc[i] += fp16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
		}
		return
	}
	s = s[:len(acc)]
	for i, h := range s {
		acc[i] += fp16ToF32(h)
	}
}

func decodeBF16(dst []float32, src []byte) {
	s, ok := u16(src)
	if !ok {
		for i := range dst {
			dst[i] = bf16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
		}
		return
	}
	s = s[:len(dst)]
	for i, h := range s {
		dst[i] = bf16ToF32(h)
	}
}

func decodeAddBF16(acc []float32, src []byte) {
	s, ok := u16(src)
	if !ok {
		for i := range acc {
			acc[i] += bf16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
		}
		return
	}
	s = s[:len(acc)]
	for i, h := range s {
		acc[i] += bf16ToF32(h)
	}
}
