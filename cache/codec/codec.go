// Package codec is featurefs's lossless codec for feature tensors: the bytes
// of a .npy file (or any byte string) cut into 64 KiB chunks, each chunk's
// bytes shuffled by element size (byte k of every element together: the
// sign and exponent bytes of float32 and float16 activations are few
// distinct values, and ReLU's zeros make runs) and compressed on its own
// (S2, by default, or zstd), so that a read of part of a feature
// decompresses only the chunks it needs (ReadAt). Every chunk carries a CRC-32C of its raw bytes, and the
// header and chunk table a CRC of their own: damage is an error, never
// wrong bytes. A chunk that does not shrink is stored as it is.
//
// The format, version 1 (all integers little-endian):
//
//	magic    [4]byte "FFZ1"
//	version  uint8   1
//	elemSize uint8   1, 2, 4 or 8: the shuffle's unit (1: no shuffle)
//	method   uint8   1: S2; 2: zstd (its fastest level); 3: zstd (default level);
//	                 4: zeros (no shuffle: a bitmap of the non-zero elements, then
//	                 those elements; zeros.go)
//	reserved uint8   0
//	rawLen   uint32  the raw length
//	crc      uint32  CRC-32C over the 12 bytes above and the table
//	table    [ceil(rawLen/ChunkSize)] of {compLen uint32; rawCRC uint32}:
//	         a chunk's stored length (equal to its raw length: stored raw)
//	         and the CRC-32C of its raw bytes
//	chunks   the stored chunks, in order
//
// Encode, Decode and ReadAt are safe for concurrent use.
package codec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"runtime"
	"slices"
	"sync"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
)

// ChunkSize is the raw size of a chunk (the last may be shorter).
const ChunkSize = 64 << 10

const (
	version   = 1
	headerLen = 16
	entryLen  = 8
	// MaxRawLen bounds the raw length (rawLen is a uint32).
	MaxRawLen = 1<<32 - 1
)

var magic = [4]byte{'F', 'F', 'Z', '1'}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt is returned for a blob that fails its checks.
var ErrCorrupt = errors.New("codec: corrupt or not a feature blob")

// Method is how chunks are compressed. S2 is the default: on ResNet-50
// layer12 features it stores 1.69x less (zstd's fastest level 1.78x) and
// encodes about 5x and decodes about 3x faster than zstd (docs/bench/
// codec.md), which matters on the read path and where a GPU extracts a
// gigabyte of features per second.
type Method uint8

// Methods.
const (
	S2          Method = 1
	ZstdFastest Method = 2
	ZstdDefault Method = 3
	// Zeros stores only the non-zero elements of a chunk and a bitmap of
	// where they were: on ReLU activations it keeps most of S2's saving
	// for a small part of its CPU (zeros.go). Blobs written with it are
	// read only by builds that know it (older ones drop such an entry as
	// damaged and recompute it).
	Zeros Method = 4
)

// String names the method.
func (m Method) String() string {
	switch m {
	case S2:
		return "s2"
	case ZstdFastest:
		return "zstd-fastest"
	case ZstdDefault:
		return "zstd"
	case Zeros:
		return "zeros"
	}
	return fmt.Sprintf("method-%d", uint8(m))
}

// ParseMethod returns the method a name (String) names.
func ParseMethod(name string) (Method, error) {
	for _, m := range []Method{S2, ZstdFastest, ZstdDefault, Zeros} {
		if m.String() == name {
			return m, nil
		}
	}
	return 0, fmt.Errorf("codec: unknown method %q (s2, zeros, zstd-fastest or zstd)", name)
}

// IsBlob reports whether b starts as a blob does (its magic).
func IsBlob(b []byte) bool { return len(b) >= 4 && [4]byte(b[:4]) == magic }

var (
	encMu    sync.Mutex
	encoders = map[Method]*zstd.Encoder{}
	decOnce  sync.Once
	decoder  *zstd.Decoder
)

func zstdEncoder(m Method) *zstd.Encoder {
	encMu.Lock()
	defer encMu.Unlock()
	e, ok := encoders[m]
	if !ok {
		l := zstd.SpeedFastest
		if m == ZstdDefault {
			l = zstd.SpeedDefault
		}
		var err error
		e, err = zstd.NewWriter(nil, zstd.WithEncoderLevel(l), zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)),
			zstd.WithZeroFrames(true), zstd.WithEncoderCRC(false), zstd.WithLowerEncoderMem(true))
		if err != nil {
			panic(err) // only for invalid options
		}
		encoders[m] = e
	}
	return e
}

