package archive

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// IndexStore keeps archive indexes across mounts (cmd/featurefs keeps them
// in the feature cache, under the source's identity, the archive key and
// its ETag), so that a remount reads no archive again: with the ETag the
// parent's listing gave, an archive's index comes from the store without
// a request. Implementations are safe for concurrent use; a failing Put
// is only a lost optimisation.
type IndexStore interface {
	// GetIndex returns the encoded index of archive key at etag.
	GetIndex(key, etag string) ([]byte, bool)
	// PutIndex keeps it.
	PutIndex(key, etag string, v []byte)
}

// SetIndexStore makes w keep its indexes in s too. Call it before w is
// used.
func (w *Bucket) SetIndexStore(s IndexStore) { w.store = s }

// CountIndexBytes makes count hear every change of Stats().IndexBytes
// (the memory of the indexes kept), starting with what is kept now: a
// mount counts the indexes in its metadata budget (fs.New).
func (w *Bucket) CountIndexBytes(count func(delta int64)) { w.indexes.countBytes(count) }

// maxListed bounds the archives whose listed version is remembered.
const maxListed = 1 << 16

// listedVersion returns the version of archive key its parent's listing
// gave, if remembered.
func (w *Bucket) listedVersion(key string) (listedObj, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	o, ok := w.listed[key]
	return o, ok
}

// remember records an archive's version from its parent's listing.
func (w *Bucket) remember(key string, o listedObj) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.listed) >= maxListed {
		clear(w.listed)
	}
	w.listed[key] = o
}

// listedObj is what a listing said of an archive.
type listedObj struct {
	etag    string
	size    int64
	modTime time.Time
}

// indexFormat versions the encoding.
const indexFormat = 1

// encode returns x as bytes: format, size, mtime, skipped, the error text
// ("" for none), the members.
func (x *index) encode() []byte {
	b := binary.AppendUvarint(nil, indexFormat)
	b = binary.AppendVarint(b, x.size)
	b = binary.AppendVarint(b, x.modTime.UnixNano())
	b = binary.AppendUvarint(b, uint64(x.skipped))
	msg := ""
	if x.err != nil {
		msg = x.err.Error()
	}
	b = appendString(b, msg)
	b = binary.AppendUvarint(b, uint64(len(x.members)))
	for _, m := range x.members {
		b = appendString(b, m.path)
		b = binary.AppendVarint(b, m.off)
		b = binary.AppendVarint(b, m.size)
		b = binary.AppendVarint(b, m.usize)
		b = binary.LittleEndian.AppendUint32(b, m.crc)
		flags := uint64(m.method) << 2
		if m.zip {
			flags |= 1
		}
		if m.plain {
			flags |= 2
		}
		if m.repeated {
			flags |= 1 << 18 // above the method's 16 bits
		}
		b = binary.AppendUvarint(b, uint64(flags))
	}
	return b
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

var errBadIndex = errors.New("archive: bad stored index")

// decodeIndex is encode's inverse for archive key at etag.
func decodeIndex(key, etag string, b []byte) (*index, error) {
	r := reader{b: b}
	if r.uvarint() != indexFormat {
		return nil, errBadIndex
	}
	x := &index{key: key, etag: etag, size: r.varint(), modTime: time.Unix(0, r.varint())}
	x.skipped = int(r.uvarint())
	if msg := r.string(); msg != "" {
		x.err = fmt.Errorf("%s: %w", msg, ErrBadArchive)
	}
	n := r.uvarint()
	if r.err != nil || n > MaxMembers {
		return nil, errBadIndex
	}
	x.members = make([]member, 0, n)
	for range n {
		m := member{path: r.string(), off: r.varint(), size: r.varint(), usize: r.varint(), crc: r.uint32()}
		flags := r.uvarint()
		m.zip, m.plain, m.method, m.repeated = flags&1 != 0, flags&2 != 0, uint16(flags>>2), flags&(1<<18) != 0
		if r.err != nil {
			return nil, errBadIndex
		}
		x.members = append(x.members, m)
	}
	return x, nil
}

// reader decodes encode's fields; a short or bad input sets err.
type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err, r.b = errBadIndex, nil
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err, r.b = errBadIndex, nil
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) uint32() uint32 {
	if len(r.b) < 4 {
		r.err, r.b = errBadIndex, nil
		return 0
	}
	v := binary.LittleEndian.Uint32(r.b)
	r.b = r.b[4:]
	return v
}

func (r *reader) string() string {
	n := r.uvarint()
	if uint64(len(r.b)) < n {
		r.err, r.b = errBadIndex, nil
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}
