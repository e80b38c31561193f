package cache

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestFileHoldsExactlyTheBytes: an uncompressed large value's file holds
// exactly its bytes (the header and chunk table are in Badger's pointer
// record), so that the kernel can read it as the feature file; OpenFile
// returns it open, verified, with its size, and counts a hit; Get and
// ReadAt read it as before.
func TestFileHoldsExactlyTheBytes(t *testing.T) {
	s := openTest(t, t.TempDir(), 1<<30)
	want := testValue(0, featSize)
	if err := s.Put(testKey(0), want); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(s.filePath(testKey(0).id()))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("feature file: %d bytes (err %v), want exactly the value's %d", len(got), err, len(want))
	}
	hits := s.Stats().Hits
	f, size, fid, ok, err := s.OpenFile(testKey(0), FileID{})
	if err != nil || !ok || size != featSize {
		t.Fatalf("OpenFile: size %d ok %v err %v", size, ok, err)
	}
	got, err = io.ReadAll(f)
	f.Close()
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("OpenFile's file: %d bytes, right %v", len(got), bytes.Equal(got, want))
	}
	if h := s.Stats().Hits; h != hits+1 {
		t.Errorf("OpenFile counted %d hits, want 1", h-hits)
	}
	if v, ok, err := s.Get(testKey(0)); !ok || err != nil || !bytes.Equal(v, want) {
		t.Fatalf("Get: ok %v err %v", ok, err)
	}
	dst := make([]byte, 2*chunkSize)
	if n, _, ok, err := s.ReadAt(testKey(0), dst, 3*chunkSize); !ok || err != nil || !bytes.Equal(dst[:n], want[3*chunkSize:5*chunkSize]) {
		t.Fatalf("ReadAt: %d bytes ok %v err %v", n, ok, err)
	}
	// Damage within the same inode changes its FileID: verified again.
	pf, err := os.OpenFile(s.filePath(testKey(0).id()), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	pf.WriteAt([]byte{want[10] ^ 1}, 10)
	pf.Close()
	if f, _, _, ok, err := s.OpenFile(testKey(0), fid); f != nil || ok || err != nil {
		t.Fatalf("OpenFile of a file written since it was verified: %v ok %v err %v; want a miss", f, ok, err)
	}
	if err := s.Put(testKey(0), want); err != nil {
		t.Fatal(err)
	}
	f, _, fid, ok, err = s.OpenFile(testKey(0), FileID{})
	if !ok || err != nil {
		t.Fatalf("OpenFile after a new Put: ok %v err %v", ok, err)
	}
	f.Close()
	// The same inode, unchanged: not verified again (a byte changed in
	// the page cache behind the file system's back would go unseen).
	f, _, fid2, ok, err := s.OpenFile(testKey(0), fid)
	if !ok || err != nil || fid2 != fid {
		t.Fatalf("OpenFile again: ok %v err %v, FileID %v then %v", ok, err, fid, fid2)
	}
	f.Close()
	if f, _, _, ok, err := s.OpenFile(testKey(9), FileID{}); f != nil || ok || err != nil {
		t.Fatalf("OpenFile of a miss: %v %v %v", f, ok, err)
	}
}

// TestOpenFileDamaged: a file stored as its bytes whose content no longer
// matches its chunk table is never returned by OpenFile: a miss, its
// entry and file deleted, the failure counted.
func TestOpenFileDamaged(t *testing.T) {
	s := openTest(t, t.TempDir(), 1<<30)
	if err := s.Put(testKey(0), testValue(0, featSize)); err != nil {
		t.Fatal(err)
	}
	p := s.filePath(testKey(0).id())
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := []byte{0}
	f.ReadAt(b, featSize-3) // the last, short chunk
	b[0] ^= 0x01
	f.WriteAt(b, featSize-3)
	f.Close()
	if f, _, _, ok, err := s.OpenFile(testKey(0), FileID{}); f != nil || ok || err != nil {
		t.Fatalf("OpenFile of a damaged file: %v ok %v err %v; want a miss", f, ok, err)
	}
	if st := s.Stats(); st.ChecksumFailures != 1 || st.Entries != 0 {
		t.Fatalf("stats %+v; want 1 checksum failure, no entry", st)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatal("damaged file kept")
	}
}

