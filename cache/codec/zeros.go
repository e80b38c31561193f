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
// shuffle, no match search (docs/CACHE.md, "Compression").

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
		if es == 4 && end == i+8 && p+32 <= len(vals) {
			// A whole group with a value per element to read: no branch
			// on the data; a zero element reads the next value and masks it.
			g := vals[p : p+32 : p+32]
			q := 0
			for j := range 8 {
				bit := int(m>>j) & 1
				v := binary.LittleEndian.Uint32(g[q:]) & -uint32(bit)
				binary.LittleEndian.PutUint32(w[4*j:], v)
				q += 4 * bit
			}
			p += q
			continue
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
