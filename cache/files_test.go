package cache

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const featSize = 802_944 // a ResNet-50 layer12 .npy

// countFiles returns the feature files under dir/files (temporaries too).
func countFiles(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	filepath.WalkDir(filepath.Join(dir, filesDir), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		return nil
	})
	return n
}

// TestFilePutGetEvict: a large value goes to a file 0600 in 0700
// directories and a small one stays in Badger; Get and ReadAt return the
// bytes; eviction deletes the evicted values' files at once, so the files
// on disk never exceed the budget.
func TestFilePutGetEvict(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, 5*featSize)
	small := testValue(-1, 4<<10)
	if err := s.Put(testKey(-1), small); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.filePath(testKey(-1).id())); !os.IsNotExist(err) {
		t.Fatalf("a 4 KiB value has a file (stat: %v)", err)
	}
	for k := range 4 {
		if err := s.Put(testKey(k), testValue(k, featSize)); err != nil {
			t.Fatal(err)
		}
	}
	p := s.filePath(testKey(0).id())
	info, err := os.Lstat(p)
	if err != nil {
		t.Fatalf("no file for a large value: %v", err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Errorf("feature file mode %v, want 0600", info.Mode().Perm())
	}
	for _, d := range []string{filepath.Join(dir, filesDir), filepath.Dir(p)} {
		if di, err := os.Lstat(d); err != nil || di.Mode().Perm() != 0o700 || !di.IsDir() {
			t.Errorf("%s: %v, %v; want a 0700 directory", d, di.Mode(), err)
		}
	}
	for k := range 4 {
		v, ok, err := s.Get(testKey(k))
		if err != nil || !ok || !bytes.Equal(v, testValue(k, featSize)) {
			t.Fatalf("Get %d: ok %v err %v, right bytes %v", k, ok, err, bytes.Equal(v, testValue(k, featSize)))
		}
	}
	// ReadAt across a chunk boundary and at the end.
	want := testValue(2, featSize)
	for _, off := range []int64{0, chunkSize - 100, 5*chunkSize + 7, featSize - 50, featSize} {
		dst := make([]byte, 300)
		n, size, ok, err := s.ReadAt(testKey(2), dst, off)
		if err != nil || !ok || size != featSize {
			t.Fatalf("ReadAt %d: n %d size %d ok %v err %v", off, n, size, ok, err)
		}
		end := min(off+300, featSize)
		if n != int(end-off) || !bytes.Equal(dst[:n], want[off:end]) {
			t.Fatalf("ReadAt %d: %d bytes, right %v", off, n, bytes.Equal(dst[:n], want[off:end]))
		}
	}
	// Whole chunks, as the kernel asks (read into dst directly), and the
	// last, short one.
	for _, off := range []int64{chunkSize, 12 * chunkSize} {
		dst := make([]byte, 2*chunkSize)
		n, _, ok, err := s.ReadAt(testKey(2), dst, off)
		end := min(off+2*chunkSize, featSize)
		if err != nil || !ok || n != int(end-off) || !bytes.Equal(dst[:n], want[off:end]) {
			t.Fatalf("aligned ReadAt %d: n %d ok %v err %v", off, n, ok, err)
		}
	}
	if v, ok, _ := s.Get(testKey(-1)); !ok || !bytes.Equal(v, small) {
		t.Fatal("small value lost")
	}
	// Over the budget: the oldest go, with their files.
	for k := 4; k < 12; k++ {
		if err := s.Put(testKey(k), testValue(k, featSize)); err != nil {
			t.Fatal(err)
		}
		st := s.Stats()
		if files := countFiles(t, dir); int64(files)*featSize > s.maxBytes {
			t.Fatalf("after Put %d: %d feature files on disk for a budget of %d bytes (stats %+v)", k, files, s.maxBytes, st)
		}
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("evicted value's file still there (stat: %v)", err)
	}
	st := s.Stats()
	if st.Evictions == 0 || st.Bytes > s.maxBytes {
		t.Fatalf("stats %+v", st)
	}
	// Their space is free already: nothing is left for a value-log
	// reclaim (it would flush and compact Badger for nothing); only the
	// 4 KiB value, inline in Badger, counts.
	if want := map[bool]int64{true: 0, false: 4 << 10}[s.Has(testKey(-1))]; st.EvictedSinceReclaimBytes != want {
		t.Fatalf("evictions of file-stored values count %d bytes toward a reclaim", st.EvictedSinceReclaimBytes)
	}
	if files := countFiles(t, dir); int64(files) > st.Entries {
		t.Fatalf("%d files for %d entries", files, st.Entries)
	}
	if st.DiskBytes < int64(countFiles(t, dir))*featSize {
		t.Fatalf("DiskBytes %d does not count the files", st.DiskBytes)
	}
	if err := s.Delete(testKey(11)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.filePath(testKey(11).id())); !os.IsNotExist(err) {
		t.Fatal("Delete left the file")
	}
	if err := s.Clear(); err != nil {
		t.Fatal(err)
	}
	if n := countFiles(t, dir); n != 0 {
		t.Fatalf("Clear left %d files", n)
	}
	if err := s.Put(testKey(20), testValue(20, featSize)); err != nil {
		t.Fatalf("Put after Clear: %v", err)
	}
	if v, ok, _ := s.Get(testKey(20)); !ok || !bytes.Equal(v, testValue(20, featSize)) {
		t.Fatal("Get after Clear")
	}
}

