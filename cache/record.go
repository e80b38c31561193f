package cache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"sync"

	"github.com/featurefs/featurefs/cache/codec"
)

// Badger key prefixes.
const (
	prefixValue    = 'v' // 'v' + id -> framed value (value log)
	prefixMeta     = 'm' // 'm' + id -> metaRecord (inline in the LSM tree)
	prefixSetting  = 's' // 's' + name -> store settings
	prefixSentinel = 'z' // written then dropped to force a flush and compaction
)

func dbKey(prefix byte, i id) []byte {
	k := make([]byte, 1+IDLen)
	k[0] = prefix
	copy(k[1:], i[:])
	return k
}

// Value framing: a 16-byte header, then (flags 1) a table of one CRC-32C
// per chunk of the bytes, then the bytes.
//
//	magic   [4]byte "FFC1"
//	crc     uint32  flags 1: CRC-32C over the id, length, flags and table;
//	                flags 0: CRC-32C over the id and the bytes
//	length  uint32  number of bytes
//	flags   uint32  1 (chunked); 2 (compressed); 0 (whole, written before
//	                per-chunk CRCs)
//	table   [ceil(length/chunkSize)]uint32: chunk k's CRC-32C over the
//	        id, k (uint32) and the chunk's bytes (flags 1 only)
//
// Flags 2: the header is followed by a cache/codec blob of the bytes
// (chunks of 64 KiB, each compressed and with the CRC-32C of its raw
// bytes); crc is the CRC-32C over the id, length, flags and the blob's own
// header CRC (which covers its chunk table).
//
// Chunks let a read of part of a value (the kernel asking again for a few
// pages of a file whose page cache lost them) verify and copy, or
// decompress, that part alone: ReadAt. Values written with flags 0 are still
// read, verified whole.
const headerLen = 16

var magic = [4]byte{'F', 'F', 'C', '1'}

