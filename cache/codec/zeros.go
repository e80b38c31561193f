package codec

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"slices"
	"unsafe"
)

// The Zeros method stores a chunk as a bitmap of its non-zero elements
// followed by those elements, in order, and the chunk's tail (the bytes
// after its last whole element) as they are:
//
//	bitmap  [ceil(n/8)]byte  bit i%8 of byte i/8 is set when element i is not all zero bytes
//	values  [popcount(bitmap) * elemSize]byte
//	tail    [rawLen % elemSize]byte
//
// where n is the chunk's raw length / elemSize. A ReLU's output is mostly
// exact zeros (40-60% of a ResNet-50 layer12 feature), so this keeps most of
// what S2 saves on such features at a small part of its CPU: one pass, no
// shuffle, no match search (docs/CODEC.md, "The zeros method").

// elideZeros appends chunk's Zeros encoding to dst. It returns ok false
// (and dst as it was) when the encoding would not be shorter than chunk.
func elideZeros(dst, chunk []byte, es int) (out []byte, ok bool) {
	n := len(chunk) / es
	mapLen := (n + 7) / 8
	if mapLen >= len(chunk) {
		return dst, false
	}
	start := len(dst)
	// Room for an encoding as long as chunk, and one group of 8 elements
	// more: a group is written before its length is checked.
	dst = slices.Grow(dst, len(chunk)+8*es)[:start+len(chunk)+8*es]
	bm, vals := dst[start:start+mapLen], dst[start+mapLen:]
	limit := len(chunk) - mapLen - len(chunk)%es - 1 // the most value bytes an encoding that shrinks holds
	var i, p int
	// Whole groups of 8, without a branch on the data (elideGroups).
	switch es {
	case 4:
		i, p = elideGroups[uint32](bm, vals, chunk, n, limit)
	case 2:
		i, p = elideGroups[uint16](bm, vals, chunk, n, limit)
	}
	for ; i < n && p <= limit; i += 8 {
		var m byte
		for j := i; j < min(i+8, n); j++ {
			e := chunk[es*j : es*j+es]
			if !allZero(e) {
				p += copy(vals[p:], e)
				m |= 1 << (j - i)
			}
		}
		bm[i/8] = m
	}
	if p > limit {
		return dst[:start], false
	}
	p += copy(vals[p:], chunk[n*es:])
	return dst[:start+mapLen+p], true
}

// elideGroups is elideZeros's loop over whole groups of 8 elements of T's
// size (2 or 4 bytes), for as long as the value bytes written stay within
// limit. Without a branch on the data: each element is stored, and the
// position advances only past a non-zero one. It returns the first element
// it did not encode and the value bytes written.
func elideGroups[T uint16 | uint32](bm, vals, chunk []byte, n, limit int) (i, p int) {
	es := int(unsafe.Sizeof(T(0)))
	sh := 8*es - 1  // nz(v) = (v|-v)>>sh is 1 when v is not 0, without a branch
	at := T(7 * es) // q&at keeps a store inside the group's 8*es bytes
	for ; i+8 <= n && p <= limit; i += 8 {
		g := chunk[es*i : es*(i+8) : es*(i+8)]
		w := vals[p : p+8*es : p+8*es]
		v0, v1 := load[T](g[0*es:]), load[T](g[1*es:])
		v2, v3 := load[T](g[2*es:]), load[T](g[3*es:])
		v4, v5 := load[T](g[4*es:]), load[T](g[5*es:])
		v6, v7 := load[T](g[6*es:]), load[T](g[7*es:])
		n0, n1, n2, n3 := (v0|-v0)>>sh, (v1|-v1)>>sh, (v2|-v2)>>sh, (v3|-v3)>>sh
		n4, n5, n6, n7 := (v4|-v4)>>sh, (v5|-v5)>>sh, (v6|-v6)>>sh, (v7|-v7)>>sh
		q, step := T(0), T(es)
		store(w[q&at:], v0)
		q += step * n0
		store(w[q&at:], v1)
		q += step * n1
		store(w[q&at:], v2)
		q += step * n2
		store(w[q&at:], v3)
		q += step * n3
		store(w[q&at:], v4)
		q += step * n4
		store(w[q&at:], v5)
		q += step * n5
		store(w[q&at:], v6)
		q += step * n6
		store(w[q&at:], v7)
		q += step * n7
		bm[i/8] = byte(n0 | n1<<1 | n2<<2 | n3<<3 | n4<<4 | n5<<5 | n6<<6 | n7<<7)
		p += int(q)
	}
	return i, p
}

// load reads a little-endian T from the front of b.
func load[T uint16 | uint32](b []byte) T {
	if unsafe.Sizeof(T(0)) == 4 {
		return T(binary.LittleEndian.Uint32(b))
	}
	return T(binary.LittleEndian.Uint16(b))
}