func dec() *zstd.Decoder {
	decOnce.Do(func() {
		var err error
		decoder, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(runtime.GOMAXPROCS(0)),
			zstd.WithDecoderLowmem(true), zstd.WithDecoderMaxMemory(4*ChunkSize))
		if err != nil {
			panic(err)
		}
	})
	return decoder
}

func numChunks(n int) int { return (n + ChunkSize - 1) / ChunkSize }

// MaxLen is the most bytes the blob of rawLen raw bytes takes (every
// chunk stored raw): a reader that knows the raw length it expects bounds
// a blob's length with it before reading it.
func MaxLen(rawLen int) int { return headerLen + entryLen*numChunks(rawLen) + rawLen }

// shuffle writes src's bytes to dst grouped by their position in an element
// of size es: byte 0 of every element, then byte 1, ... A tail shorter than
// an element is copied as it is.
func shuffle(dst, src []byte, es int) {
	n := len(src) / es
	switch es {
	case 4:
		d0, d1, d2, d3, s := dst[:n], dst[n:2*n], dst[2*n:3*n], dst[3*n:4*n], src[:4*n]
		for i := range d0 {
			e := s[4*i : 4*i+4 : 4*i+4]
			d0[i], d1[i], d2[i], d3[i] = e[0], e[1], e[2], e[3]
		}
		copy(dst[4*n:], src[4*n:])
		return
	case 2:
		d0, d1, s := dst[:n], dst[n:2*n], src[:2*n]
		for i := range d0 {
			e := s[2*i : 2*i+2 : 2*i+2]
			d0[i], d1[i] = e[0], e[1]
		}
		copy(dst[2*n:], src[2*n:])
		return
	}
	for b := range es {
		d := dst[b*n : (b+1)*n]
		for i := range d {
			d[i] = src[i*es+b]
		}
	}
	copy(dst[n*es:], src[n*es:])
}

// unshuffle reverses shuffle.
func unshuffle(dst, src []byte, es int) {
	n := len(dst) / es
	switch es {
	case 4:
		s0, s1, s2, s3, d := src[:n], src[n:2*n], src[2*n:3*n], src[3*n:4*n], dst[:4*n]
		i := 0
		// Eight elements at a time: an 8-byte load from each plane, the
		// bytes spread into 16- then 32-bit lanes, four 8-byte stores
		// (about 1.6x the byte loop's speed, BenchmarkUnshuffle4).
		for ; i+8 <= n; i += 8 {
			a := binary.LittleEndian.Uint64(s0[i:])
			b := binary.LittleEndian.Uint64(s1[i:])
			c := binary.LittleEndian.Uint64(s2[i:])
			e := binary.LittleEndian.Uint64(s3[i:])
			ab0 := spread8(uint32(a)) | spread8(uint32(b))<<8
			ab1 := spread8(uint32(a>>32)) | spread8(uint32(b>>32))<<8
			ce0 := spread8(uint32(c)) | spread8(uint32(e))<<8
			ce1 := spread8(uint32(c>>32)) | spread8(uint32(e>>32))<<8
			o := d[4*i : 4*i+32 : 4*i+32]
			binary.LittleEndian.PutUint64(o[0:], spread16(uint32(ab0))|spread16(uint32(ce0))<<16)
			binary.LittleEndian.PutUint64(o[8:], spread16(uint32(ab0>>32))|spread16(uint32(ce0>>32))<<16)
			binary.LittleEndian.PutUint64(o[16:], spread16(uint32(ab1))|spread16(uint32(ce1))<<16)
			binary.LittleEndian.PutUint64(o[24:], spread16(uint32(ab1>>32))|spread16(uint32(ce1>>32))<<16)
		}
		for ; i < n; i++ {
			e := d[4*i : 4*i+4 : 4*i+4]
			e[0], e[1], e[2], e[3] = s0[i], s1[i], s2[i], s3[i]
		}
		copy(dst[4*n:], src[4*n:])
		return
	case 2:
		s0, s1, d := src[:n], src[n:2*n], dst[:2*n]
		for i := range s0 {
			e := d[2*i : 2*i+2 : 2*i+2]
			e[0], e[1] = s0[i], s1[i]
		}
		copy(dst[2*n:], src[2*n:])
		return
	}
	for b := range es {
		s := src[b*n : (b+1)*n]
		for i, v := range s {
			dst[i*es+b] = v
		}
	}
	copy(dst[n*es:], src[n*es:])
}

// spread8 moves byte k of x to bits 16k..16k+7.
func spread8(x uint32) uint64 {
	v := uint64(x)
	v = (v | v<<16) & 0x0000ffff0000ffff
	return (v | v<<8) & 0x00ff00ff00ff00ff
}

