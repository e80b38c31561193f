//go:build amd64 && !purego

#include "textflag.h"

// PSHUFB masks. shuf4: the 4x4 byte transpose of four 4-byte elements
// (bytes 0 4 8 12 1 5 9 13 2 6 10 14 3 7 11 15), its own inverse. shuf2:
// even bytes, then odd bytes.
DATA shuf4<>+0(SB)/8, $0x0d0905010c080400
DATA shuf4<>+8(SB)/8, $0x0f0b07030e0a0602
GLOBL shuf4<>(SB), RODATA|NOPTR, $16
DATA shuf2<>+0(SB)/8, $0x0e0c0a0806040200
DATA shuf2<>+8(SB)/8, $0x0f0d0b0907050301
GLOBL shuf2<>(SB), RODATA|NOPTR, $16

// func shuffle4SSSE3(dst, src *byte, stride, blocks int)
// 16 elements (64 bytes) a block: each 16 bytes transposed by PSHUFB into
// four dwords (a plane's bytes of 4 elements), then the 4x4 dword matrix
// transposed by unpacks: one 16-byte store per plane.
TEXT ·shuffle4SSSE3(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ stride+16(FP), DX
	MOVQ blocks+24(FP), CX
	MOVOU shuf4<>(SB), X8
	LEAQ (DI)(DX*1), R8
	LEAQ (R8)(DX*1), R9
	LEAQ (R9)(DX*1), R10
	TESTQ CX, CX
	JZ done4

loop4:
	MOVOU 0(SI), X0
	MOVOU 16(SI), X1
	MOVOU 32(SI), X2
	MOVOU 48(SI), X3
	PSHUFB X8, X0
	PSHUFB X8, X1
	PSHUFB X8, X2
	PSHUFB X8, X3
	MOVO X0, X4
	PUNPCKLLQ X1, X0
	PUNPCKHLQ X1, X4
	MOVO X2, X5
	PUNPCKLLQ X3, X2
	PUNPCKHLQ X3, X5
	MOVO X0, X1
	PUNPCKLQDQ X2, X1
	PUNPCKHQDQ X2, X0
	MOVO X4, X3
	PUNPCKLQDQ X5, X3
	PUNPCKHQDQ X5, X4
	MOVOU X1, (DI)
	MOVOU X0, (R8)
	MOVOU X3, (R9)
	MOVOU X4, (R10)
	ADDQ $64, SI
	ADDQ $16, DI
	ADDQ $16, R8
	ADDQ $16, R9
	ADDQ $16, R10
	DECQ CX
	JNZ loop4

done4:
	RET

// func unshuffle4SSSE3(dst, src *byte, stride, blocks int)
// The reverse: the dword transpose, then the byte transpose.
TEXT ·unshuffle4SSSE3(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ stride+16(FP), DX
	MOVQ blocks+24(FP), CX
	MOVOU shuf4<>(SB), X8
	LEAQ (SI)(DX*1), R8
	LEAQ (R8)(DX*1), R9
	LEAQ (R9)(DX*1), R10
	TESTQ CX, CX
	JZ doneu4

loopu4:
	MOVOU (SI), X0
	MOVOU (R8), X1
	MOVOU (R9), X2
	MOVOU (R10), X3
	MOVO X0, X4
	PUNPCKLLQ X1, X0
	PUNPCKHLQ X1, X4
	MOVO X2, X5
	PUNPCKLLQ X3, X2
	PUNPCKHLQ X3, X5
	MOVO X0, X1
	PUNPCKLQDQ X2, X1
	PUNPCKHQDQ X2, X0
	MOVO X4, X3
	PUNPCKLQDQ X5, X3
	PUNPCKHQDQ X5, X4
	PSHUFB X8, X1
	PSHUFB X8, X0
	PSHUFB X8, X3
	PSHUFB X8, X4
	MOVOU X1, 0(DI)
	MOVOU X0, 16(DI)
	MOVOU X3, 32(DI)
	MOVOU X4, 48(DI)
	ADDQ $64, DI
	ADDQ $16, SI
	ADDQ $16, R8
	ADDQ $16, R9
	ADDQ $16, R10
	DECQ CX
	JNZ loopu4

doneu4:
	RET

// func shuffle2SSSE3(dst, src *byte, stride, blocks int)
// 16 elements (32 bytes) a block: PSHUFB puts each 16 bytes' even bytes in
// the low quadword and odd bytes in the high one; two unpacks join them.
TEXT ·shuffle2SSSE3(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ stride+16(FP), DX
	MOVQ blocks+24(FP), CX
	MOVOU shuf2<>(SB), X8
	LEAQ (DI)(DX*1), R8
	TESTQ CX, CX
	JZ done2

loop2:
	MOVOU 0(SI), X0
	MOVOU 16(SI), X1
	PSHUFB X8, X0
	PSHUFB X8, X1
	MOVO X0, X2
	PUNPCKLQDQ X1, X0
	PUNPCKHQDQ X1, X2
	MOVOU X0, (DI)
	MOVOU X2, (R8)
	ADDQ $32, SI
	ADDQ $16, DI
	ADDQ $16, R8
	DECQ CX
	JNZ loop2

done2:
	RET

// func unshuffle2SSSE3(dst, src *byte, stride, blocks int)
// The reverse: byte unpacks interleave the two planes (SSE2 alone).
TEXT ·unshuffle2SSSE3(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ stride+16(FP), DX
	MOVQ blocks+24(FP), CX
	LEAQ (SI)(DX*1), R8
	TESTQ CX, CX
	JZ doneu2

loopu2:
	MOVOU (SI), X0
	MOVOU (R8), X1
	MOVO X0, X2
	PUNPCKLBW X1, X0
	PUNPCKHBW X1, X2
	MOVOU X0, 0(DI)
	MOVOU X2, 16(DI)
	ADDQ $32, DI
	ADDQ $16, SI
	ADDQ $16, R8
	DECQ CX
	JNZ loopu2

doneu2:
	RET
