package archive

import (
	"bytes"
	"compress/flate"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
)

// zip record signatures and fixed sizes.
const (
	eocdSig      = 0x06054b50
	eocdLen      = 22
	centralSig   = 0x02014b50
	centralLen   = 46
	localSig     = 0x04034b50
	localLen     = 30
	maxComment   = 0xffff
	localSlack   = 256 // bytes read past a member's central extra field, for its local one
	zipEncrypted = 0x1
	bombFloor    = 1 << 20 // a member inflating to at most this is no bomb, whatever its ratio
)

// indexZip reads a zip archive's central directory: one ranged GET of the
// tail (end record and comment), and a second of the directory when the
// tail does not hold it.
func indexZip(ctx context.Context, get getRange, size int64, note func(name, why string)) ([]member, int, error) {
	gets := 0
	tailLen := min(size, eocdLen+maxComment)
	if tailLen < eocdLen {
		return nil, gets, fmt.Errorf("%d bytes: too short for a zip archive: %w", size, ErrBadArchive)
	}
	tailAt := size - tailLen
	tail, err := get(ctx, tailAt, tailLen)
	gets++
	if err != nil {
		return nil, gets, err
	}
	if int64(len(tail)) != tailLen {
		return nil, gets, fmt.Errorf("short read of the end record: %w", ErrBadArchive)
	}
	e := -1
	for i := len(tail) - eocdLen; i >= 0; i-- {
		if binary.LittleEndian.Uint32(tail[i:]) == eocdSig && i+eocdLen+int(binary.LittleEndian.Uint16(tail[i+20:])) <= len(tail) {
			e = i
			break
		}
	}
	if e < 0 {
		return nil, gets, fmt.Errorf("no end of central directory record (truncated, or not a zip archive): %w", ErrBadArchive)
	}
	rec := tail[e:]
	entries := int64(binary.LittleEndian.Uint16(rec[10:]))
	dirSize := int64(binary.LittleEndian.Uint32(rec[12:]))
	dirAt := int64(binary.LittleEndian.Uint32(rec[16:]))
	if binary.LittleEndian.Uint16(rec[4:]) != 0 || binary.LittleEndian.Uint16(rec[6:]) != 0 {
		return nil, gets, fmt.Errorf("multi-disk archive: %w", ErrBadArchive)
	}
	eocdAt := tailAt + int64(e)
	if entries == 0xffff || dirSize == 0xffffffff || dirAt == 0xffffffff {
		// zip64: the locator just before the end record names the zip64
		// end record, which has the real figures.
		var n int
		var err error
		entries, dirSize, dirAt, eocdAt, n, err = zip64End(ctx, get, tail, tailAt, eocdAt)
		gets += n
		if err != nil {
			return nil, gets, err
		}
	}
	// Offsets and sizes come from the archive: compared against lengths,
	// never added to (an addition of two of them can wrap negative).
	if dirSize > MaxDirectoryBytes || entries > MaxMembers || dirAt > eocdAt || dirSize > eocdAt-dirAt {
		return nil, gets, fmt.Errorf("central directory of %d bytes at %d, %d entries, end record at %d: %w", dirSize, dirAt, entries, eocdAt, ErrBadArchive)
	}
	var dir []byte
	if dirAt >= tailAt {
		dir = tail[dirAt-tailAt : dirAt-tailAt+dirSize]
	} else {
		if dir, err = get(ctx, dirAt, dirSize); err != nil {
			return nil, gets + 1, err
		}
		gets++
		if int64(len(dir)) != dirSize {
			return nil, gets, fmt.Errorf("short read of the central directory: %w", ErrBadArchive)
		}
	}
	var out []member
	for n := int64(0); n < entries; n++ {
		if len(dir) < centralLen || binary.LittleEndian.Uint32(dir) != centralSig {
			return nil, gets, fmt.Errorf("central directory entry %d: bad record: %w", n, ErrBadArchive)
		}
		flags := binary.LittleEndian.Uint16(dir[8:])
		method := binary.LittleEndian.Uint16(dir[10:])
		crc := binary.LittleEndian.Uint32(dir[16:])
		csize := int64(binary.LittleEndian.Uint32(dir[20:]))
		usize := int64(binary.LittleEndian.Uint32(dir[24:]))
		nameLen := int(binary.LittleEndian.Uint16(dir[28:]))
		extraLen := int(binary.LittleEndian.Uint16(dir[30:]))
		commentLen := int(binary.LittleEndian.Uint16(dir[32:]))
		off := int64(binary.LittleEndian.Uint32(dir[42:]))
		recLen := centralLen + nameLen + extraLen + commentLen
		if len(dir) < recLen {
			return nil, gets, fmt.Errorf("central directory entry %d: truncated: %w", n, ErrBadArchive)
		}
		name := string(dir[centralLen : centralLen+nameLen])
		if usize == 0xffffffff || csize == 0xffffffff || off == 0xffffffff {
			zip64Sizes(dir[centralLen+nameLen:centralLen+nameLen+extraLen], &usize, &csize, &off)
		}
		dir = dir[recLen:]
		if len(name) > 0 && name[len(name)-1] == '/' {
			continue // a directory
		}
		switch {
		case flags&zipEncrypted != 0:
			note(name, "encrypted")
			continue
		case method != 0 && method != 8:
			note(name, fmt.Sprintf("compression method %d (only stored and deflated)", method))
			continue
		case csize == 0xffffffff || usize == 0xffffffff || off == 0xffffffff || csize < 0 || usize < 0 || off < 0:
			note(name, "zip64 sizes missing or absurd")
			continue
		case off > dirAt || dirAt-off < localLen+int64(nameLen) || csize > dirAt-off-localLen-int64(nameLen):
			note(name, fmt.Sprintf("%d bytes at %d: past the archive's data (%d)", csize, off, dirAt))
			continue
		case method == 0 && usize != csize:
			note(name, fmt.Sprintf("stored member of %d bytes declares %d", csize, usize))
			continue
		case method == 8 && usize > MaxRatio*csize && usize > bombFloor:
			note(name, fmt.Sprintf("inflates %d bytes to %d (ratio over %d: a zip bomb)", csize, usize, MaxRatio))
			continue
		}
		path, why := cleanPath(name)
		if why != "" {
			note(name, why)
			continue
		}
		out = append(out, member{path: path, off: off, size: csize, usize: usize, crc: crc, method: method, zip: true})
	}
	return out, gets, nil
}

