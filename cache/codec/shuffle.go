package codec

import "encoding/binary"

// The shuffle and its reverse, at memory speed: on amd64 with SSSE3
// (shuffle_amd64.s; the build tag purego leaves it out) 16 elements of 2
// or 4 bytes at a time, elsewhere and for 8-byte elements a word-at-a-time
// byte transpose in pure Go; what is left (fewer elements than a step
// takes) goes byte by byte. BenchmarkStepShuffle, BenchmarkStepUnshuffle
// and BenchmarkShufflePath measure them; TestShufflePaths checks every
// path against the byte loop.

// shuffle writes src's bytes to dst (as long) grouped by their position in
// an element of size es: byte 0 of every element, then byte 1, ... A tail
// shorter than an element is copied as it is.
func shuffle(dst, src []byte, es int) { shuffleWith(dst, src, es, useAsm) }

// unshuffle reverses shuffle.
func unshuffle(dst, src []byte, es int) { unshuffleWith(dst, src, es, useAsm) }

func shuffleWith(dst, src []byte, es int, asm bool) {
	n := len(src) / es
	dst, src = dst[:len(src)], src[:len(src)]
	i := 0
	if asm {
		i = shuffleAsm(dst, src, es, n)
	}
	switch es {
	case 2:
		i = shuffle2Go(dst, src, n, i)
	case 4:
		i = shuffle4Go(dst, src, n, i)
	case 8:
		i = transpose8Go(dst, src, n, i, true)
	}
	shuffleBytes(dst, src, es, n, i)
	copy(dst[n*es:], src[n*es:])
}

func unshuffleWith(dst, src []byte, es int, asm bool) {
	n := len(src) / es
	dst, src = dst[:len(src)], src[:len(src)]
	i := 0
	if asm {
		i = unshuffleAsm(dst, src, es, n)
	}
	switch es {
	case 2:
		i = unshuffle2Go(dst, src, n, i)
	case 4:
		i = unshuffle4Go(dst, src, n, i)
	case 8:
		i = transpose8Go(dst, src, n, i, false)
	}
	unshuffleBytes(dst, src, es, n, i)
	copy(dst[n*es:], src[n*es:])
}

// shuffleBytes shuffles elements from..n-1 of the n in src byte by byte.
func shuffleBytes(dst, src []byte, es, n, from int) {
	for b := range es {
		d := dst[b*n : (b+1)*n]
		for i := from; i < n; i++ {
			d[i] = src[i*es+b]
		}
	}
}

// unshuffleBytes unshuffles elements from..n-1 of the n in src byte by
// byte.
func unshuffleBytes(dst, src []byte, es, n, from int) {
	for b := range es {
		s := src[b*n : (b+1)*n]
		for i := from; i < n; i++ {
			dst[i*es+b] = s[i]
		}
	}
}

const lo32 = 0x00000000ffffffff

// unzip8 moves x's even bytes to its low half and its odd bytes to its
// high half, in order (bytes 0 2 4 6 1 3 5 7): two delta swaps.
func unzip8(x uint64) uint64 {
	t := (x ^ x>>8) & 0x0000ff000000ff00
	x ^= t ^ t<<8
	t = (x ^ x>>16) & 0x00000000ffff0000
	return x ^ t ^ t<<16
}

// zip8 reverses unzip8.
func zip8(x uint64) uint64 {
	t := (x ^ x>>16) & 0x00000000ffff0000
	x ^= t ^ t<<16
	t = (x ^ x>>8) & 0x0000ff000000ff00
	return x ^ t ^ t<<8
}

func le64(b []byte) uint64                    { return binary.LittleEndian.Uint64(b) }
func put64(b []byte, v uint64)                { binary.LittleEndian.PutUint64(b, v) }
func planes2(b []byte, n int) (p0, p1 []byte) { return b[:n], b[n : 2*n] }

// shuffle2Go shuffles 2-byte elements from i on, 8 at a time, and returns
// where it stopped.
func shuffle2Go(dst, src []byte, n, i int) int {
	d0, d1 := planes2(dst, n)
	for ; i+8 <= n; i += 8 {
		s := src[2*i : 2*i+16 : 2*i+16]
		u0, u1 := unzip8(le64(s)), unzip8(le64(s[8:]))
		put64(d0[i:], u0&lo32|u1<<32)
		put64(d1[i:], u0>>32|u1&^lo32)
	}
	return i
}

// unshuffle2Go reverses shuffle2Go.
func unshuffle2Go(dst, src []byte, n, i int) int {
	s0, s1 := planes2(src, n)
	for ; i+8 <= n; i += 8 {
		p0, p1 := le64(s0[i:]), le64(s1[i:])
		d := dst[2*i : 2*i+16 : 2*i+16]
		put64(d, zip8(p0&lo32|p1<<32))
		put64(d[8:], zip8(p0>>32|p1&^lo32))
	}
	return i
}

