//go:build amd64 && !purego

#include "textflag.h"

// The AVX2 kernels of exact_amd64.go. Each works on blocks of 32
// elements; n is a multiple of 32 and at least 32.

// The dword order VPERMD takes the four packed quarters of 32 codes back
// to element order: 0, 4, 1, 5, 2, 6, 3, 7.
DATA codesOrder<>+0(SB)/8, $0x0000000400000000
DATA codesOrder<>+8(SB)/8, $0x0000000500000001
DATA codesOrder<>+16(SB)/8, $0x0000000600000002
DATA codesOrder<>+24(SB)/8, $0x0000000700000003
GLOBL codesOrder<>(SB), RODATA|NOPTR, $32

// CODE32 sets r to the code of the float32 bits in r: the exponent byte
// at least 1, then 0 where the bits are those of -0. Y15 holds 255 in
// each dword, Y14 1 and Y13 1<<31; t is scratch.
#define CODE32(r, t) \
	VPSRLD    $23, r, t   \
	VPAND     Y15, t, t   \
	VPMAXUD   Y14, t, t   \
	VPCMPEQD  Y13, r, r   \
	VPANDN    t, r, r

// func codes32AVX2(x *float32, codes *uint8, n, max int)
//
// With max not 0 each code stored is the larger of the element's and the
// one codes held.
TEXT ·codes32AVX2(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), SI
	MOVQ codes+8(FP), DI
	MOVQ n+16(FP), CX
	MOVQ max+24(FP), R8
	MOVL $255, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15
	MOVL $1, AX
	VMOVD AX, X14
	VPBROADCASTD X14, Y14
	MOVL $0x80000000, AX
	VMOVD AX, X13
	VPBROADCASTD X13, Y13
	VMOVDQU codesOrder<>(SB), Y12

codesLoop:
	VMOVDQU 0(SI), Y0
	VMOVDQU 32(SI), Y1
	VMOVDQU 64(SI), Y2
	VMOVDQU 96(SI), Y3
	CODE32(Y0, Y4)
	CODE32(Y1, Y5)
	CODE32(Y2, Y6)
	CODE32(Y3, Y7)

	// Codes fit a byte: pack the dwords to words, the words to bytes
	// (within 128-bit lanes), then put the dwords of four codes in order.
	VPACKUSDW Y1, Y0, Y0
	VPACKUSDW Y3, Y2, Y2
	VPACKUSWB Y2, Y0, Y0
	VPERMD    Y0, Y12, Y0
	TESTQ     R8, R8
	JZ        codesStore
	VPMAXUB   (DI), Y0, Y0

codesStore:
	VMOVDQU   Y0, (DI)
	ADDQ      $128, SI
	ADDQ      $32, DI
	SUBQ      $32, CX
	JNZ       codesLoop
	VZEROUPPER
	RET

// SPLIT32 sets r to the int32s of the 8 float32s at m times 2^S, S =
// 157-h-c for the 8 codes at c, as two products: by 2^S1, S1 = floor(S/2),
// then by 2^S2, S2 = ceil(S/2). Y10 holds 411-h (S+254 at code 0) in each
// dword: 411-h-c is S+254, half of it (rounded down) the exponent bits of
// 2^S1, and the rest those of 2^S2. t is scratch.
#define SPLIT32(m, c, r, t) \
	VPMOVZXBD c, r        \
	VPSUBD    r, Y10, r   \
	VPSRLD    $1, r, t    \
	VPSUBD    t, r, r     \
	VPSLLD    $23, t, t   \
	VPSLLD    $23, r, r   \
	VMULPS    m, t, t     \
	VMULPS    t, r, r     \
	VCVTPS2DQ r, r