// readZipMember reads member m: one ranged GET of its local header and
// compressed bytes (a second when the local extra field is longer than
// guessed), inflated (deflate) up to its declared size, its CRC-32 checked.
func readZipMember(ctx context.Context, get getRange, m *member) ([]byte, int, error) {
	gets := 1
	nameLen := int64(len(m.path)) // a guess; the local header says
	want := localLen + nameLen + localSlack + m.size
	b, err := get(ctx, m.off, want)
	if err != nil {
		return nil, gets, err
	}
	if len(b) < localLen || binary.LittleEndian.Uint32(b) != localSig {
		return nil, gets, fmt.Errorf("member %s: no local header at %d: %w", m.path, m.off, ErrBadArchive)
	}
	start := int64(localLen) + int64(binary.LittleEndian.Uint16(b[26:])) + int64(binary.LittleEndian.Uint16(b[28:]))
	if start+m.size > int64(len(b)) {
		more, err := get(ctx, m.off+int64(len(b)), start+m.size-int64(len(b)))
		gets++
		if err != nil {
			return nil, gets, err
		}
		b = append(b, more...)
		if start+m.size > int64(len(b)) {
			return nil, gets, fmt.Errorf("member %s: past the archive's end: %w", m.path, ErrBadArchive)
		}
	}
	raw := b[start : start+m.size]
	var data []byte
	if m.method == 0 {
		data = raw
	} else {
		var err error
		if data, err = inflate(raw, m.usize); err != nil {
			return nil, gets, fmt.Errorf("member %s: %w", m.path, err)
		}
	}
	if crc32.ChecksumIEEE(data) != m.crc {
		return nil, gets, fmt.Errorf("member %s: CRC-32 mismatch: %w", m.path, ErrBadArchive)
	}
	return data, gets, nil
}

// inflateStart is the most an inflate allocates before the bytes come:
// a member's declared size is the archive's word, and a member declaring
// 64 MiB that inflates to 300 KB must not cost 64 MiB.
const inflateStart = 256 << 10