// shuffle4Go shuffles 4-byte elements from i on, 8 at a time (four 8-byte
// loads, two rounds of unzip8, four 8-byte stores), and returns where it
// stopped.
func shuffle4Go(dst, src []byte, n, i int) int {
	d0, d1, d2, d3 := dst[:n], dst[n:2*n], dst[2*n:3*n], dst[3*n:4*n]
	for ; i+8 <= n; i += 8 {
		s := src[4*i : 4*i+32 : 4*i+32]
		u0, u1, u2, u3 := unzip8(le64(s)), unzip8(le64(s[8:])), unzip8(le64(s[16:])), unzip8(le64(s[24:]))
		// u0: bytes 0 and 2 of elements 0 and 1 (low half), bytes 1
		// and 3 (high half); a: bytes 0 then 2 of elements 0-3.
		a := unzip8(u0&lo32 | u1<<32)
		b := unzip8(u0>>32 | u1&^lo32)
		c := unzip8(u2&lo32 | u3<<32)
		e := unzip8(u2>>32 | u3&^lo32)
		put64(d0[i:], a&lo32|c<<32)
		put64(d1[i:], b&lo32|e<<32)
		put64(d2[i:], a>>32|c&^lo32)
		put64(d3[i:], b>>32|e&^lo32)
	}
	return i
}

// unshuffle4Go reverses shuffle4Go.
func unshuffle4Go(dst, src []byte, n, i int) int {
	s0, s1, s2, s3 := src[:n], src[n:2*n], src[2*n:3*n], src[3*n:4*n]
	for ; i+8 <= n; i += 8 {
		p0, p1, p2, p3 := le64(s0[i:]), le64(s1[i:]), le64(s2[i:]), le64(s3[i:])
		a := zip8(p0&lo32 | p2<<32)
		b := zip8(p1&lo32 | p3<<32)
		c := zip8(p0>>32 | p2&^lo32)
		e := zip8(p1>>32 | p3&^lo32)
		d := dst[4*i : 4*i+32 : 4*i+32]
		put64(d, zip8(a&lo32|b<<32))
		put64(d[8:], zip8(a>>32|b&^lo32))
		put64(d[16:], zip8(c&lo32|e<<32))
		put64(d[24:], zip8(c>>32|e&^lo32))
	}
	return i
}

// swap exchanges the bits of a under m<<s with those of b under m (a delta
// swap between two words).
func swap(a, b uint64, s uint, m uint64) (uint64, uint64) {
	t := (a>>s ^ b) & m
	return a ^ t<<s, b ^ t
}

// transpose8Go shuffles (fwd) or unshuffles 8-byte elements from i on, 8
// at a time: the 8x8 byte matrix of eight elements transposed in three
// rounds of delta swaps. It returns where it stopped.
func transpose8Go(dst, src []byte, n, i int, fwd bool) int {
	for ; i+8 <= n; i += 8 {
		var w0, w1, w2, w3, w4, w5, w6, w7 uint64
		if fwd {
			s := src[8*i:][:64]
			w0, w1, w2, w3 = le64(s), le64(s[8:]), le64(s[16:]), le64(s[24:])
			w4, w5, w6, w7 = le64(s[32:]), le64(s[40:]), le64(s[48:]), le64(s[56:])
		} else {
			w0, w1, w2, w3 = le64(src[i:]), le64(src[n+i:]), le64(src[2*n+i:]), le64(src[3*n+i:])
			w4, w5, w6, w7 = le64(src[4*n+i:]), le64(src[5*n+i:]), le64(src[6*n+i:]), le64(src[7*n+i:])
		}
		w0, w4 = swap(w0, w4, 32, lo32)
		w1, w5 = swap(w1, w5, 32, lo32)
		w2, w6 = swap(w2, w6, 32, lo32)
		w3, w7 = swap(w3, w7, 32, lo32)
		const m16, m8 = 0x0000ffff0000ffff, 0x00ff00ff00ff00ff
		w0, w2 = swap(w0, w2, 16, m16)
		w1, w3 = swap(w1, w3, 16, m16)
		w4, w6 = swap(w4, w6, 16, m16)
		w5, w7 = swap(w5, w7, 16, m16)
		w0, w1 = swap(w0, w1, 8, m8)
		w2, w3 = swap(w2, w3, 8, m8)
		w4, w5 = swap(w4, w5, 8, m8)
		w6, w7 = swap(w6, w7, 8, m8)
		if fwd {
			put64(dst[i:], w0)
			put64(dst[n+i:], w1)
			put64(dst[2*n+i:], w2)
			put64(dst[3*n+i:], w3)
			put64(dst[4*n+i:], w4)
			put64(dst[5*n+i:], w5)
			put64(dst[6*n+i:], w6)
			put64(dst[7*n+i:], w7)
		} else {
			d := dst[8*i:][:64]
			put64(d, w0)
			put64(d[8:], w1)
			put64(d[16:], w2)
			put64(d[24:], w3)
			put64(d[32:], w4)
			put64(d[40:], w5)
			put64(d[48:], w6)
			put64(d[56:], w7)
		}
	}
	return i
}