// func toFixed32AVX2(x *float32, codes *uint8, q *int32, n, h, lo, span, add int) int
//
// Per 8 elements: the float32 2^(157-h-c), exponent bits 284-h-c; the
// product with x, exact; its conversion to int32, rounded half to even
// by MXCSR's default mode. A block with a code outside lo..lo+span takes
// two products instead (SPLIT32), at any code but 255. A block is left,
// before any of it is stored, when a code is 255 or a conversion is
// invalid (its result 1<<31: the product is NaN or at least 2^31 in
// magnitude). With add not 0 each integer is added to the one q held.
TEXT ·toFixed32AVX2(SB), NOSPLIT, $0-72
	MOVQ x+0(FP), SI
	MOVQ codes+8(FP), DI
	MOVQ q+16(FP), DX
	MOVQ n+24(FP), CX
	MOVQ $284, AX
	SUBQ h+32(FP), AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15 // 284-h
	MOVQ lo+40(FP), AX
	VMOVD AX, X14
	VPBROADCASTB X14, Y14 // lo, bytes
	MOVQ span+48(FP), AX
	VMOVD AX, X13
	VPBROADCASTB X13, Y13 // span, bytes
	MOVL $0x80000000, AX
	VMOVD AX, X12
	VPBROADCASTD X12, Y12 // an invalid conversion's result
	VPCMPEQB Y11, Y11, Y11 // code 255, bytes
	MOVQ $411, AX
	SUBQ h+32(FP), AX
	VMOVD AX, X10
	VPBROADCASTD X10, Y10 // 411-h
	MOVQ add+56(FP), R8
	XORQ AX, AX

toLoop:
	// A code outside lo..lo+span is above span after subtracting lo (mod 256).
	VMOVDQU  (DI)(AX*1), Y0
	VPSUBB   Y14, Y0, Y0
	VPSUBUSB Y13, Y0, Y0
	VPTEST   Y0, Y0
	JNZ      toSplit

	VPMOVZXBD (DI)(AX*1), Y0
	VPMOVZXBD 8(DI)(AX*1), Y1
	VPMOVZXBD 16(DI)(AX*1), Y2
	VPMOVZXBD 24(DI)(AX*1), Y3
	VPSUBD    Y0, Y15, Y0
	VPSUBD    Y1, Y15, Y1
	VPSUBD    Y2, Y15, Y2
	VPSUBD    Y3, Y15, Y3
	VPSLLD    $23, Y0, Y0
	VPSLLD    $23, Y1, Y1
	VPSLLD    $23, Y2, Y2
	VPSLLD    $23, Y3, Y3
	VMULPS    (SI)(AX*4), Y0, Y0
	VMULPS    32(SI)(AX*4), Y1, Y1
	VMULPS    64(SI)(AX*4), Y2, Y2
	VMULPS    96(SI)(AX*4), Y3, Y3
	VCVTPS2DQ Y0, Y0
	VCVTPS2DQ Y1, Y1
	VCVTPS2DQ Y2, Y2
	VCVTPS2DQ Y3, Y3

toStore:
	VPCMPEQD  Y12, Y0, Y4
	VPCMPEQD  Y12, Y1, Y5
	VPCMPEQD  Y12, Y2, Y6
	VPCMPEQD  Y12, Y3, Y7
	VPOR      Y5, Y4, Y4
	VPOR      Y7, Y6, Y6
	VPOR      Y6, Y4, Y4
	VPTEST    Y4, Y4
	JNZ       toDone
	TESTQ     R8, R8
	JZ        toPut
	VPADDD    (DX)(AX*4), Y0, Y0
	VPADDD    32(DX)(AX*4), Y1, Y1
	VPADDD    64(DX)(AX*4), Y2, Y2
	VPADDD    96(DX)(AX*4), Y3, Y3

toPut:
	VMOVDQU   Y0, (DX)(AX*4)
	VMOVDQU   Y1, 32(DX)(AX*4)
	VMOVDQU   Y2, 64(DX)(AX*4)
	VMOVDQU   Y3, 96(DX)(AX*4)
	ADDQ      $32, AX
	CMPQ      AX, CX
	JB        toLoop
	JMP       toDone

toSplit:
	VPCMPEQB (DI)(AX*1), Y11, Y0
	VPTEST   Y0, Y0
	JNZ      toDone
	SPLIT32((SI)(AX*4), (DI)(AX*1), Y0, Y4)
	SPLIT32(32(SI)(AX*4), 8(DI)(AX*1), Y1, Y5)
	SPLIT32(64(SI)(AX*4), 16(DI)(AX*1), Y2, Y6)
	SPLIT32(96(SI)(AX*4), 24(DI)(AX*1), Y3, Y7)
	JMP      toStore

toDone:
	MOVQ AX, ret+64(FP)
	VZEROUPPER
	RET

// FROMSCALE multiplies the float32s in r by the float32 of exponent bits
// c+bias for the 8 codes at m (Y15 holds bias in each dword); t is
// scratch.
#define FROMSCALE(m, r, t) \
	VPMOVZXBD m, t        \
	VPADDD    Y15, t, t   \
	VPSLLD    $23, t, t   \
	VMULPS    t, r, r