// spread16 moves 16-bit lane k of x to bits 32k..32k+15.
func spread16(x uint32) uint64 {
	v := uint64(x)
	return (v | v<<16) & 0x0000ffff0000ffff
}

// Encode appends the blob of raw to dst and returns it. elemSize is the
// size of raw's elements (1, 2, 4 or 8; anything else is 1): a .npy file's
// header is a multiple of 64 bytes, so its elements stay aligned in every
// chunk.
func Encode(dst, raw []byte, elemSize int, m Method) ([]byte, error) {
	switch m {
	case S2, ZstdFastest, ZstdDefault, Zeros:
	default:
		return nil, fmt.Errorf("codec: unknown method %d", m)
	}
	if len(raw) > MaxRawLen {
		return nil, fmt.Errorf("codec: %d bytes is over the limit of %d", len(raw), MaxRawLen)
	}
	switch elemSize {
	case 1, 2, 4, 8:
	default:
		elemSize = 1
	}
	nc := numChunks(len(raw))
	start := len(dst)
	dst = append(dst, make([]byte, headerLen+entryLen*nc)...)
	h := dst[start:]
	copy(h, magic[:])
	h[4], h[5], h[6] = version, byte(elemSize), byte(m)
	binary.LittleEndian.PutUint32(h[8:], uint32(len(raw)))
	bp := tmpPool.Get().(*[]byte)
	defer tmpPool.Put(bp)
	for k := range nc {
		chunk := raw[k*ChunkSize : min((k+1)*ChunkSize, len(raw))]
		before := len(dst)
		if m == Zeros {
			var ok bool
			if dst, ok = elideZeros(dst, chunk, elemSize); !ok {
				dst = append(dst, chunk...)
			}
			ent := dst[start+headerLen+entryLen*k:]
			binary.LittleEndian.PutUint32(ent, uint32(len(dst)-before))
			binary.LittleEndian.PutUint32(ent[4:], crc32.Checksum(chunk, castagnoli))
			continue
		}
		s := (*bp)[:len(chunk)]
		shuffle(s, chunk, elemSize)
		if m == S2 {
			dst = slices.Grow(dst, s2.MaxEncodedLen(len(s)))
			dst = dst[:before+len(s2.Encode(dst[before:before+s2.MaxEncodedLen(len(s))], s))]
		} else {
			dst = zstdEncoder(m).EncodeAll(s, dst)
		}
		if len(dst)-before >= len(chunk) { // did not shrink: stored raw
			dst = append(dst[:before], chunk...)
		}
		ent := dst[start+headerLen+entryLen*k:]
		binary.LittleEndian.PutUint32(ent, uint32(len(dst)-before))
		binary.LittleEndian.PutUint32(ent[4:], crc32.Checksum(chunk, castagnoli))
	}
	h = dst[start:]
	binary.LittleEndian.PutUint32(h[12:], crc32.Checksum(append(h[:12:12], h[headerLen:headerLen+entryLen*nc]...), castagnoli))
	return dst, nil
}

// blob is a parsed blob whose header and table checked out.
type blob struct {
	method   Method
	elemSize int
	rawLen   int
	table    []byte
	offs     []int // each chunk's offset in b, and the end
	b        []byte
}

func parse(b []byte) (blob, error) {
	if len(b) < headerLen || !IsBlob(b) {
		return blob{}, fmt.Errorf("%w: no header", ErrCorrupt)
	}
	if b[4] != version {
		return blob{}, fmt.Errorf("%w: version %d (this build reads %d)", ErrCorrupt, b[4], version)
	}
	es := int(b[5])
	switch es {
	case 1, 2, 4, 8:
	default:
		return blob{}, fmt.Errorf("%w: element size %d", ErrCorrupt, es)
	}
	m := Method(b[6])
	switch m {
	case S2, ZstdFastest, ZstdDefault, Zeros:
	default:
		return blob{}, fmt.Errorf("%w: method %d", ErrCorrupt, m)
	}
	raw := int(binary.LittleEndian.Uint32(b[8:]))
	nc := numChunks(raw)
	end := headerLen + entryLen*nc
	if end < 0 || end > len(b) {
		return blob{}, fmt.Errorf("%w: %d bytes, the table needs %d", ErrCorrupt, len(b), end)
	}
	crc := crc32.Update(crc32.Checksum(b[:12], castagnoli), castagnoli, b[headerLen:end])
	if crc != binary.LittleEndian.Uint32(b[12:]) {
		return blob{}, fmt.Errorf("%w: header checksum", ErrCorrupt)
	}
	bl := blob{method: m, elemSize: es, rawLen: raw, table: b[headerLen:end], offs: make([]int, nc+1), b: b}
	off := end
	for k := range nc {
		bl.offs[k] = off
		off += int(binary.LittleEndian.Uint32(bl.table[entryLen*k:]))
		if off > len(b) || off < bl.offs[k] {
			return blob{}, fmt.Errorf("%w: chunk %d runs past the end", ErrCorrupt, k)
		}
	}
	if off != len(b) {
		return blob{}, fmt.Errorf("%w: %d bytes after the last chunk", ErrCorrupt, len(b)-off)
	}
	bl.offs[nc] = off
	return bl, nil
}

