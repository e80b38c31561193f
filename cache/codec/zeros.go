package codec

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"slices"
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
	p := 0
	i := 0
	if es == 4 {
		// Whole groups of 8, without a branch on the data: each element
		// is stored, and the position advances only past a non-zero one.
		for ; i+8 <= n && p <= limit; i += 8 {
			g := chunk[4*i : 4*i+32 : 4*i+32]
			w := vals[p : p+32 : p+32]
			v0, v1 := binary.LittleEndian.Uint32(g[0:]), binary.LittleEndian.Uint32(g[4:])
			v2, v3 := binary.LittleEndian.Uint32(g[8:]), binary.LittleEndian.Uint32(g[12:])
			v4, v5 := binary.LittleEndian.Uint32(g[16:]), binary.LittleEndian.Uint32(g[20:])
			v6, v7 := binary.LittleEndian.Uint32(g[24:]), binary.LittleEndian.Uint32(g[28:])
			// nz(v) is 1 when v is not 0, without a branch.
			n0, n1, n2, n3 := (v0|-v0)>>31, (v1|-v1)>>31, (v2|-v2)>>31, (v3|-v3)>>31
			n4, n5, n6, n7 := (v4|-v4)>>31, (v5|-v5)>>31, (v6|-v6)>>31, (v7|-v7)>>31
			q := uint32(0)
			binary.LittleEndian.PutUint32(w[q&28:], v0)
			q += 4 * n0
			binary.LittleEndian.PutUint32(w[q&28:], v1)
			q += 4 * n1
			binary.LittleEndian.PutUint32(w[q&28:], v2)
			q += 4 * n2
			binary.LittleEndian.PutUint32(w[q&28:], v3)
			q += 4 * n3
			binary.LittleEndian.PutUint32(w[q&28:], v4)
			q += 4 * n4
			binary.LittleEndian.PutUint32(w[q&28:], v5)
			q += 4 * n5
			binary.LittleEndian.PutUint32(w[q&28:], v6)
			q += 4 * n6
			binary.LittleEndian.PutUint32(w[q&28:], v7)
			q += 4 * n7
			m := byte(n0 | n1<<1 | n2<<2 | n3<<3 | n4<<4 | n5<<5 | n6<<6 | n7<<7)
			bm[i/8] = m
			p += int(q)
		}
	}
	if es == 2 {
		for ; i+8 <= n && p <= limit; i += 8 {
			g := chunk[2*i : 2*i+16 : 2*i+16]
			w := vals[p : p+16 : p+16]
			v0, v1 := binary.LittleEndian.Uint16(g[0:]), binary.LittleEndian.Uint16(g[2:])
			v2, v3 := binary.LittleEndian.Uint16(g[4:]), binary.LittleEndian.Uint16(g[6:])
			v4, v5 := binary.LittleEndian.Uint16(g[8:]), binary.LittleEndian.Uint16(g[10:])
			v6, v7 := binary.LittleEndian.Uint16(g[12:]), binary.LittleEndian.Uint16(g[14:])
			n0, n1, n2, n3 := (v0|-v0)>>15, (v1|-v1)>>15, (v2|-v2)>>15, (v3|-v3)>>15
			n4, n5, n6, n7 := (v4|-v4)>>15, (v5|-v5)>>15, (v6|-v6)>>15, (v7|-v7)>>15
			q := uint16(0)
			binary.LittleEndian.PutUint16(w[q&14:], v0)
			q += 2 * n0
			binary.LittleEndian.PutUint16(w[q&14:], v1)
			q += 2 * n1
			binary.LittleEndian.PutUint16(w[q&14:], v2)
			q += 2 * n2
			binary.LittleEndian.PutUint16(w[q&14:], v3)
			q += 2 * n3
			binary.LittleEndian.PutUint16(w[q&14:], v4)
			q += 2 * n4
			binary.LittleEndian.PutUint16(w[q&14:], v5)
			q += 2 * n5
			binary.LittleEndian.PutUint16(w[q&14:], v6)
			q += 2 * n6
			binary.LittleEndian.PutUint16(w[q&14:], v7)
			q += 2 * n7
			bm[i/8] = byte(n0 | n1<<1 | n2<<2 | n3<<3 | n4<<4 | n5<<5 | n6<<6 | n7<<7)
			p += int(q)
		}
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