// FROMQUO sets r (rx its low half) to the float32s of the 8 int32s at m0
// and m1 (4 each) divided by Y13 in float64 (Y12 its reciprocal,
// rounded): the correctly rounded quotient by a remainder, then rounded
// to float32. a, b and t (tx) are scratch.
#define FROMQUO(m0, m1, r, rx, a, b, t, tx) \
	VCVTDQ2PD    m0, a          \
	VMULPD       Y12, a, r      \
	VFNMADD231PD r, Y13, a      \
	VFMADD231PD  Y12, a, r      \
	VCVTPD2PSY   r, rx          \
	VCVTDQ2PD    m1, b          \
	VMULPD       Y12, b, t      \
	VFNMADD231PD t, Y13, b      \
	VFMADD231PD  Y12, b, t      \
	VCVTPD2PSY   t, tx          \
	VINSERTF128  $1, tx, r, r

// WIDESCALE multiplies the float64s in a by the float64 of exponent bits
// c+bias+896 for the 4 codes at m (Y10 holds bias+896 in each qword):
// 2^(c+h-157), divided by avg where it is a power of two (bias takes its
// log2 in); t is scratch.
#define WIDESCALE(m, a, t) \
	VPMOVZXBQ m, t        \
	VPADDQ    Y10, t, t   \
	VPSLLQ    $52, t, t   \
	VMULPD    t, a, a

// WIDEQUO sets r to the float64s in a divided by Y13 (Y12 its reciprocal,
// rounded), correctly rounded by a remainder, as FROMQUO; a is scratch.
#define WIDEQUO(a, r) \
	VMULPD       Y12, a, r   \
	VFNMADD231PD r, Y13, a   \
	VFMADD231PD  Y12, a, r

// WIDEOUT rounds the float64s in a and b (4 each) to float32, into a (ax
// its low half): a's then b's, then -0 where their code at m is 0 (Y7
// holds 0, Y8 1<<31 in each dword). t is scratch.
#define WIDEOUT(m, a, ax, b, bx, t) \
	VCVTPD2PSY  a, ax        \
	VCVTPD2PSY  b, bx        \
	VINSERTF128 $1, bx, a, a \
	VPMOVZXBD   m, t         \
	VPCMPEQD    Y7, t, t     \
	VBLENDVPS   t, Y8, a, a

// WIDE converts the 8 int32s at m0 and m1 (4 each), codes at c0 and c1
// (4 each), into float32s stored at o: in float64, each scaled exactly,
// then rounded once.
#define WIDE(m0, m1, c0, c1, o) \
	VCVTDQ2PD m0, Y0            \
	VCVTDQ2PD m1, Y1            \
	WIDESCALE(c0, Y0, Y2)       \
	WIDESCALE(c1, Y1, Y2)       \
	WIDEOUT(c0, Y0, X0, Y1, X1, Y2) \
	VMOVUPS   Y0, o

// WIDEDIV is WIDE with the division by Y13 first.
#define WIDEDIV(m0, m1, c0, c1, o) \
	VCVTDQ2PD m0, Y0            \
	VCVTDQ2PD m1, Y1            \
	WIDEQUO(Y0, Y3)             \
	WIDEQUO(Y1, Y4)             \
	WIDESCALE(c0, Y3, Y2)       \
	WIDESCALE(c1, Y4, Y2)       \
	WIDEOUT(c0, Y3, X3, Y4, X4, Y2) \
	VMOVUPS   Y3, o

// func fromFixed32AVX2(q *int32, codes *uint8, out *float32, n, bias, lo, span int, div, recip float64) int
//
// A block with a code outside lo..lo+span is converted in float64
// instead (WIDE, WIDEDIV): at any code but 255, where the block is left
// before any of it is stored. Each group of 8 is read before it is
// stored, so out may be q itself.
TEXT ·fromFixed32AVX2(SB), NOSPLIT, $0-80
	MOVQ q+0(FP), SI
	MOVQ codes+8(FP), DI
	MOVQ out+16(FP), DX
	MOVQ n+24(FP), CX
	MOVQ bias+32(FP), AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15 // bias
	ADDQ $896, AX
	VMOVQ AX, X10
	VPBROADCASTQ X10, Y10 // bias+896, qwords
	MOVQ lo+40(FP), AX
	VMOVD AX, X14
	VPBROADCASTB X14, Y14 // lo, bytes
	MOVQ span+48(FP), AX
	VMOVD AX, X11
	VPBROADCASTB X11, Y11 // span, bytes
	VBROADCASTSD div+56(FP), Y13
	VBROADCASTSD recip+64(FP), Y12
	VPCMPEQB Y9, Y9, Y9 // code 255, bytes
	MOVL $0x80000000, AX
	VMOVD AX, X8
	VPBROADCASTD X8, Y8 // -0
	VPXOR Y7, Y7, Y7
	XORQ AX, AX
	MOVQ div+56(FP), BX
	TESTQ BX, BX
	JNZ fromQuoLoop

