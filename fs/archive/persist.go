package archive

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
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
const indexFormat = 2

// indexPartBytes bounds one stored part of an index: an index is stored
// as a head (its figures and the number of parts) and parts of at most
// about this many bytes of members, each its own IndexStore value, so
// that storing or reading a large index holds one part's encoding at a
// time beside the members (issue 36 item 8: an index of 100k 800-byte
// paths is some 85 MB; encoded whole, it doubled the build's memory).
var indexPartBytes = 4 << 20 // a variable for the tests

// partETag is the IndexStore etag of part i (from 1) of the index of an
// archive version etag; the head is stored under etag itself.
func partETag(etag string, i int) string { return etag + "#part" + strconv.Itoa(i) }

// putIndex keeps x in the IndexStore: its parts, then its head.
func (w *Bucket) putIndex(x *index) {
	parts := 0
	for i := 0; i < len(x.members); {
		b, next := x.encodePart(i)
		parts++
		w.store.PutIndex(x.key, partETag(x.etag, parts), b)
		i = next
	}
	w.store.PutIndex(x.key, x.etag, x.encodeHead(parts))
}

// getIndex reads the index of archive key at etag from the IndexStore.
func (w *Bucket) getIndex(key, etag string) (*index, bool) {
	b, ok := w.store.GetIndex(key, etag)
	if !ok {
		return nil, false
	}
	x, n, parts, err := decodeIndex(key, etag, b)
	if err != nil {
		return nil, false
	}
	x.members = make([]member, 0, n)
	for i := 1; i <= parts; i++ {
		b, ok := w.store.GetIndex(key, partETag(etag, i))
		if !ok || x.decodePart(b, n) != nil {
			return nil, false
		}
	}
	if len(x.members) != n {
		return nil, false
	}
	return x, true
}

// encodeHead returns x's head: format, size, mtime, skipped, the error
// text ("" for none), the number of members and of parts.
func (x *index) encodeHead(parts int) []byte {
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
	return binary.AppendUvarint(b, uint64(parts))
}

// encodePart returns the part of x's members from member i: their count
// and the members, at most about indexPartBytes (at least one member);
// and the member after it.
func (x *index) encodePart(i int) ([]byte, int) {
	const most = 3*binary.MaxVarintLen64 + 4 + 2*binary.MaxVarintLen32 // a member's fixed fields, at most
	end, n := i, 0
	for end < len(x.members) && (end == i || n+len(x.members[end].path)+most <= indexPartBytes) {
		n += len(x.members[end].path) + most
		end++
	}
	b := binary.AppendUvarint(make([]byte, 0, n+binary.MaxVarintLen64), uint64(end-i))
	for _, m := range x.members[i:end] {
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
		b = binary.AppendUvarint(b, flags)
	}
	return b, end
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

var errBadIndex = errors.New("archive: bad stored index")

// decodeIndex decodes the head of the index of archive key at etag
// (encodeHead): the index, the number of its members and of the parts
// that hold them (decodePart). It allocates nothing for the members: the
// caller makes room for them once the head is read.
func decodeIndex(key, etag string, b []byte) (_ *index, members, parts int, err error) {
	defer recoverParse(&err)
	r := reader{b: b}
	if r.uvarint() != indexFormat {
		return nil, 0, 0, errBadIndex
	}
	x := &index{key: key, etag: etag, size: r.varint(), modTime: time.Unix(0, r.varint())}
	x.skipped = int(r.uvarint())
	if msg := r.string(); msg != "" {
		x.err = fmt.Errorf("%s: %w", msg, ErrBadArchive)
	}
	n, np := r.uvarint(), r.uvarint()
	if r.err != nil || len(r.b) != 0 || n > MaxMembers || np > n {
		return nil, 0, 0, errBadIndex
	}
	return x, int(n), int(np), nil
}

// decodePart appends the members of a part (encodePart) to x's, which
// may hold at most members.
func (x *index) decodePart(b []byte, members int) (err error) {
	defer recoverParse(&err)
	r := reader{b: b}
	n := r.uvarint()
	if r.err != nil || n > uint64(members-len(x.members)) {
		return errBadIndex
	}
	for range n {
		m := member{path: r.string(), off: r.varint(), size: r.varint(), usize: r.varint(), crc: r.uint32()}
		flags := r.uvarint()
		m.zip, m.plain, m.method, m.repeated = flags&1 != 0, flags&2 != 0, uint16(flags>>2), flags&(1<<18) != 0
		if r.err != nil || m.off < 0 || m.size < 0 || m.usize < 0 || m.off > x.size || m.size > x.size-m.off {
			return errBadIndex // a member outside the archive
		}
		x.members = append(x.members, m)
	}
	if len(r.b) != 0 {
		return errBadIndex
	}
	return nil
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