// inflate inflates raw (deflate) into exactly usize bytes: the buffer
// grows as the bytes come (from at most inflateStart, or twice raw's
// length, doubling up to usize+1 to see one byte too many), never from
// the declared size alone; more or fewer bytes than usize fail with
// ErrBadArchive.
func inflate(raw []byte, usize int64) ([]byte, error) {
	zr := flate.NewReader(bytes.NewReader(raw))
	defer zr.Close()
	limit := usize + 1
	buf := make([]byte, 0, min(limit, max(inflateStart, 2*int64(len(raw)))))
	for {
		if len(buf) == cap(buf) {
			if int64(len(buf)) >= limit {
				return nil, fmt.Errorf("inflates to more than the %d bytes it declares: %w", usize, ErrBadArchive)
			}
			buf = slices.Grow(buf, int(min(int64(cap(buf)), limit-int64(cap(buf)))))
			buf = buf[:len(buf):min(int64(cap(buf)), limit)]
		}
		k, err := zr.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+k]
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("inflating: %v: %w", err, ErrBadArchive)
		}
	}
	if n := int64(len(buf)); n != usize {
		if n > usize {
			return nil, fmt.Errorf("inflates to more than the %d bytes it declares: %w", usize, ErrBadArchive)
		}
		return nil, fmt.Errorf("inflates to only %d bytes, declares %d: %w", n, usize, ErrBadArchive)
	}
	return buf, nil
}

// zip64 record signatures and sizes.
const (
	zip64LocatorSig = 0x07064b50
	zip64LocatorLen = 20
	zip64EndSig     = 0x06064b50
	zip64EndLen     = 56
	zip64ExtraID    = 0x0001
)

// zip64End reads the zip64 end record that the locator before the end
// record at eocdAt names (from the tail when it holds it, else with one
// more GET): entries, the directory's size and offset, and where the
// directory must end (the zip64 end record).
func zip64End(ctx context.Context, get getRange, tail []byte, tailAt, eocdAt int64) (entries, dirSize, dirAt, end int64, gets int, err error) {
	bad := func(what string) error { return fmt.Errorf("zip64 archive: %s: %w", what, ErrBadArchive) }
	loc := eocdAt - zip64LocatorLen - tailAt
	if loc < 0 || binary.LittleEndian.Uint32(tail[loc:]) != zip64LocatorSig {
		return 0, 0, 0, 0, 0, bad("no zip64 end locator")
	}
	recAt := int64(binary.LittleEndian.Uint64(tail[loc+8:]))
	if recAt < 0 || recAt > eocdAt-zip64LocatorLen-zip64EndLen { // recAt+zip64EndLen could wrap
		return 0, 0, 0, 0, 0, bad(fmt.Sprintf("zip64 end record at %d", recAt))
	}
	var rec []byte
	if recAt >= tailAt {
		rec = tail[recAt-tailAt : recAt-tailAt+zip64EndLen]
	} else {
		if rec, err = get(ctx, recAt, zip64EndLen); err != nil {
			return 0, 0, 0, 0, 1, err
		}
		gets = 1
		if len(rec) != zip64EndLen {
			return 0, 0, 0, 0, gets, bad("short zip64 end record")
		}
	}
	if binary.LittleEndian.Uint32(rec) != zip64EndSig {
		return 0, 0, 0, 0, gets, bad("bad zip64 end record")
	}
	entries = int64(binary.LittleEndian.Uint64(rec[32:]))
	dirSize = int64(binary.LittleEndian.Uint64(rec[40:]))
	dirAt = int64(binary.LittleEndian.Uint64(rec[48:]))
	if entries < 0 || dirSize < 0 || dirAt < 0 {
		return 0, 0, 0, 0, gets, bad("absurd sizes")
	}
	return entries, dirSize, dirAt, recAt, gets, nil
}

// zip64Sizes takes a central entry's sizes and offset that are 0xffffffff
// from its zip64 extra field (in the order usize, csize, offset, each
// present only when its 32-bit field is 0xffffffff); one it cannot find
// stays 0xffffffff.
func zip64Sizes(extra []byte, usize, csize, off *int64) {
	for len(extra) >= 4 {
		id, n := binary.LittleEndian.Uint16(extra), int(binary.LittleEndian.Uint16(extra[2:]))
		if len(extra) < 4+n {
			return
		}
		if id == zip64ExtraID {
			f := extra[4 : 4+n]
			for _, p := range []*int64{usize, csize, off} {
				if *p != 0xffffffff {
					continue
				}
				if len(f) < 8 {
					return
				}
				*p = int64(binary.LittleEndian.Uint64(f))
				f = f[8:]
			}
			return
		}
		extra = extra[4+n:]
	}
}