fromLoop:
	VMOVDQU  (DI)(AX*1), Y0
	VPSUBB   Y14, Y0, Y0
	VPSUBUSB Y11, Y0, Y0
	VPTEST   Y0, Y0
	JNZ      fromWide
	VCVTDQ2PS (SI)(AX*4), Y0
	VCVTDQ2PS 32(SI)(AX*4), Y1
	VCVTDQ2PS 64(SI)(AX*4), Y2
	VCVTDQ2PS 96(SI)(AX*4), Y3
	FROMSCALE((DI)(AX*1), Y0, Y4)
	FROMSCALE(8(DI)(AX*1), Y1, Y5)
	FROMSCALE(16(DI)(AX*1), Y2, Y6)
	FROMSCALE(24(DI)(AX*1), Y3, Y4)
	VMOVUPS  Y0, (DX)(AX*4)
	VMOVUPS  Y1, 32(DX)(AX*4)
	VMOVUPS  Y2, 64(DX)(AX*4)
	VMOVUPS  Y3, 96(DX)(AX*4)

fromNext:
	ADDQ     $32, AX
	CMPQ     AX, CX
	JB       fromLoop
	JMP      fromDone

fromWide:
	VPCMPEQB (DI)(AX*1), Y9, Y0
	VPTEST   Y0, Y0
	JNZ      fromDone
	WIDE((SI)(AX*4), 16(SI)(AX*4), (DI)(AX*1), 4(DI)(AX*1), (DX)(AX*4))
	WIDE(32(SI)(AX*4), 48(SI)(AX*4), 8(DI)(AX*1), 12(DI)(AX*1), 32(DX)(AX*4))
	WIDE(64(SI)(AX*4), 80(SI)(AX*4), 16(DI)(AX*1), 20(DI)(AX*1), 64(DX)(AX*4))
	WIDE(96(SI)(AX*4), 112(SI)(AX*4), 24(DI)(AX*1), 28(DI)(AX*1), 96(DX)(AX*4))
	JMP      fromNext

fromQuoLoop:
	VMOVDQU  (DI)(AX*1), Y0
	VPSUBB   Y14, Y0, Y0
	VPSUBUSB Y11, Y0, Y0
	VPTEST   Y0, Y0
	JNZ      fromQuoWide
	FROMQUO((SI)(AX*4), 16(SI)(AX*4), Y0, X0, Y4, Y5, Y6, X6)
	FROMSCALE((DI)(AX*1), Y0, Y4)
	VMOVUPS  Y0, (DX)(AX*4)
	FROMQUO(32(SI)(AX*4), 48(SI)(AX*4), Y1, X1, Y4, Y5, Y6, X6)
	FROMSCALE(8(DI)(AX*1), Y1, Y4)
	VMOVUPS  Y1, 32(DX)(AX*4)
	FROMQUO(64(SI)(AX*4), 80(SI)(AX*4), Y2, X2, Y4, Y5, Y6, X6)
	FROMSCALE(16(DI)(AX*1), Y2, Y4)
	VMOVUPS  Y2, 64(DX)(AX*4)
	FROMQUO(96(SI)(AX*4), 112(SI)(AX*4), Y3, X3, Y4, Y5, Y6, X6)
	FROMSCALE(24(DI)(AX*1), Y3, Y4)
	VMOVUPS  Y3, 96(DX)(AX*4)

fromQuoNext:
	ADDQ     $32, AX
	CMPQ     AX, CX
	JB       fromQuoLoop
	JMP      fromDone