const (
	flagsWhole   = 0
	flagsChunked = 1
	flagsCodec   = 2
	// chunkSize is the unit of a chunked value's checksums.
	chunkSize = 64 << 10
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errChecksum is returned for a value that fails its checksum or framing.
var errChecksum = errors.New("cache: value checksum mismatch")

// checksum is a flags-0 value's CRC.
func checksum(i id, data []byte) uint32 {
	c := crc32.Update(0, castagnoli, i[:])
	return crc32.Update(c, castagnoli, data)
}

// chunkCRC is chunk k's CRC in a flags-1 value, given seed = CRC-32C of the id.
func chunkCRC(seed uint32, k int, chunk []byte) uint32 {
	var kb [4]byte
	binary.LittleEndian.PutUint32(kb[:], uint32(k))
	return crc32.Update(crc32.Update(seed, castagnoli, kb[:]), castagnoli, chunk)
}

func numChunks(n int) int { return (n + chunkSize - 1) / chunkSize }

// encodeCompressed frames data for storage compressed with m (flags 2),
// elemSize being the size of its elements (the codec's shuffle).
func encodeCompressed(i id, data []byte, elemSize int, m codec.Method) ([]byte, error) {
	return encodeCompressedTo(nil, i, data, elemSize, m)
}

// encodeCompressedTo is encodeCompressed into dst's array when it is large
// enough (recordCap).
func encodeCompressedTo(dst []byte, i id, data []byte, elemSize int, m codec.Method) ([]byte, error) {
	rec := dst[:0]
	if cap(rec) < headerLen {
		rec = make([]byte, 0, headerLen+len(data)/2)
	}
	rec = rec[:headerLen]
	copy(rec, magic[:])
	binary.LittleEndian.PutUint32(rec[8:], uint32(len(data)))
	binary.LittleEndian.PutUint32(rec[12:], flagsCodec)
	rec, err := codec.Encode(rec, data, elemSize, m)
	if err != nil {
		return nil, err
	}
	binary.LittleEndian.PutUint32(rec[4:], codecHeaderCRC(crc32.Update(0, castagnoli, i[:]), rec))
	return rec, nil
}

// recordCap is the capacity a buffer needs to take any record of a value of
// n bytes without growing: the codec's bound, its slack (a chunk's encoder
// may ask for one group of elements more than the chunk) and the header.
func recordCap(n int) int { return headerLen + max(codec.MaxLen(n)+64, 4*numChunks(n)+n) }

// recPool holds Put's record buffers (*[]byte): a record is encoded into
// one and handed to Badger, which has copied it once the commit returns.
// A sync.Pool: what it holds is dropped at the next garbage collections.
var recPool sync.Pool

// recordBuf returns a buffer from recPool with at least n bytes' capacity.
func recordBuf(n int) *[]byte {
	bp, _ := recPool.Get().(*[]byte)
	if bp == nil || cap(*bp) < n {
		b := make([]byte, 0, n)
		bp = &b
	}
	return bp
}

// codecHeaderCRC is a flags-2 record's crc, given seed = CRC-32C of the id.
func codecHeaderCRC(seed uint32, rec []byte) uint32 {
	c := crc32.Update(seed, castagnoli, rec[8:headerLen])
	return crc32.Update(c, castagnoli, rec[headerLen+12:headerLen+16]) // the blob's header CRC
}

// encodeValue frames data for storage (flags 1).
func encodeValue(i id, data []byte) []byte { return encodeValueTo(nil, i, data) }

// encodeValueTo is encodeValue into dst's array when it is large enough.
func encodeValueTo(dst []byte, i id, data []byte) []byte {
	nc := numChunks(len(data))
	n := headerLen + 4*nc + len(data)
	rec := dst[:0]
	if cap(rec) < n {
		rec = make([]byte, n)
	}
	rec = rec[:n]
	copy(rec, magic[:])
	binary.LittleEndian.PutUint32(rec[8:], uint32(len(data)))
	binary.LittleEndian.PutUint32(rec[12:], flagsChunked)
	seed := crc32.Update(0, castagnoli, i[:])
	table := rec[headerLen : headerLen+4*nc]
	for k := range nc {
		chunk := data[k*chunkSize : min((k+1)*chunkSize, len(data))]
		binary.LittleEndian.PutUint32(table[4*k:], chunkCRC(seed, k, chunk))
	}
	binary.LittleEndian.PutUint32(rec[4:], crc32.Update(seed, castagnoli, rec[8:headerLen+4*nc]))
	copy(rec[headerLen+4*nc:], data)
	return rec
}

// frame is a parsed value whose header (and, chunked, table) checked out.
type frame struct {
	seed  uint32 // CRC-32C of the id
	crc   uint32 // flags 0: the bytes' CRC
	table []byte // flags 1: the chunk CRCs
	data  []byte // flags 0 and 1: the bytes, aliasing the record, not yet verified
	blob  []byte // flags 2: the codec blob, aliasing the record
	n     int    // the bytes' length
}

// parseFrame checks a framed value's header, length and (chunked) table.
func parseFrame(i id, rec []byte) (frame, error) {
	if len(rec) < headerLen || [4]byte(rec[:4]) != magic {
		return frame{}, fmt.Errorf("%w: bad header", errChecksum)
	}
	n := int64(binary.LittleEndian.Uint32(rec[8:]))
	f := frame{seed: crc32.Update(0, castagnoli, i[:]), crc: binary.LittleEndian.Uint32(rec[4:])}
	tableLen := int64(0)
	flags := binary.LittleEndian.Uint32(rec[12:])
	switch flags {
	case flagsWhole:
	case flagsChunked:
		tableLen = 4 * int64(numChunks(int(n)))
	case flagsCodec:
		if len(rec) < headerLen+16 || codecHeaderCRC(f.seed, rec) != f.crc {
			return frame{}, fmt.Errorf("%w: compressed value's header", errChecksum)
		}
		f.blob, f.n = rec[headerLen:], int(n)
		return f, nil
	default:
		return frame{}, fmt.Errorf("%w: unknown flags %#x", errChecksum, flags)
	}
	if headerLen+tableLen+n != int64(len(rec)) {
		return frame{}, fmt.Errorf("%w: length %d, have %d bytes", errChecksum, n, int64(len(rec))-headerLen-tableLen)
	}
	if flags == flagsChunked {
		f.table = rec[headerLen : headerLen+tableLen]
		if got := crc32.Update(f.seed, castagnoli, rec[8:headerLen+tableLen]); got != f.crc {
			return frame{}, fmt.Errorf("%w: header crc %08x, want %08x", errChecksum, got, f.crc)
		}
	}
	f.data = rec[headerLen+tableLen:]
	f.n = len(f.data)
	return f, nil
}

// decodeBlob returns a flags-2 frame's bytes, checking their length.
func (f frame) decodeBlob() ([]byte, error) {
	data, err := codec.Decode(make([]byte, 0, f.n), f.blob)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errChecksum, err)
	}
	if len(data) != f.n {
		return nil, fmt.Errorf("%w: %d bytes decoded, header says %d", errChecksum, len(data), f.n)
	}
	return data, nil
}

