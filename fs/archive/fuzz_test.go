package archive

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/binary"
	"hash/crc32"
	"testing"

	"github.com/featurefs/featurefs/fs/archive/archivetest"
)

// The archive parsers' fuzz targets (make fuzz): each calls the parser
// itself, not its recovering wrapper, so that a panic is found here
// rather than hidden; and checks what the rest of the package relies on.

// memGet is a getRange over b that fails the test on a read outside it.
func memGet(t *testing.T, b []byte) getRange {
	return func(_ context.Context, off, n int64) ([]byte, error) {
		if off < 0 || n < 0 || off > int64(len(b)) {
			t.Fatalf("read of %d bytes at %d: outside the %d-byte archive", n, off, len(b))
		}
		return b[off:min(off+n, int64(len(b)))], nil
	}
}

// checkMembers checks members indexed from an archive of size bytes: each
// within the archive, and a zip member read to exactly its declared bytes
// with its CRC.
func checkMembers(t *testing.T, get getRange, size int64, members []member) {
	for i := range members {
		m := &members[i]
		if m.off < 0 || m.size < 0 || m.usize < 0 || m.off > size || m.size > size-m.off {
			t.Fatalf("member %q: %d bytes at %d, outside the %d-byte archive", m.path, m.size, m.off, size)
		}
		if p, why := cleanPath(m.path); why != "" || p != m.path {
			t.Fatalf("member path %q kept (%s)", m.path, why)
		}
		if m.usize > 4<<20 {
			continue // a fuzzed size the mount's member bound refuses before reading
		}
		data, err := memberBytes(ctx, get, m)
		if err != nil {
			continue
		}
		if int64(len(data)) != m.usize {
			t.Fatalf("member %q read as %d bytes, declares %d", m.path, len(data), m.usize)
		}
		if m.zip && crc32.ChecksumIEEE(data) != m.crc {
			t.Fatalf("member %q read with a CRC mismatch", m.path)
		}
	}
}

// Seeds are small: the fuzzer minimizes every new input it finds, and
// the time that takes grows with the input's size.
func seedZips(f *testing.F) {
	files := []file{{"a.jpg", payload(1, 60)}, {"b/c.png", payload(2, 30)}, {"b/c.cls", []byte("1")}}
	f.Add(zipBytes(f, files, zip.Deflate))
	stored := zipBytes(f, files, zip.Store)
	f.Add(stored)
	for _, at := range []uint64{0, 1<<63 - 1, 1 << 62, 1<<64 - 1} {
		z, err := archivetest.Zip64(stored, at)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(z)
	}
	over, err := archivetest.OverDeclared(2, payload(3, 200), 30_000)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(over)
	f.Add(tarBytes(f, files)) // a tar named .zip
	f.Add([]byte{})
}

// FuzzIndexZip: the zip central directory and zip64 records, and the
// members' local headers and deflate streams.
func FuzzIndexZip(f *testing.F) {
	seedZips(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		get := memGet(t, b)
		members, _, err := indexZip(ctx, get, int64(len(b)), func(string, string) {})
		if err != nil && len(members) > 0 {
			t.Fatalf("%d members and an error: %v", len(members), err)
		}
		checkMembers(t, get, int64(len(b)), members)
	})
}

// FuzzZip64End: the zip64 end record and its locator's fields, on a real
// archive's central directory (fuzzing whole archives rarely reaches
// them with the offsets that matter).
func FuzzZip64End(f *testing.F) {
	files := []file{{"a.jpg", payload(1, 30)}, {"d/b.jpg", payload(2, 20)}}
	stored := zipBytes(f, files, zip.Store)
	e := stored[len(stored)-eocdLen:]
	dirSize, dirAt := uint64(binary.LittleEndian.Uint32(e[12:])), uint64(binary.LittleEndian.Uint32(e[16:]))
	recAt := uint64(len(stored) - eocdLen)
	f.Add(recAt, uint64(2), dirSize, dirAt, uint32(0x06064b50))
	f.Add(uint64(1<<63-1), uint64(2), dirSize, dirAt, uint32(0x06064b50))
	f.Add(recAt, uint64(1<<63-1), dirSize, dirAt, uint32(0x06064b50))
	f.Add(recAt, uint64(2), uint64(1<<63-1), dirAt, uint32(0x06064b50))
	f.Add(recAt, uint64(2), dirSize, uint64(1<<63-1), uint32(0x06064b50))
	f.Add(recAt, uint64(2), uint64(1<<64-1), uint64(1<<64-1), uint32(0))
	f.Fuzz(func(t *testing.T, recAt, entries, dirSize, dirAt uint64, sig uint32) {
		z, err := archivetest.Zip64(stored, recAt)
		if err != nil {
			t.Fatal(err)
		}
		rec := z[len(stored)-eocdLen:]
		binary.LittleEndian.PutUint32(rec, sig)
		binary.LittleEndian.PutUint64(rec[32:], entries)
		binary.LittleEndian.PutUint64(rec[40:], dirSize)
		binary.LittleEndian.PutUint64(rec[48:], dirAt)
		get := memGet(t, z)
		members, _, err := indexZip(ctx, get, int64(len(z)), func(string, string) {})
		if err == nil && (int64(entries) < 0 || int64(dirAt) < 0 || int64(dirSize) < 0) {
			t.Fatalf("absurd zip64 figures (%d entries, %d bytes at %d) accepted", entries, dirSize, dirAt)
		}
		checkMembers(t, get, int64(len(z)), members)
	})
}