// TestOpenFileOtherLayouts: a value in Badger, compressed, or in a file
// written with its header (the layout of the commit before this one) is
// not handed out by OpenFile (no error, the entry kept), and the old file
// layout still reads.
func TestOpenFileOtherLayouts(t *testing.T) {
	s := openTest(t, t.TempDir(), 1<<30)
	if err := s.Put(testKey(0), testValue(0, 4<<10)); err != nil { // inline in Badger
		t.Fatal(err)
	}
	// A file holding the whole record, as the previous layout wrote it.
	i := testKey(1).id()
	old := testValue(1, featSize)
	rec := encodeValue(i, old)
	tmp, err := s.writeFile(i, rec)
	if err != nil {
		t.Fatal(err)
	}
	s.gate.RLock()
	err = s.commitPut(testKey(1), i, old, len(old), encodePtr(i, rec, len(rec)), tmp)
	s.gate.RUnlock()
	if err != nil {
		t.Fatal(err)
	}
	for k := range 2 {
		if f, _, _, ok, err := s.OpenFile(testKey(k), FileID{}); f != nil || ok || err != nil {
			t.Fatalf("OpenFile of value %d: %v ok %v err %v; want (nil, false, nil)", k, f, ok, err)
		}
		if !s.Has(testKey(k)) {
			t.Fatalf("value %d dropped by OpenFile", k)
		}
	}
	if v, ok, err := s.Get(testKey(1)); !ok || err != nil || !bytes.Equal(v, old) {
		t.Fatalf("Get of the old file layout: ok %v err %v", ok, err)
	}
	dst := make([]byte, chunkSize)
	if n, _, ok, err := s.ReadAt(testKey(1), dst, chunkSize); !ok || err != nil || !bytes.Equal(dst[:n], old[chunkSize:2*chunkSize]) {
		t.Fatalf("ReadAt of the old file layout: ok %v err %v", ok, err)
	}
}

// FuzzRawFilePointer: a raw file's pointer record (header and chunk table,
// read from Badger) and the file's bytes come from disk: whatever they
// hold, parsing the pointer, reading at any offset and the passthrough
// check return an error or bytes, never panic, and a file passes the check
// only when every chunk matches the table.
func FuzzRawFilePointer(f *testing.F) {
	i := testKey(1).id()
	v := testValue(1, 2*chunkSize+5)
	f.Add(encodeRawPtr(i, encodeHead(i, v), len(v)), v, int64(0), 100)
	f.Add(encodeRawPtr(i, encodeHead(i, v[:10]), 10), v[:10], int64(3), 5)
	f.Add([]byte("FFC1\x00\x00\x00\x00\x05\x00\x00\x00\x04\x00\x00\x00"), []byte("hello"), int64(0), 1)
	f.Fuzz(func(t *testing.T, ptr, data []byte, off int64, n int) {
		if len(data) == 0 || n < 0 || n > 1<<20 {
			return
		}
		p, err := parsePtr(i, ptr)
		if err != nil {
			return
		}
		if p.raw() && p.recLen != int64(len(data)) {
			return // openFile refuses a file of another length
		}
		path := filepath.Join(t.TempDir(), "f")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		fh, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer fh.Close()
		fileReadAt(i, fh, p, make([]byte, n), off)
		if p.raw() && verifyRawFile(i, fh, p) == nil {
			head := []byte(p.head)
			if _, err := decodeValue(i, append(head[:len(head):len(head)], data...)); err != nil {
				t.Fatalf("a file passed the check that fails its table: %v", err)
			}
		}
	})
}

// TestOpenFileTrustsItsOwnWrite: OpenFile does not verify again a file
// this Store wrote while its FileID is unchanged (epoch 1's read-back of a
// feature prefetch just wrote costs no CRC pass); a write to the file
// since, a Store opened anew or a value replaced all verify again, and a
// file damaged by a write is still a miss.
func TestOpenFileTrustsItsOwnWrite(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, 1<<30)
	want := testValue(0, featSize)
	if err := s.Put(testKey(0), want); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		f, _, _, ok, err := s.OpenFile(testKey(0), FileID{})
		if !ok || err != nil {
			t.Fatalf("OpenFile of its own write: ok %v err %v", ok, err)
		}
		f.Close()
	}
	if n := s.fileVerifies.Load(); n != 0 {
		t.Fatalf("OpenFile verified its own unchanged write %d times, want 0", n)
	}
	// Replaced by another Put: the new inode is its own write too.
	if err := s.Put(testKey(0), want); err != nil {
		t.Fatal(err)
	}
	f, _, _, ok, err := s.OpenFile(testKey(0), FileID{})
	if !ok || err != nil {
		t.Fatalf("OpenFile after a replacing Put: ok %v err %v", ok, err)
	}
	f.Close()
	if n := s.fileVerifies.Load(); n != 0 {
		t.Fatalf("OpenFile verified a replacing Put's file %d times, want 0", n)
	}
	// A write to the file through the file system changes its ctime:
	// verified, and the damage found.
	p := s.filePath(testKey(0).id())
	pf, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	pf.WriteAt([]byte{want[100] ^ 4}, 100)
	pf.Close()
	if f, _, _, ok, err := s.OpenFile(testKey(0), FileID{}); f != nil || ok || err != nil {
		t.Fatalf("OpenFile of its own file written since: %v ok %v err %v; want a miss", f, ok, err)
	}
	if n := s.fileVerifies.Load(); n != 1 {
		t.Fatalf("OpenFile verified %d times after a write to the file, want 1", n)
	}
	// Another Store over the same directory (a remount) wrote nothing.
	if err := s.Put(testKey(1), testValue(1, featSize)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openTest(t, dir, 1<<30)
	f, _, _, ok, err = s2.OpenFile(testKey(1), FileID{})
	if !ok || err != nil {
		t.Fatalf("OpenFile after reopening: ok %v err %v", ok, err)
	}
	f.Close()
	if n := s2.fileVerifies.Load(); n != 1 {
		t.Fatalf("a reopened Store verified %d times, want 1", n)
	}
}