func (f frame) chunked() bool { return f.table != nil }

// storedLen is what a record costs against the budget: its bytes, or its
// compressed blob.
func storedLen(rec []byte, rawLen int) int {
	if len(rec) >= headerLen && binary.LittleEndian.Uint32(rec[12:]) == flagsCodec {
		return len(rec) - headerLen
	}
	return rawLen
}

// verifyChunk checks chunk k of a chunked frame, given its bytes.
func (f frame) verifyChunk(k int, chunk []byte) error {
	want := binary.LittleEndian.Uint32(f.table[4*k:])
	if got := chunkCRC(f.seed, k, chunk); got != want {
		return fmt.Errorf("%w: chunk %d crc %08x, want %08x", errChecksum, k, got, want)
	}
	return nil
}

// decodeValue verifies a framed value and returns its bytes, which alias rec.
func decodeValue(i id, rec []byte) ([]byte, error) {
	f, err := parseFrame(i, rec)
	if err != nil {
		return nil, err
	}
	if f.blob != nil {
		return f.decodeBlob()
	}
	if !f.chunked() {
		if got := crc32.Update(f.seed, castagnoli, f.data); got != f.crc {
			return nil, fmt.Errorf("%w: crc %08x, want %08x", errChecksum, got, f.crc)
		}
		return f.data, nil
	}
	for k := range numChunks(len(f.data)) {
		if err := f.verifyChunk(k, f.data[k*chunkSize:min((k+1)*chunkSize, len(f.data))]); err != nil {
			return nil, err
		}
	}
	return f.data, nil
}

// copyChunk is how much copyVerified copies before checksumming it, so the
// checksum reads from the CPU cache rather than memory. It is chunkSize, so
// a chunked value's chunks are verified as they are copied.
const copyChunk = chunkSize

// copyVerified copies a framed value's bytes out of rec (Badger's mapping
// of the value log) into a new buffer of exactly their size and verifies
// the checksums of the copy, chunk by chunk as it is made.
func copyVerified(i id, rec []byte) ([]byte, error) {
	f, err := parseFrame(i, rec)
	if err != nil {
		return nil, err
	}
	if f.blob != nil {
		return f.decodeBlob()
	}
	n := len(f.data)
	data := make([]byte, n)
	c := f.seed
	for off, k := 0, 0; off < n; off, k = off+copyChunk, k+1 {
		end := min(off+copyChunk, n)
		copy(data[off:end], f.data[off:end])
		if f.chunked() {
			if err := f.verifyChunk(k, data[off:end]); err != nil {
				return nil, err
			}
		} else {
			c = crc32.Update(c, castagnoli, data[off:end])
		}
	}
	if !f.chunked() && c != f.crc {
		return nil, fmt.Errorf("%w: crc %08x, want %08x", errChecksum, c, f.crc)
	}
	return data, nil
}