// TestFileDamaged: a flipped byte in a feature file fails its chunk's CRC:
// ReadAt of another chunk still succeeds (only the chunks read are
// verified), a read of the damaged chunk is a miss and drops the entry
// and its file. A truncated file (length other than the index's) is a miss.
func TestFileDamaged(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, 1<<30)
	for k := range 2 {
		if err := s.Put(testKey(k), testValue(k, featSize)); err != nil {
			t.Fatal(err)
		}
	}
	p := s.filePath(testKey(0).id())
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	off := int64(headerLen + 4*numChunks(featSize) + 5*chunkSize + 10)
	b := []byte{0}
	f.ReadAt(b, off)
	b[0] ^= 0xff
	f.WriteAt(b, off)
	f.Close()
	dst := make([]byte, 100)
	if _, _, ok, err := s.ReadAt(testKey(0), dst, 0); !ok || err != nil {
		t.Fatalf("ReadAt of an intact chunk: ok %v err %v", ok, err)
	}
	if !bytes.Equal(dst, testValue(0, featSize)[:100]) {
		t.Fatal("ReadAt: wrong bytes")
	}
	if _, _, ok, err := s.ReadAt(testKey(0), make([]byte, chunkSize), 5*chunkSize); ok || err != nil {
		t.Fatalf("ReadAt of the damaged chunk: ok %v err %v; want a miss", ok, err)
	}
	if st := s.Stats(); st.ChecksumFailures != 1 || st.Entries != 1 {
		t.Fatalf("stats %+v; want 1 checksum failure, 1 entry", st)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatal("damaged file kept")
	}
	if err := os.Truncate(s.filePath(testKey(1).id()), 1000); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Get(testKey(1)); ok || err != nil {
		t.Fatalf("Get of a truncated file: ok %v err %v; want a miss", ok, err)
	}
}

// TestFileOrphanSweep: what a kill -9 can leave is cleaned at open: a
// temporary file and a file without an index entry are removed, an index
// entry whose file is missing reads as a miss and leaves the accounting.
func TestFileOrphanSweep(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, MaxBytes: 1 << 30, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	for k := range 3 {
		if err := s.Put(testKey(k), testValue(k, featSize)); err != nil {
			t.Fatal(err)
		}
	}
	orphan := s.filePath(testKey(50).id())
	tmp := filepath.Join(filepath.Dir(s.filePath(testKey(1).id())), tmpPrefix+"x-1-1")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Dir(orphan), 0o700)
	for _, p := range []string{orphan, tmp} {
		if err := os.WriteFile(p, []byte("left by a crash"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(filepath.Join(dir, filesDir, testKey(2).id().String()[:2], testKey(2).id().String())); err != nil {
		t.Fatal(err)
	}
	loose := filepath.Dir(s.filePath(testKey(1).id()))
	if err := os.Chmod(loose, 0o755); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, dir, 1<<30)
	if info, err := os.Stat(loose); err != nil || info.Mode().Perm() != 0o700 {
		t.Errorf("a fan-out directory left 0755 is %v after open (%v), want 0700", info.Mode().Perm(), err)
	}
	for _, p := range []string{orphan, tmp} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s not swept at open (stat: %v)", p, err)
		}
	}
	if _, ok, err := s.Get(testKey(2)); ok || err != nil {
		t.Fatalf("entry without its file: ok %v err %v; want a miss", ok, err)
	}
	for k := range 2 {
		if v, ok, err := s.Get(testKey(k)); !ok || err != nil || !bytes.Equal(v, testValue(k, featSize)) {
			t.Fatalf("Get %d after the sweep: ok %v err %v", k, ok, err)
		}
	}
	if st := s.Stats(); st.Entries != 2 || st.Bytes != 2*featSize {
		t.Fatalf("stats %+v; want 2 entries of %d bytes", st, featSize)
	}
}