// FuzzIndexTar: the tar header walk.
func FuzzIndexTar(f *testing.F) {
	files := []file{{"a.jpg", payload(1, 100)}, {"b/c.png", payload(2, 30)}, {"../up.jpg", []byte("x")}}
	t0 := tarBytes(f, files)
	f.Add(t0)
	f.Add(t0[:len(t0)-1024-300])
	huge := bytes.Clone(t0)
	copy(huge[124:136], "77777777777\x00") // a size field of 8 GiB
	fixChecksum(huge[:512])
	f.Add(huge)
	f.Add(zipBytes(f, files, zip.Store)) // a zip named .tar
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		get := memGet(t, b)
		members, _, err := indexTar(ctx, get, int64(len(b)), func(string, string) {})
		if err != nil && len(members) > 0 {
			t.Fatalf("%d members and an error: %v", len(members), err)
		}
		checkMembers(t, get, int64(len(b)), members)
	})
}

// FuzzDecodeIndex: an archive index kept in the cache (persist.go), its
// head and one part, read back at the next mount.
func FuzzDecodeIndex(f *testing.F) {
	files := []file{{"a.jpg", payload(1, 30)}, {"b/c.png", payload(2, 20)}, {"b/c.cls", []byte("1")}}
	for _, arch := range [][]byte{tarBytes(f, files), zipBytes(f, files, zip.Deflate)} {
		get := func(_ context.Context, off, n int64) ([]byte, error) {
			return arch[off:min(off+n, int64(len(arch)))], nil
		}
		name := "x.tar"
		if arch[0] == 'P' {
			name = "x.zip"
		}
		members, _, err := indexArchive(ctx, name, get, int64(len(arch)), func(string, string) {})
		if err != nil {
			f.Fatal(err)
		}
		x := &index{key: name, size: int64(len(arch)), members: members}
		x.finish(nil)
		part, _ := x.encodePart(0)
		f.Add(x.encodeHead(1), part)
	}
	f.Add([]byte{indexFormat, 0, 0, 0, 0, 0xff, 0xff, 0x3f, 1}, []byte{1})
	f.Fuzz(func(t *testing.T, head, part []byte) {
		x, n, parts, err := decodeIndex("x.tar", "e", head)
		if err != nil {
			return
		}
		if n < 0 || n > MaxMembers || parts < 0 || parts > n {
			t.Fatalf("head of %d members in %d parts accepted", n, parts)
		}
		x.members = make([]member, 0, min(n, 1024))
		if parts == 0 || x.decodePart(part, n) != nil {
			return
		}
		if len(x.members) > n {
			t.Fatalf("%d members decoded, the head says %d", len(x.members), n)
		}
		for _, m := range x.members {
			if m.off < 0 || m.size < 0 || m.usize < 0 || m.off > x.size || m.size > x.size-m.off {
				t.Fatalf("stored member %q: %d bytes at %d in %d", m.path, m.size, m.off, x.size)
			}
		}
		if len(x.members) == n && parts == 1 {
			p2, _ := x.encodePart(0)
			y, n2, _, err := decodeIndex("x.tar", "e", x.encodeHead(1))
			if err != nil || n2 != n || y.decodePart(p2, n2) != nil || len(y.members) != n {
				t.Fatalf("decode(encode(x)) differs: %v", err)
			}
		}
	})
}