fromQuoWide:
	VPCMPEQB (DI)(AX*1), Y9, Y0
	VPTEST   Y0, Y0
	JNZ      fromDone
	WIDEDIV((SI)(AX*4), 16(SI)(AX*4), (DI)(AX*1), 4(DI)(AX*1), (DX)(AX*4))
	WIDEDIV(32(SI)(AX*4), 48(SI)(AX*4), 8(DI)(AX*1), 12(DI)(AX*1), 32(DX)(AX*4))
	WIDEDIV(64(SI)(AX*4), 80(SI)(AX*4), 16(DI)(AX*1), 20(DI)(AX*1), 64(DX)(AX*4))
	WIDEDIV(96(SI)(AX*4), 112(SI)(AX*4), 24(DI)(AX*1), 28(DI)(AX*1), 96(DX)(AX*4))
	JMP      fromQuoNext

fromDone:
	MOVQ AX, ret+72(FP)
	VZEROUPPER
	RET

// CODE64 sets r to the code of the float64 bits in r: the exponent at
// least 1, then 0 where the bits are those of -0. Y15 holds 2047 in each
// qword, Y14 1<<63 and Y13 0; t and u are scratch.
#define CODE64(r, t, u) \
	VPSRLQ    $52, r, t   \
	VPAND     Y15, t, t   \
	VPCMPEQQ  Y13, t, u   \
	VPSUBQ    u, t, t     \
	VPCMPEQQ  Y14, r, r   \
	VPANDN    t, r, r