// readAtVerified copies the bytes of a framed value from off into dst and
// returns how many it copied (fewer than len(dst) only at the end of the
// value) and the value's size. A chunked value verifies only the chunks
// the range touches; a flags-0 one is verified whole first.
func readAtVerified(i id, rec []byte, dst []byte, off int64) (int, int, error) {
	f, err := parseFrame(i, rec)
	if err != nil {
		return 0, 0, err
	}
	if f.blob != nil {
		n, size, err := codec.ReadAt(f.blob, dst, off)
		if err != nil {
			if errors.Is(err, codec.ErrCorrupt) {
				err = fmt.Errorf("%w: %v", errChecksum, err)
			}
			return 0, size, err
		}
		if size != f.n {
			return 0, size, fmt.Errorf("%w: %d bytes in the blob, header says %d", errChecksum, size, f.n)
		}
		return n, size, nil
	}
	size := len(f.data)
	if off < 0 {
		return 0, size, fmt.Errorf("cache: read at negative offset %d", off)
	}
	if off >= int64(size) {
		return 0, size, nil
	}
	end := min(int(off)+len(dst), size)
	if !f.chunked() {
		if got := crc32.Update(f.seed, castagnoli, f.data); got != f.crc {
			return 0, size, fmt.Errorf("%w: crc %08x, want %08x", errChecksum, got, f.crc)
		}
		return copy(dst, f.data[off:end]), size, nil
	}
	n := 0
	for k := int(off) / chunkSize; k*chunkSize < end; k++ {
		cs, ce := k*chunkSize, min((k+1)*chunkSize, size)
		// A damaged chunk returns an error, never its bytes.
		if err := f.verifyChunk(k, f.data[cs:ce]); err != nil {
			return 0, size, err
		}
		n += copy(dst[n:], f.data[max(cs, int(off)):min(ce, end)])
	}
	return n, size, nil
}

// metaRecord is the small record kept next to each value: its size, an
// access sequence number (higher is more recent) and what it holds, so Open
// can rebuild the LRU index and its counts without reading values.
type metaRecord struct {
	size uint32
	seq  uint64
	kind entryKind
}

// A feature's record is version 1 (as before kinds, so that an older
// binary still reads it); any other kind's is version 2, one byte longer.
const (
	metaVersion     = 1
	metaLen         = 1 + 4 + 8
	metaKindVersion = 2
	metaKindLen     = metaLen + 1
)

func (m metaRecord) encode() []byte {
	if m.kind == kindFeature {
		b := make([]byte, metaLen)
		b[0] = metaVersion
		binary.LittleEndian.PutUint32(b[1:], m.size)
		binary.LittleEndian.PutUint64(b[5:], m.seq)
		return b
	}
	b := make([]byte, metaKindLen)
	b[0] = metaKindVersion
	binary.LittleEndian.PutUint32(b[1:], m.size)
	binary.LittleEndian.PutUint64(b[5:], m.seq)
	b[metaLen] = byte(m.kind)
	return b
}

func decodeMeta(b []byte) (metaRecord, error) {
	switch {
	case len(b) == metaLen && b[0] == metaVersion:
	case len(b) == metaKindLen && b[0] == metaKindVersion && entryKind(b[metaLen]) == kindArchiveIndex:
	default:
		return metaRecord{}, fmt.Errorf("cache: bad metadata record (%d bytes)", len(b))
	}
	m := metaRecord{
		size: binary.LittleEndian.Uint32(b[1:]),
		seq:  binary.LittleEndian.Uint64(b[5:]),
	}
	if len(b) == metaKindLen {
		m.kind = entryKind(b[metaLen])
	}
	return m, nil
}
