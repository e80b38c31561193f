package namespace

import (
	"encoding/binary"
	"hash/maphash"
	"strings"
	"time"

	"github.com/featurefs/featurefs/fs/naming"
)

// packed is a listing's entries kept compactly: each entry is one record in
// a single byte blob (no Go string, map entry or struct per entry), found
// by name through an open-addressing table of record numbers. What a
// record holds, in order:
//
//	flags     byte: entryDir, entryUTC, entryKeyRest, entryPlain
//	name      uvarint length, bytes
//	directory: sub (uvarint length, bytes; without the listing's prefix
//	           when entryKeyRest)
//	file:      key (as sub), size (uvarint), mtime (varint Unix ns),
//	           etag, identity (uvarint length, bytes)
//
// An entry of an image dataset (a 36-byte key, a 34-byte ETag) takes about
// 100 bytes: its record, a 4-byte offset and 4 to 8 bytes of table.
type packed struct {
	prefix string   // constant: the listing's prefix, left out of keys
	blob   []byte   // the records, in the order added
	off    []uint32 // where each record starts in blob
	// table holds record numbers + 1 (0: empty), at most half full, its
	// length a power of two; probed linearly from the name's hash.
	table []uint32
}

// Record flags.
const (
	entryDir     = 1 << iota // a directory: sub instead of an object
	entryUTC                 // the object's ModTime is in UTC (else local time)
	entryKeyRest             // the key or sub starts with the listing's prefix, left out
	entryPlain               // the object is shown as it is (bucket.Object.Plain: an archive's sidecar)
)

// maxBlob bounds a listing's blob (offsets are 32-bit); a listing that
// would grow past it keeps no more entries (Listing.overflow).
const maxBlob = 1<<32 - 1

// hashSeed is the seed of the name tables' hash (maphash.String and
// maphash.Bytes agree on it).
var hashSeed = maphash.MakeSeed()

func nameHash(name string) uint64 { return maphash.String(hashSeed, name) }

// len returns the number of entries.
func (p *packed) len() int { return len(p.off) }

// bytes is what the entries take in memory (the capacity of the arrays).
func (p *packed) bytes() int {
	return cap(p.blob) + 4*cap(p.off) + 4*cap(p.table)
}

// add appends e unless an entry of that name is there; it returns whether
// it added it, and false with full when the blob would pass maxBlob.
func (p *packed) add(e naming.Entry) (added, full bool) {
	if _, ok := p.index(e.Name); ok {
		return false, false
	}
	start := len(p.blob)
	p.blob = p.encode(p.blob, e)
	if len(p.blob) > maxBlob {
		p.blob = p.blob[:start]
		return false, true
	}
	p.off = append(p.off, uint32(start))
	if 2*(len(p.off)) > len(p.table) {
		p.grow()
	} else {
		p.insert(len(p.off) - 1)
	}
	return true, false
}

// index returns the record number of name.
func (p *packed) index(name string) (int, bool) {
	if len(p.table) == 0 {
		return 0, false
	}
	mask := uint64(len(p.table) - 1)
	for i := nameHash(name) & mask; ; i = (i + 1) & mask {
		v := p.table[i]
		if v == 0 {
			return 0, false
		}
		if string(p.name(int(v-1))) == name {
			return int(v - 1), true
		}
	}
}

// insert puts record n in the table (which has room).
func (p *packed) insert(n int) {
	mask := uint64(len(p.table) - 1)
	i := maphash.Bytes(hashSeed, p.name(n)) & mask
	for p.table[i] != 0 {
		i = (i + 1) & mask
	}
	p.table[i] = uint32(n + 1)
}

// grow doubles the table (at least 8 slots) and inserts every record.
func (p *packed) grow() {
	p.table = make([]uint32, max(8, 2*len(p.table)))
	for n := range p.off {
		p.insert(n)
	}
}

// name returns record n's name without decoding the rest: the blob's
// bytes, only compared and hashed, never kept.
func (p *packed) name(n int) []byte {
	b := p.blob[p.off[n]+1:]
	l, k := binary.Uvarint(b)
	return b[k : k+int(l)]
}

// sub returns record n's prefix if it is a directory.
func (p *packed) sub(n int) (string, bool) {
	b := p.blob[p.off[n]:]
	flags := b[0]
	if flags&entryDir == 0 {
		return "", false
	}
	_, b = readString(b[1:]) // the name
	s, _ := readString(b)
	if flags&entryKeyRest != 0 {
		s = p.prefix + s
	}
	return s, true
}

// encode appends e's record to b.
func (p *packed) encode(b []byte, e naming.Entry) []byte {
	var flags byte
	key := e.Obj.Key
	if e.Dir {
		flags |= entryDir
		key = e.Sub
	} else if e.Obj.ModTime.Location() == time.UTC {
		flags |= entryUTC
	}
	if !e.Dir && e.Obj.Plain {
		flags |= entryPlain
	}
	if rest, ok := strings.CutPrefix(key, p.prefix); ok && p.prefix != "" {
		flags |= entryKeyRest
		key = rest
	}
	b = append(b, flags)
	b = appendString(b, e.Name)
	b = appendString(b, key)
	if e.Dir {
		return b
	}
	b = binary.AppendUvarint(b, uint64(e.Obj.Size))
	var ns int64
	if !e.Obj.ModTime.IsZero() {
		ns = e.Obj.ModTime.UnixNano()
	}
	b = binary.AppendVarint(b, ns)
	b = appendString(b, e.Obj.ETag)
	return appendString(b, e.Obj.Identity)
}

// entry decodes record n.
func (p *packed) entry(n int) naming.Entry {
	b := p.blob[p.off[n]:]
	flags := b[0]
	b = b[1:]
	var e naming.Entry
	e.Name, b = readString(b)
	var key string
	key, b = readString(b)
	if flags&entryKeyRest != 0 {
		key = p.prefix + key
	}
	if flags&entryDir != 0 {
		e.Dir, e.Sub = true, key
		return e
	}
	e.Obj.Key = key
	e.Obj.Plain = flags&entryPlain != 0
	size, k := binary.Uvarint(b)
	b = b[k:]
	e.Obj.Size = int64(size)
	ns, k := binary.Varint(b)
	b = b[k:]
	if ns != 0 {
		e.Obj.ModTime = time.Unix(0, ns)
		if flags&entryUTC != 0 {
			e.Obj.ModTime = e.Obj.ModTime.UTC()
		}
	}
	e.Obj.ETag, b = readString(b)
	e.Obj.Identity, _ = readString(b)
	return e
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// readString returns a copy of the length-prefixed string at the start of
// b (a copy: entries handed out outlive the blob's growth) and the rest.
func readString(b []byte) (string, []byte) {
	l, k := binary.Uvarint(b)
	end := k + int(l)
	return string(b[k:end]), b[end:]
}