// TestFileSymlinkRefused: a symlink planted where a feature file or its
// directory goes is never followed: a Get through it is a miss, and a Put
// refuses to write through a symlinked directory (nothing lands in its
// target).
func TestFileSymlinkRefused(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	s := openTest(t, dir, 1<<30)
	if err := s.Put(testKey(0), testValue(0, featSize)); err != nil {
		t.Fatal(err)
	}
	p := s.filePath(testKey(0).id())
	target := filepath.Join(outside, "target")
	os.WriteFile(target, testValue(0, featSize), 0o600)
	os.Remove(p)
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Get(testKey(0)); ok || err != nil {
		t.Fatalf("Get through a symlink: ok %v err %v; want a miss", ok, err)
	}
	// A fan-out directory replaced by a symlink.
	k := 1
	sub := filepath.Dir(s.filePath(testKey(k).id()))
	if err := os.Remove(sub); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, sub); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(testKey(k), testValue(k, featSize)); err == nil {
		t.Fatal("Put through a symlinked directory succeeded")
	}
	ents, _ := os.ReadDir(outside)
	if len(ents) != 1 {
		t.Fatalf("%d files in the symlink's target, want only the planted one", len(ents))
	}
}

// TestFileOldLayoutRead: a cache whose values are all in Badger (as
// ca82ffd wrote it; FileThreshold -1 writes the same records) still reads
// after an open with files, large values and small, compressed or not; new
// Puts go to files, and replacing or deleting an old entry works. A cache
// with files still reads with FileThreshold -1.
func TestFileOldLayoutRead(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, MaxBytes: 1 << 30, Logger: quietLogger(), FileThreshold: -1})
	if err != nil {
		t.Fatal(err)
	}
	sizes := []int{4 << 10, 200 << 10, featSize}
	for k, n := range sizes {
		if err := s.Put(testKey(k), testValue(k, n)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := countFiles(t, dir); n != 0 {
		t.Fatalf("FileThreshold -1 wrote %d files", n)
	}
	s, err = Open(Options{Dir: dir, MaxBytes: 1 << 30, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	for k, n := range sizes {
		v, ok, err := s.Get(testKey(k))
		if err != nil || !ok || !bytes.Equal(v, testValue(k, n)) {
			t.Fatalf("old entry %d: ok %v err %v", k, ok, err)
		}
		dst := make([]byte, 64)
		if c, size, ok, err := s.ReadAt(testKey(k), dst, 1000); !ok || err != nil || size != int64(n) || !bytes.Equal(dst[:c], testValue(k, n)[1000:1064]) {
			t.Fatalf("old entry %d ReadAt: ok %v err %v", k, ok, err)
		}
	}
	if err := s.Put(testKey(2), testValue(2, featSize)); err != nil { // replace an old one
		t.Fatal(err)
	}
	if err := s.Put(testKey(3), testValue(3, featSize)); err != nil {
		t.Fatal(err)
	}
	if n := countFiles(t, dir); n != 2 {
		t.Fatalf("%d files after two large Puts, want 2", n)
	}
	if err := s.Delete(testKey(1)); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Entries != 3 || st.Bytes != int64(4<<10+2*featSize) {
		t.Fatalf("stats %+v", st)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = func() *Store {
		s, err := Open(Options{Dir: dir, MaxBytes: 1 << 30, Logger: quietLogger(), FileThreshold: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}()
	for _, k := range []int{0, 2, 3} {
		n := sizes[min(k, 2)]
		if v, ok, err := s.Get(testKey(k)); err != nil || !ok || !bytes.Equal(v, testValue(k, n)) {
			t.Fatalf("entry %d read with FileThreshold -1: ok %v err %v", k, ok, err)
		}
	}
}

// TestFileCompressed: with compression the file holds the codec record;
// Get and ReadAt decode it.
func TestFileCompressed(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, MaxBytes: 1 << 30, Logger: quietLogger(), Compression: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	v := make([]byte, featSize) // half zeros: compresses to about half
	copy(v, testValue(0, featSize/2))
	if err := s.Put(testKey(0), v); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(s.filePath(testKey(0).id()))
	if err != nil || info.Size() >= featSize*6/10 {
		t.Fatalf("compressed feature file: %v, %v", info, err)
	}
	got, ok, err := s.Get(testKey(0))
	if !ok || err != nil || !bytes.Equal(got, v) {
		t.Fatalf("Get: ok %v err %v", ok, err)
	}
	dst := make([]byte, 500)
	for _, off := range []int{900, featSize - 300} {
		n, _, ok, err := s.ReadAt(testKey(0), dst, int64(off))
		if !ok || err != nil || !bytes.Equal(dst[:n], v[off:min(off+500, featSize)]) {
			t.Fatalf("ReadAt %d: ok %v err %v", off, ok, err)
		}
	}
}

// FuzzFeatureFile: a feature file's bytes and its pointer record are read
// from disk: whatever they hold, parsing the pointer and reading at any
// offset return an error or bytes, never panic, and bytes only from a
// record whose checksums hold.
func FuzzFeatureFile(f *testing.F) {
	i := testKey(1).id()
	f.Add(append(encodeHead(i, testValue(1, chunkSize+3)), testValue(1, chunkSize+3)...), int64(0), 100)
	f.Add(encodeValue(i, []byte("hello")), int64(2), 10)
	f.Add([]byte("FFC1"), int64(0), 1)
	f.Fuzz(func(t *testing.T, rec []byte, off int64, n int) {
		if len(rec) == 0 || n < 0 || n > 1<<20 {
			return
		}
		p := filepath.Join(t.TempDir(), "f")
		if err := os.WriteFile(p, rec, 0o600); err != nil {
			t.Fatal(err)
		}
		head := rec
		if len(head) < 8 {
			head = append(make([]byte, 0, 8), rec...)
			head = head[:8]
		}
		ptr, err := parsePtr(i, encodePtr(i, head, len(rec)))
		if err != nil {
			t.Fatalf("own pointer: %v", err)
		}
		parsePtr(i, rec) // arbitrary bytes as a pointer: no panic
		fh, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer fh.Close()
		dst := make([]byte, n)
		got, _, err := fileReadAt(i, fh, ptr, dst, off)
		if err == nil && got > 0 {
			if _, derr := decodeValue(i, rec); derr != nil {
				// A chunked record whose touched chunks verify while
				// another is damaged is fine; its header must hold.
				if _, perr := parseFrame(i, rec); perr != nil {
					t.Fatalf("bytes served from a record whose frame is bad: %v", perr)
				}
			}
		}
	})
}

// openFeatureFiles returns how many of this process's descriptors are open
// on feature files under dir (deleted ones included).
func openFeatureFiles(t *testing.T, dir string) (open, deleted int) {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, filesDir) + "/"
	for _, e := range ents {
		l, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil || !strings.HasPrefix(l, root) {
			continue
		}
		open++
		if strings.HasSuffix(l, " (deleted)") {
			deleted++
		}
	}
	return open, deleted
}

// TestFileReadAtOpenFiles: ReadAt keeps the files it read open for the
// next pieces (bounded), and never one whose value was evicted, deleted,
// replaced or cleared: the disk space of an evicted value is free at once.
func TestFileReadAtOpenFiles(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, 4*featSize)
	dst := make([]byte, chunkSize)
	readAll := func(k int) {
		t.Helper()
		for off := int64(0); off < featSize; off += chunkSize {
			if _, _, ok, err := s.ReadAt(testKey(k), dst, off); !ok || err != nil {
				t.Fatalf("ReadAt %d at %d: ok %v err %v", k, off, ok, err)
			}
		}
	}
	for k := range 3 {
		if err := s.Put(testKey(k), testValue(k, featSize)); err != nil {
			t.Fatal(err)
		}
		readAll(k)
	}
	if open, _ := openFeatureFiles(t, dir); open != 3 {
		t.Fatalf("%d feature files open after reading 3, want 3 (kept for the next reads)", open)
	}
	if err := s.Delete(testKey(0)); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(testKey(1), testValue(1, featSize)); err != nil { // replaced by a rename
		t.Fatal(err)
	}
	for k := 3; k < 8; k++ { // evicts 2 and others
		if err := s.Put(testKey(k), testValue(k, featSize)); err != nil {
			t.Fatal(err)
		}
		readAll(k)
	}
	if _, deleted := openFeatureFiles(t, dir); deleted != 0 {
		t.Fatalf("%d deleted feature files still open: their disk space is not free", deleted)
	}
	// The bound.
	big := openTest(t, t.TempDir(), 1<<30)
	for k := range fdCacheSize + 10 {
		if err := big.Put(testKey(k), testValue(k, 100<<10)); err != nil {
			t.Fatal(err)
		}
		if _, _, ok, _ := big.ReadAt(testKey(k), dst, 0); !ok {
			t.Fatal("ReadAt missed")
		}
	}
	if open, _ := openFeatureFiles(t, big.dir); open > fdCacheSize {
		t.Fatalf("%d feature files open, bound %d", open, fdCacheSize)
	}
	if err := big.Clear(); err != nil {
		t.Fatal(err)
	}
	if open, _ := openFeatureFiles(t, big.dir); open != 0 {
		t.Fatalf("%d feature files open after Clear", open)
	}
	s.Close()
	if open, _ := openFeatureFiles(t, dir); open != 0 {
		t.Fatalf("%d feature files open after Close", open)
	}
}