// RawLen returns the raw length a blob holds, checking its header.
func RawLen(b []byte) (int, error) {
	bl, err := parse(b)
	return bl.rawLen, err
}

// chunk decodes chunk k into dst (its raw length) using tmp (at least as
// long) for the shuffled bytes, and checks its CRC.
func (bl blob) chunk(k int, dst, tmp []byte) error {
	stored := bl.b[bl.offs[k]:bl.offs[k+1]]
	if len(stored) == len(dst) {
		copy(dst, stored)
	} else if bl.method == Zeros {
		if err := restoreZeros(dst, stored, bl.elemSize); err != nil {
			return fmt.Errorf("chunk %d: %w", k, err)
		}
	} else {
		var s []byte
		var err error
		if bl.method == S2 {
			var n int
			if n, err = s2.DecodedLen(stored); err == nil && n != len(dst) {
				return fmt.Errorf("%w: chunk %d holds %d bytes, want %d", ErrCorrupt, k, n, len(dst))
			}
			if err == nil {
				s, err = s2.Decode(tmp[:len(dst)], stored)
			}
		} else {
			s, err = dec().DecodeAll(stored, tmp[:0])
		}
		if err != nil {
			return fmt.Errorf("%w: chunk %d: %v", ErrCorrupt, k, err)
		}
		if len(s) != len(dst) {
			return fmt.Errorf("%w: chunk %d decodes to %d bytes, want %d", ErrCorrupt, k, len(s), len(dst))
		}
		unshuffle(dst, s, bl.elemSize)
	}
	if crc32.Checksum(dst, castagnoli) != binary.LittleEndian.Uint32(bl.table[entryLen*k+4:]) {
		return fmt.Errorf("%w: chunk %d checksum", ErrCorrupt, k)
	}
	return nil
}

var tmpPool = sync.Pool{New: func() any { b := make([]byte, ChunkSize); return &b }}

// Decode appends the raw bytes of blob b to dst and returns them.
func Decode(dst, b []byte) ([]byte, error) {
	bl, err := parse(b)
	if err != nil {
		return nil, err
	}
	start := len(dst)
	dst = append(dst, make([]byte, bl.rawLen)...)
	tp := tmpPool.Get().(*[]byte)
	defer tmpPool.Put(tp)
	for k := range len(bl.offs) - 1 {
		if err := bl.chunk(k, dst[start+k*ChunkSize:start+min((k+1)*ChunkSize, bl.rawLen)], *tp); err != nil {
			return nil, err
		}
	}
	return dst, nil
}

// ReadAt copies the raw bytes of blob b from off into p, decoding only the
// chunks the range touches, and returns how many it copied (fewer than
// len(p) only at the end) and the raw length.
func ReadAt(b, p []byte, off int64) (int, int, error) {
	bl, err := parse(b)
	if err != nil {
		return 0, 0, err
	}
	if off < 0 {
		return 0, bl.rawLen, fmt.Errorf("codec: read at negative offset %d", off)
	}
	if off >= int64(bl.rawLen) {
		return 0, bl.rawLen, nil
	}
	end := min(int(off)+len(p), bl.rawLen)
	tp := tmpPool.Get().(*[]byte)
	defer tmpPool.Put(tp)
	rp := tmpPool.Get().(*[]byte)
	defer tmpPool.Put(rp)
	n := 0
	for k := int(off) / ChunkSize; k*ChunkSize < end; k++ {
		cs, ce := k*ChunkSize, min((k+1)*ChunkSize, bl.rawLen)
		raw := (*rp)[:ce-cs]
		if err := bl.chunk(k, raw, *tp); err != nil {
			return 0, bl.rawLen, err
		}
		n += copy(p[n:], raw[max(cs, int(off))-cs:min(ce, end)-cs])
	}
	return n, bl.rawLen, nil
}
