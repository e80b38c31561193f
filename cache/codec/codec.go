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
// Encode, Decode and ReadAt are safe for concurrent use, and allocate
// nothing when dst has room (their chunk-sized scratch buffers come from a
// pool). docs/CODEC.md has what each step costs.
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

// HeaderLen is the length of a blob's fixed header, which MetaLen reads.
const HeaderLen = headerLen

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
	if uint64(len(raw)) > MaxRawLen {
		return nil, fmt.Errorf("codec: %d bytes is over the limit of %d", len(raw), uint64(MaxRawLen))
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
	binary.LittleEndian.PutUint32(h[12:], crc32.Update(crc32.Checksum(h[:12], castagnoli), castagnoli, h[headerLen:headerLen+entryLen*nc]))
	return dst, nil
}

// blob is a parsed blob whose header and table checked out.
type blob struct {
	method   Method
	elemSize int
	rawLen   int
	table    []byte
	data     int // the first chunk's offset in b
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
	bl := blob{method: m, elemSize: es, rawLen: raw, table: b[headerLen:end], data: end, b: b}
	off := end
	for k := range nc {
		l := bl.storedLen(k)
		if l < 0 || l > len(b)-off { // l < 0: over 2^31 on a 32-bit platform
			return blob{}, fmt.Errorf("%w: chunk %d runs past the end", ErrCorrupt, k)
		}
		off += l
	}
	if off != len(b) {
		return blob{}, fmt.Errorf("%w: %d bytes after the last chunk", ErrCorrupt, len(b)-off)
	}
	return bl, nil
}

// storedLen is chunk k's stored length.
func (bl blob) storedLen(k int) int { return int(binary.LittleEndian.Uint32(bl.table[entryLen*k:])) }

// offset is chunk k's offset in b.
func (bl blob) offset(k int) int {
	off := bl.data
	for j := range k {
		off += bl.storedLen(j)
	}
	return off
}

// MetaLen returns the length of the header and chunk table of the blob
// whose first HeaderLen bytes (at least) are b, from its header's raw
// length; the header's checksum, which covers the table, is not checked.
// A reader of a blob in a file reads that much first, then Span.
func MetaLen(b []byte) (int, error) {
	if len(b) < headerLen || !IsBlob(b) {
		return 0, fmt.Errorf("%w: no header", ErrCorrupt)
	}
	return headerLen + entryLen*numChunks(int(binary.LittleEndian.Uint32(b[8:]))), nil
}

// Span returns the part b[start:end] of blob b that ReadAt(b, p, off) with
// len(p) == n reads: the stored chunks the range touches (start == end
// when it reads none). It reads only b's header and chunk table (MetaLen
// bytes), which it checks as ReadAt does; b must have the blob's whole
// length, but its bytes outside the table and [start, end) are never read
// by either, so a reader of a blob in a file reads only the table and the
// span (cache/files.go).
func Span(b []byte, off int64, n int) (start, end int, err error) {
	bl, err := parse(b)
	if err != nil {
		return 0, 0, err
	}
	if off < 0 {
		return 0, 0, fmt.Errorf("codec: read at negative offset %d", off)
	}
	if off >= int64(bl.rawLen) {
		return 0, 0, nil
	}
	last := min(int(off)+n, bl.rawLen)
	k := int(off) / ChunkSize
	start = bl.offset(k)
	end = start
	for ; k*ChunkSize < last; k++ { // ReadAt's loop
		end += bl.storedLen(k)
	}
	return start, end, nil
}

// RawLen returns the raw length a blob holds, checking its header.
func RawLen(b []byte) (int, error) {
	bl, err := parse(b)
	return bl.rawLen, err
}

// chunk decodes chunk k, stored at b[off:], into dst (its raw length) using
// tmp (at least as long) for the shuffled bytes, and checks its CRC.
func (bl blob) chunk(k, off int, dst, tmp []byte) error {
	stored := bl.b[off : off+bl.storedLen(k)]
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

// tmpPool holds chunk-sized scratch buffers (the shuffled bytes of a chunk
// on its way in or out): at most a few per goroutine inside Encode, Decode
// or ReadAt, returned before they return.
var tmpPool = sync.Pool{New: func() any { b := make([]byte, ChunkSize); return &b }}

// Decode appends the raw bytes of blob b to dst and returns them. It
// allocates only when dst has no room for them.
func Decode(dst, b []byte) ([]byte, error) {
	bl, err := parse(b)
	if err != nil {
		return nil, err
	}
	start := len(dst)
	dst = slices.Grow(dst, bl.rawLen)[:start+bl.rawLen]
	tp := tmpPool.Get().(*[]byte)
	defer tmpPool.Put(tp)
	off := bl.data
	for k := range numChunks(bl.rawLen) {
		if err := bl.chunk(k, off, dst[start+k*ChunkSize:start+min((k+1)*ChunkSize, bl.rawLen)], *tp); err != nil {
			return nil, err
		}
		off += bl.storedLen(k)
	}
	return dst, nil
}

// ReadAt copies the raw bytes of blob b from off into p, decoding only the
// chunks the range touches, and returns how many it copied (fewer than
// len(p) only at the end) and the raw length. A chunk the range covers
// whole is decoded straight into p.
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
	var rp *[]byte // taken for the first chunk read in part
	defer func() {
		if rp != nil {
			tmpPool.Put(rp)
		}
	}()
	n := 0
	k := int(off) / ChunkSize
	for at := bl.offset(k); k*ChunkSize < end; k++ {
		cs, ce := k*ChunkSize, min((k+1)*ChunkSize, bl.rawLen)
		if int(off) <= cs && ce <= end { // the whole chunk
			if err := bl.chunk(k, at, p[n:n+ce-cs], *tp); err != nil {
				return 0, bl.rawLen, err
			}
			n += ce - cs
		} else {
			if rp == nil {
				rp = tmpPool.Get().(*[]byte)
			}
			raw := (*rp)[:ce-cs]
			if err := bl.chunk(k, at, raw, *tp); err != nil {
				return 0, bl.rawLen, err
			}
			n += copy(p[n:], raw[max(cs, int(off))-cs:min(ce, end)-cs])
		}
		at += bl.storedLen(k)
	}
	return n, bl.rawLen, nil
}