// func codes64AVX2(x *float64, codes *int32, n int)
TEXT ·codes64AVX2(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ codes+8(FP), DI
	MOVQ n+16(FP), CX
	MOVQ $2047, AX
	VMOVQ AX, X15
	VPBROADCASTQ X15, Y15
	MOVQ $0x8000000000000000, AX
	VMOVQ AX, X14
	VPBROADCASTQ X14, Y14
	VPXOR Y13, Y13, Y13

codes64Loop:
	VMOVDQU 0(SI), Y0
	VMOVDQU 32(SI), Y1
	VMOVDQU 64(SI), Y2
	VMOVDQU 96(SI), Y3
	CODE64(Y0, Y4, Y5)
	CODE64(Y1, Y6, Y7)
	CODE64(Y2, Y8, Y9)
	CODE64(Y3, Y10, Y11)

	// The low dwords of the qwords, in order.
	VSHUFPS $0x88, Y1, Y0, Y0
	VSHUFPS $0x88, Y3, Y2, Y2
	VPERMPD $0xd8, Y0, Y0
	VPERMPD $0xd8, Y2, Y2
	VMOVDQU Y0, (DI)
	VMOVDQU Y2, 32(DI)
	ADDQ    $128, SI
	ADDQ    $64, DI
	SUBQ    $16, CX
	JNZ     codes64Loop
	VZEROUPPER
	RET

// func toFixed64AVX2(x *float64, codes *int32, q *int64, n, h int) int
//
// fixed64 on 4 lanes: the exponent ex (1 for a zero or subnormal), the
// significand m, k = ex+10-h-c; m<<k for k ≥ 0, else m>>-k rounded half
// to even as (m + 2^(-k-1) - 1 + (m>>-k)&1) >> -k; negated for a negative
// x. A block is left, before any of it is stored, when a code is 2047;
// each group of 4 is read before it is stored, so q may be x itself.
TEXT ·toFixed64AVX2(SB), NOSPLIT, $0-48
	MOVQ x+0(FP), SI
	MOVQ codes+8(FP), DI
	MOVQ q+16(FP), DX
	MOVQ n+24(FP), CX
	MOVQ $10, AX
	SUBQ h+32(FP), AX
	VMOVQ AX, X15
	VPBROADCASTQ X15, Y15 // 10-h
	MOVQ $2047, AX
	VMOVQ AX, X14
	VPBROADCASTQ X14, Y14
	MOVQ $0x000fffffffffffff, AX
	VMOVQ AX, X13
	VPBROADCASTQ X13, Y13 // the significand's bits
	MOVQ $0x0010000000000000, AX
	VMOVQ AX, X12
	VPBROADCASTQ X12, Y12 // the implicit bit
	MOVQ $1, AX
	VMOVQ AX, X11
	VPBROADCASTQ X11, Y11
	VPCMPEQQ Y10, Y10, Y10 // -1
	VPXOR    Y9, Y9, Y9
	MOVL $2047, AX
	VMOVD AX, X8
	VPBROADCASTD X8, Y8 // code 2047, dwords
	XORQ AX, AX

to64Loop:
	VPCMPEQD (DI)(AX*4), Y8, Y0
	VPCMPEQD 32(DI)(AX*4), Y8, Y1
	VPCMPEQD 64(DI)(AX*4), Y8, Y2
	VPCMPEQD 96(DI)(AX*4), Y8, Y3
	VPOR     Y1, Y0, Y0
	VPOR     Y3, Y2, Y2
	VPOR     Y2, Y0, Y0
	VPTEST   Y0, Y0
	JNZ      to64Done
	LEAQ     32(AX), BX

to64Group:
	VMOVDQU   (SI)(AX*8), Y0
	VPMOVSXDQ (DI)(AX*4), Y1
	VPSRLQ    $52, Y0, Y2
	VPAND     Y14, Y2, Y2     // ex
	VPCMPEQQ  Y9, Y2, Y3      // ex == 0
	VPSUBQ    Y3, Y2, Y2      // ex, at least 1
	VPAND     Y13, Y0, Y4
	VPANDN    Y12, Y3, Y3
	VPOR      Y3, Y4, Y4      // m
	VPADDQ    Y15, Y2, Y2
	VPSUBQ    Y1, Y2, Y2      // k
	VPSLLVQ   Y2, Y4, Y5      // m<<k
	VPXOR     Y10, Y2, Y6     // -k-1
	VPSLLVQ   Y6, Y11, Y6     // 2^(-k-1)
	VPSUBQ    Y2, Y9, Y7      // -k
	VPSRLVQ   Y7, Y4, Y3
	VPAND     Y11, Y3, Y3
	VPADDQ    Y4, Y3, Y3
	VPADDQ    Y6, Y3, Y3
	VPADDQ    Y10, Y3, Y3
	VPSRLVQ   Y7, Y3, Y3      // m>>-k, rounded
	VBLENDVPD Y2, Y3, Y5, Y5  // k < 0: the rounded shift
	VPCMPGTQ  Y0, Y9, Y1      // x's sign
	VPXOR     Y1, Y5, Y5
	VPSUBQ    Y1, Y5, Y5
	VMOVDQU   Y5, (DX)(AX*8)
	ADDQ      $4, AX
	CMPQ      AX, BX
	JB        to64Group
	CMPQ      AX, CX
	JB        to64Loop

to64Done:
	MOVQ AX, ret+40(FP)
	VZEROUPPER
	RET

// I2F sets f to the float64s of the int64s in s, rounded once: the high
// 16 bits (sign-extended) added into the significand of 3·2^67 (Y9), the
// low 48 into that of 2^52 (Y7), less 3·2^67+2^52 (Y8), exactly, then the
// sum. Y6 holds 0; t is scratch.
#define I2F(s, f, t) \
	VPSRAD   $16, s, t        \
	VPBLENDW $0x33, Y6, t, t  \
	VPADDQ   Y9, t, t         \
	VPBLENDW $0x88, Y7, s, f  \
	VSUBPD   Y8, t, t         \
	VADDPD   t, f, f

// FROM64 sets r to the float64s of the 4 int64s at m scaled by the codes
// at c: exponent bits c+bias (Y15). t and u are scratch.
#define FROM64(m, c, r, t, u) \
	VMOVDQU   m, u            \
	I2F(u, r, t)              \
	VPMOVSXDQ c, u            \
	VPADDQ    Y15, u, u       \
	VPSLLQ    $52, u, u       \
	VMULPD    u, r, r

// CODES64IN jumps to out unless the 32 codes at m lie in lo..lo+span (Y14,
// Y13: dwords).
#define CODES64IN(m0, m1, m2, m3, out) \
	VMOVDQU  m0, Y0      \
	VMOVDQU  m1, Y1      \
	VMOVDQU  m2, Y2      \
	VMOVDQU  m3, Y3      \
	VPSUBD   Y14, Y0, Y0 \
	VPSUBD   Y14, Y1, Y1 \
	VPSUBD   Y14, Y2, Y2 \
	VPSUBD   Y14, Y3, Y3 \
	VPMAXUD  Y1, Y0, Y0  \
	VPMAXUD  Y3, Y2, Y2  \
	VPMAXUD  Y2, Y0, Y0  \
	VPMAXUD  Y13, Y0, Y0 \
	VPXOR    Y13, Y0, Y0 \
	VPTEST   Y0, Y0      \
	JNZ      out

// func fromFixed64AVX2(q *int64, codes *int32, out *float64, n, bias, lo, span int, mul, div, recip float64) int
//
// Each group of 4 is read before it is stored, so out may be q itself.
TEXT ·fromFixed64AVX2(SB), NOSPLIT, $0-88
	MOVQ q+0(FP), SI
	MOVQ codes+8(FP), DI
	MOVQ out+16(FP), DX
	MOVQ n+24(FP), CX
	MOVQ bias+32(FP), AX
	VMOVQ AX, X15
	VPBROADCASTQ X15, Y15
	MOVQ lo+40(FP), AX
	VMOVD AX, X14
	VPBROADCASTD X14, Y14
	MOVQ span+48(FP), AX
	VMOVD AX, X13
	VPBROADCASTD X13, Y13
	VBROADCASTSD mul+56(FP), Y12
	VBROADCASTSD div+64(FP), Y11
	VBROADCASTSD recip+72(FP), Y10
	MOVQ $0x4438000000000000, AX
	VMOVQ AX, X9
	VPBROADCASTQ X9, Y9 // 3·2^67
	MOVQ $0x4438001000000000, AX
	VMOVQ AX, X8
	VPBROADCASTQ X8, Y8 // 3·2^67 + 2^52
	MOVQ $0x4330000000000000, AX
	VMOVQ AX, X7
	VPBROADCASTQ X7, Y7 // 2^52
	VPXOR Y6, Y6, Y6
	XORQ AX, AX
	MOVQ div+64(FP), R8
	TESTQ R8, R8
	JNZ from64QuoLoop
	MOVQ mul+56(FP), R8
	TESTQ R8, R8
	JNZ from64MulLoop

from64Loop:
	CODES64IN((DI)(AX*4), 32(DI)(AX*4), 64(DI)(AX*4), 96(DI)(AX*4), from64Done)
	LEAQ 32(AX), BX

from64Group:
	FROM64((SI)(AX*8), (DI)(AX*4), Y0, Y1, Y2)
	FROM64(32(SI)(AX*8), 16(DI)(AX*4), Y3, Y4, Y5)
	VMOVUPD Y0, (DX)(AX*8)
	VMOVUPD Y3, 32(DX)(AX*8)
	ADDQ    $8, AX
	CMPQ    AX, BX
	JB      from64Group
	CMPQ    AX, CX
	JB      from64Loop
	JMP     from64Done

from64MulLoop:
	CODES64IN((DI)(AX*4), 32(DI)(AX*4), 64(DI)(AX*4), 96(DI)(AX*4), from64Done)
	LEAQ 32(AX), BX

from64MulGroup:
	FROM64((SI)(AX*8), (DI)(AX*4), Y0, Y1, Y2)
	FROM64(32(SI)(AX*8), 16(DI)(AX*4), Y3, Y4, Y5)
	VMULPD  Y12, Y0, Y0
	VMULPD  Y12, Y3, Y3
	VMOVUPD Y0, (DX)(AX*8)
	VMOVUPD Y3, 32(DX)(AX*8)
	ADDQ    $8, AX
	CMPQ    AX, BX
	JB      from64MulGroup
	CMPQ    AX, CX
	JB      from64MulLoop
	JMP     from64Done

from64QuoLoop:
	CODES64IN((DI)(AX*4), 32(DI)(AX*4), 64(DI)(AX*4), 96(DI)(AX*4), from64Done)
	LEAQ 32(AX), BX

from64QuoGroup:
	FROM64((SI)(AX*8), (DI)(AX*4), Y0, Y1, Y2)
	FROM64(32(SI)(AX*8), 16(DI)(AX*4), Y3, Y4, Y5)
	VMULPD       Y10, Y0, Y1
	VMULPD       Y10, Y3, Y4
	VFNMADD231PD Y1, Y11, Y0
	VFNMADD231PD Y4, Y11, Y3
	VFMADD231PD  Y10, Y0, Y1
	VFMADD231PD  Y10, Y3, Y4
	VMOVUPD      Y1, (DX)(AX*8)
	VMOVUPD      Y4, 32(DX)(AX*8)
	ADDQ         $8, AX
	CMPQ         AX, BX
	JB           from64QuoGroup
	CMPQ         AX, CX
	JB           from64QuoLoop

from64Done:
	MOVQ AX, ret+80(FP)
	VZEROUPPER
	RET
