//go:build amd64 && !purego

#include "textflag.h"

// The AVX2 kernels of kernels_amd64.go: dst[i] = dst[i] op src[i] over n
// bytes (a multiple of 32, at least 32), four vectors a round, then one.
// Each vector's src and dst are both loaded before its result is stored,
// so dst == src gives the element-wise result too.

// FOLD folds the n bytes at src (SI) into dst (DI), n in CX, with the
// vector instruction INSTR (INSTR mem, Y, Y: dst's vector op src's).
#define FOLD(INSTR) \
	XORQ    AX, AX            \
	MOVQ    CX, DX            \
	ANDQ    $~127, DX         \
	JZ      one               \
four:                         \
	VMOVDQU 0(DI)(AX*1), Y0   \
	VMOVDQU 32(DI)(AX*1), Y1  \
	VMOVDQU 64(DI)(AX*1), Y2  \
	VMOVDQU 96(DI)(AX*1), Y3  \
	INSTR   0(SI)(AX*1), Y0, Y0  \
	INSTR   32(SI)(AX*1), Y1, Y1 \
	INSTR   64(SI)(AX*1), Y2, Y2 \
	INSTR   96(SI)(AX*1), Y3, Y3 \
	VMOVDQU Y0, 0(DI)(AX*1)   \
	VMOVDQU Y1, 32(DI)(AX*1)  \
	VMOVDQU Y2, 64(DI)(AX*1)  \
	VMOVDQU Y3, 96(DI)(AX*1)  \
	ADDQ    $128, AX          \
	CMPQ    AX, DX            \
	JB      four              \
one:                          \
	CMPQ    AX, CX            \
	JAE     done              \
	VMOVDQU 0(DI)(AX*1), Y0   \
	INSTR   0(SI)(AX*1), Y0, Y0  \
	VMOVDQU Y0, 0(DI)(AX*1)   \
	ADDQ    $32, AX           \
	JMP     one               \
done:                         \
	VZEROUPPER                \
	RET

// func addInt32AVX2(dst, src *int32, n int)
TEXT ·addInt32AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHLQ $2, CX
	FOLD(VPADDD)

// func addInt64AVX2(dst, src *int64, n int)
TEXT ·addInt64AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHLQ $3, CX
	FOLD(VPADDQ)

// func addFloat32AVX2(dst, src *float32, n int)
TEXT ·addFloat32AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHLQ $2, CX
	FOLD(VADDPS)

// func addFloat64AVX2(dst, src *float64, n int)
TEXT ·addFloat64AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHLQ $3, CX
	FOLD(VADDPD)

// func maxInt32AVX2(dst, src *int32, n int)
TEXT ·maxInt32AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHLQ $2, CX
	FOLD(VPMAXSD)

// func minInt32AVX2(dst, src *int32, n int)
TEXT ·minInt32AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHLQ $2, CX
	FOLD(VPMINSD)

// func maxUint8AVX2(dst, src *uint8, n int)
TEXT ·maxUint8AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	FOLD(VPMAXUB)

// func minUint8AVX2(dst, src *uint8, n int)
TEXT ·minUint8AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	FOLD(VPMINUB)

// SCALE sets each of the n bytes at DI (n in CX, a multiple of 32, at
// least 32) to itself INSTR Y4 (INSTR Y4, Y, Y: the element's vector op
// Y4's), four vectors a round, then one.
#define SCALE(INSTR) \
	XORQ    AX, AX            \
	MOVQ    CX, DX            \
	ANDQ    $~127, DX         \
	JZ      sone              \
sfour:                        \
	VMOVUPS 0(DI)(AX*1), Y0   \
	VMOVUPS 32(DI)(AX*1), Y1  \
	VMOVUPS 64(DI)(AX*1), Y2  \
	VMOVUPS 96(DI)(AX*1), Y3  \
	INSTR   Y4, Y0, Y0        \
	INSTR   Y4, Y1, Y1        \
	INSTR   Y4, Y2, Y2        \
	INSTR   Y4, Y3, Y3        \
	VMOVUPS Y0, 0(DI)(AX*1)   \
	VMOVUPS Y1, 32(DI)(AX*1)  \
	VMOVUPS Y2, 64(DI)(AX*1)  \
	VMOVUPS Y3, 96(DI)(AX*1)  \
	ADDQ    $128, AX          \
	CMPQ    AX, DX            \
	JB      sfour             \
sone:                         \
	CMPQ    AX, CX            \
	JAE     sdone             \
	VMOVUPS 0(DI)(AX*1), Y0   \
	INSTR   Y4, Y0, Y0        \
	VMOVUPS Y0, 0(DI)(AX*1)   \
	ADDQ    $32, AX           \
	JMP     sone              \
sdone:                        \
	VZEROUPPER                \
	RET

// func mulFloat32AVX2(x *float32, n int, s float32)
TEXT ·mulFloat32AVX2(SB), NOSPLIT, $0-20
	MOVQ         x+0(FP), DI
	MOVQ         n+8(FP), CX
	SHLQ         $2, CX
	VBROADCASTSS s+16(FP), Y4
	SCALE(VMULPS)

// func divFloat32AVX2(x *float32, n int, d float32)
TEXT ·divFloat32AVX2(SB), NOSPLIT, $0-20
	MOVQ         x+0(FP), DI
	MOVQ         n+8(FP), CX
	SHLQ         $2, CX
	VBROADCASTSS d+16(FP), Y4
	SCALE(VDIVPS)

// func mulFloat64AVX2(x *float64, n int, s float64)
TEXT ·mulFloat64AVX2(SB), NOSPLIT, $0-24
	MOVQ         x+0(FP), DI
	MOVQ         n+8(FP), CX
	SHLQ         $3, CX
	VBROADCASTSD s+16(FP), Y4
	SCALE(VMULPD)

// func divFloat64AVX2(x *float64, n int, d float64)
TEXT ·divFloat64AVX2(SB), NOSPLIT, $0-24
	MOVQ         x+0(FP), DI
	MOVQ         n+8(FP), CX
	SHLQ         $3, CX
	VBROADCASTSD d+16(FP), Y4
	SCALE(VDIVPD)
