//go:build amd64 && !purego

package codec

import "golang.org/x/sys/cpu"

// useAsm: the SSSE3 shuffles (PSHUFB), which nearly every amd64 CPU has.
var useAsm = cpu.X86.HasSSSE3

// shuffleAsm shuffles the first n&^15 of src's n elements of es bytes (2 or
// 4; for others it does nothing) and returns how many it did. The planes
// are n bytes apart in dst.
func shuffleAsm(dst, src []byte, es, n int) int {
	m := n &^ 15
	if m == 0 || (es != 2 && es != 4) {
		return 0
	}
	_, _ = dst[es*n-1], src[es*n-1]
	if es == 4 {
		shuffle4SSSE3(&dst[0], &src[0], n, m/16)
	} else {
		shuffle2SSSE3(&dst[0], &src[0], n, m/16)
	}
	return m
}

// unshuffleAsm reverses shuffleAsm.
func unshuffleAsm(dst, src []byte, es, n int) int {
	m := n &^ 15
	if m == 0 || (es != 2 && es != 4) {
		return 0
	}
	_, _ = dst[es*n-1], src[es*n-1]
	if es == 4 {
		unshuffle4SSSE3(&dst[0], &src[0], n, m/16)
	} else {
		unshuffle2SSSE3(&dst[0], &src[0], n, m/16)
	}
	return m
}

// shuffle4SSSE3 shuffles blocks*16 elements of 4 bytes from src into the
// four planes at dst, dst+stride, dst+2*stride and dst+3*stride.
//
//go:noescape
func shuffle4SSSE3(dst, src *byte, stride, blocks int)

// unshuffle4SSSE3 reverses shuffle4SSSE3: planes at src, src+stride, ...
//
//go:noescape
func unshuffle4SSSE3(dst, src *byte, stride, blocks int)

// shuffle2SSSE3 shuffles blocks*16 elements of 2 bytes from src into the
// two planes at dst and dst+stride.
//
//go:noescape
func shuffle2SSSE3(dst, src *byte, stride, blocks int)

// unshuffle2SSSE3 reverses shuffle2SSSE3.
//
//go:noescape
func unshuffle2SSSE3(dst, src *byte, stride, blocks int)