// store writes v little-endian to the front of b.
func store[T uint16 | uint32](b []byte, v T) {
	if unsafe.Sizeof(T(0)) == 4 {
		binary.LittleEndian.PutUint32(b, uint32(v))
		return
	}
	binary.LittleEndian.PutUint16(b, uint16(v))
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// restoreZeros decodes a Zeros chunk into dst (its raw length), checking
// that the bitmap, the values and the tail account for every stored byte.
func restoreZeros(dst, stored []byte, es int) error {
	n := len(dst) / es
	mapLen := (n + 7) / 8
	if len(stored) < mapLen {
		return fmt.Errorf("%w: %d bytes, the bitmap needs %d", ErrCorrupt, len(stored), mapLen)
	}
	bm, vals := stored[:mapLen], stored[mapLen:]
	if n%8 != 0 && bm[mapLen-1]>>(n%8) != 0 {
		return fmt.Errorf("%w: bitmap bits past the last element", ErrCorrupt)
	}
	ones := 0
	for _, m := range bm {
		ones += bits.OnesCount8(m)
	}
	tail := len(dst) - n*es
	if ones*es+tail != len(vals) {
		return fmt.Errorf("%w: %d values and a %d-byte tail in %d bytes", ErrCorrupt, ones, tail, len(vals))
	}
	p := 0
	for b, m := range bm {
		i := 8 * b
		end := min(i+8, n)
		w := dst[es*i : es*end]
		switch m {
		case 0:
			clear(w)
			continue
		case 0xff:
			p += copy(w, vals[p:p+len(w)])
			continue
		}
		if end == i+8 { // a whole group: no branch on the data (restore4, restore2)
			switch {
			case es == 4 && p+32 <= len(vals):
				restore4(w, vals[p:p+32:p+32], m)
				p += 4 * bits.OnesCount8(m)
				continue
			case es == 2 && p+16 <= len(vals):
				restore2(w, vals[p:p+16:p+16], m)
				p += 2 * bits.OnesCount8(m)
				continue
			}
		}
		for j := i; j < end; j++ {
			e := dst[es*j : es*j+es]
			if m&(1<<(j-i)) != 0 {
				p += copy(e, vals[p:p+es])
			} else {
				clear(e)
			}
		}
	}
	copy(dst[n*es:], vals[p:])
	return nil
}

// slot[m][j] is how many of the elements before j in a group whose bitmap
// byte is m are stored: element j's value is the slot[m][j]-th.
var slot = func() (t [256][8]uint8) {
	for m := range 256 {
		c := uint8(0)
		for j := range 8 {
			t[m][j] = c
			c += uint8(m>>j) & 1
		}
	}
	return t
}()

// restore4 writes a group of 8 float32-sized elements to w (32 bytes) from
// g, which starts at the group's first value and has 32 bytes: each element
// loads its slot (independent loads) and is masked to zero when its bit is
// clear.
func restore4(w, g []byte, m byte) {
	o := &slot[m]
	w, g = w[:32], g[:32]
	b := uint32(m)
	binary.LittleEndian.PutUint32(w[0:], binary.LittleEndian.Uint32(g[(4*o[0])&28:])&-(b&1))
	binary.LittleEndian.PutUint32(w[4:], binary.LittleEndian.Uint32(g[(4*o[1])&28:])&-(b>>1&1))
	binary.LittleEndian.PutUint32(w[8:], binary.LittleEndian.Uint32(g[(4*o[2])&28:])&-(b>>2&1))
	binary.LittleEndian.PutUint32(w[12:], binary.LittleEndian.Uint32(g[(4*o[3])&28:])&-(b>>3&1))
	binary.LittleEndian.PutUint32(w[16:], binary.LittleEndian.Uint32(g[(4*o[4])&28:])&-(b>>4&1))
	binary.LittleEndian.PutUint32(w[20:], binary.LittleEndian.Uint32(g[(4*o[5])&28:])&-(b>>5&1))
	binary.LittleEndian.PutUint32(w[24:], binary.LittleEndian.Uint32(g[(4*o[6])&28:])&-(b>>6&1))
	binary.LittleEndian.PutUint32(w[28:], binary.LittleEndian.Uint32(g[(4*o[7])&28:])&-(b>>7&1))
}

// restore2 is restore4 for 2-byte elements (w and g 16 bytes).
func restore2(w, g []byte, m byte) {
	o := &slot[m]
	w, g = w[:16], g[:16]
	b := uint16(m)
	binary.LittleEndian.PutUint16(w[0:], binary.LittleEndian.Uint16(g[(2*o[0])&14:])&-(b&1))
	binary.LittleEndian.PutUint16(w[2:], binary.LittleEndian.Uint16(g[(2*o[1])&14:])&-(b>>1&1))
	binary.LittleEndian.PutUint16(w[4:], binary.LittleEndian.Uint16(g[(2*o[2])&14:])&-(b>>2&1))
	binary.LittleEndian.PutUint16(w[6:], binary.LittleEndian.Uint16(g[(2*o[3])&14:])&-(b>>3&1))
	binary.LittleEndian.PutUint16(w[8:], binary.LittleEndian.Uint16(g[(2*o[4])&14:])&-(b>>4&1))
	binary.LittleEndian.PutUint16(w[10:], binary.LittleEndian.Uint16(g[(2*o[5])&14:])&-(b>>5&1))
	binary.LittleEndian.PutUint16(w[12:], binary.LittleEndian.Uint16(g[(2*o[6])&14:])&-(b>>6&1))
	binary.LittleEndian.PutUint16(w[14:], binary.LittleEndian.Uint16(g[(2*o[7])&14:])&-(b>>7&1))
}
