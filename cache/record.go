package cache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
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

// Value framing: a 16-byte header, then the bytes.
//
//	magic   [4]byte "FFC1"
//	crc     uint32  CRC-32C over the id and the bytes
//	length  uint32  number of bytes
//	flags   uint32  reserved, zero
const headerLen = 16

var magic = [4]byte{'F', 'F', 'C', '1'}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errChecksum is returned by decodeValue for a value that fails its checksum
// or framing.
var errChecksum = errors.New("cache: value checksum mismatch")

func checksum(i id, data []byte) uint32 {
	c := crc32.Update(0, castagnoli, i[:])
	return crc32.Update(c, castagnoli, data)
}

// encodeValue frames data for storage.
func encodeValue(i id, data []byte) []byte {
	rec := make([]byte, headerLen+len(data))
	copy(rec, magic[:])
	binary.LittleEndian.PutUint32(rec[4:], checksum(i, data))
	binary.LittleEndian.PutUint32(rec[8:], uint32(len(data)))
	copy(rec[headerLen:], data)
	return rec
}

// decodeValue verifies a framed value and returns its bytes, which alias rec.
func decodeValue(i id, rec []byte) ([]byte, error) {
	n, want, err := parseHeader(rec)
	if err != nil {
		return nil, err
	}
	data := rec[headerLen : headerLen+n]
	if got := checksum(i, data); want != got {
		return nil, fmt.Errorf("%w: crc %08x, want %08x", errChecksum, got, want)
	}
	return data, nil
}

// parseHeader checks a framed value's header against its length and
// returns the data length and the expected checksum.
func parseHeader(rec []byte) (n int, crc uint32, err error) {
	if len(rec) < headerLen || [4]byte(rec[:4]) != magic {
		return 0, 0, fmt.Errorf("%w: bad header", errChecksum)
	}
	if flags := binary.LittleEndian.Uint32(rec[12:]); flags != 0 {
		return 0, 0, fmt.Errorf("%w: unknown flags %#x", errChecksum, flags)
	}
	l := binary.LittleEndian.Uint32(rec[8:])
	if int64(l) != int64(len(rec)-headerLen) {
		return 0, 0, fmt.Errorf("%w: length %d, have %d bytes", errChecksum, l, len(rec)-headerLen)
	}
	return int(l), binary.LittleEndian.Uint32(rec[4:]), nil
}

// copyChunk is how much copyVerified copies before checksumming it, so the
// checksum reads from the CPU cache rather than memory.
const copyChunk = 64 << 10

// copyVerified copies a framed value's bytes out of rec (Badger's mapping
// of the value log) into a new buffer of exactly their size and verifies
// the checksum of the copy, chunk by chunk as it is made.
func copyVerified(i id, rec []byte) ([]byte, error) {
	n, want, err := parseHeader(rec)
	if err != nil {
		return nil, err
	}
	src := rec[headerLen:]
	data := make([]byte, n)
	c := crc32.Update(0, castagnoli, i[:])
	for off := 0; off < n; off += copyChunk {
		end := min(off+copyChunk, n)
		copy(data[off:end], src[off:end])
		c = crc32.Update(c, castagnoli, data[off:end])
	}
	if c != want {
		return nil, fmt.Errorf("%w: crc %08x, want %08x", errChecksum, c, want)
	}
	return data, nil
}

// metaRecord is the small record kept next to each value: its size and an
// access sequence number (higher is more recent), so Open can rebuild the LRU
// index without reading values.
type metaRecord struct {
	size uint32
	seq  uint64
}

const (
	metaVersion = 1
	metaLen     = 1 + 4 + 8
)

func (m metaRecord) encode() []byte {
	b := make([]byte, metaLen)
	b[0] = metaVersion
	binary.LittleEndian.PutUint32(b[1:], m.size)
	binary.LittleEndian.PutUint64(b[5:], m.seq)
	return b
}

func decodeMeta(b []byte) (metaRecord, error) {
	if len(b) != metaLen || b[0] != metaVersion {
		return metaRecord{}, fmt.Errorf("cache: bad metadata record (%d bytes)", len(b))
	}
	return metaRecord{
		size: binary.LittleEndian.Uint32(b[1:]),
		seq:  binary.LittleEndian.Uint64(b[5:]),
	}, nil
}
