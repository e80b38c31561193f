package cache

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// corruptOnDisk flips the byte at off within the first occurrence of
// pattern in the cache's value-log files.
func corruptOnDisk(t *testing.T, dir string, pattern []byte, off int) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.vlog"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		i := bytes.Index(b, pattern)
		if i < 0 {
			continue
		}
		fh, err := os.OpenFile(f, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer fh.Close()
		if _, err := fh.WriteAt([]byte{b[i+off] ^ 0x5a}, int64(i+off)); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("pattern not found in %d value-log files of %s", len(files), dir)
}

func TestChecksumCorruptionIsAMiss(t *testing.T) {
	dir := t.TempDir()
	var logs syncBuffer
	s, err := Open(Options{Dir: dir, MaxBytes: 64 << 20, Logger: textLogger(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n, size = 20, 32 << 10
	for i := range n {
		if err := s.Put(testKey(i), testValue(i, size)); err != nil {
			t.Fatal(err)
		}
	}
	// Flip a byte in the middle of value 3 and in the frame header of
	// value 5 (its length field), on disk under the open store: Badger's
	// value log is a shared mapping of the file, as after bit rot.
	corruptOnDisk(t, dir, testValue(3, size)[:64], 16<<10)
	corruptOnDisk(t, dir, encodeValue(testKey(5).id(), testValue(5, size))[:64], 9)

	for _, bad := range []int{3, 5} {
		got, ok, err := s.Get(testKey(bad))
		if ok || err != nil || got != nil {
			t.Fatalf("Get of corrupted value %d = %d bytes, ok %v, err %v; want a miss", bad, len(got), ok, err)
		}
		if s.Has(testKey(bad)) {
			t.Fatalf("corrupted entry %d was not deleted", bad)
		}
		// A second read is an ordinary miss, not a second failure.
		if _, ok, _ := s.Get(testKey(bad)); ok {
			t.Fatalf("second Get of corrupted value %d hit", bad)
		}
	}
	for i := range n {
		if i == 3 || i == 5 {
			continue
		}
		if got, ok, err := s.Get(testKey(i)); !ok || err != nil || !bytes.Equal(got, testValue(i, size)) {
			t.Fatalf("intact entry %d: ok %v err %v", i, ok, err)
		}
	}
	st := s.Stats()
	if st.ChecksumFailures != 2 || st.Misses != 4 || st.Entries != n-2 || st.Bytes != (n-2)*size {
		t.Fatalf("Stats = %+v; want 2 checksum failures, 4 misses, %d entries", st, n-2)
	}
	if c := strings.Count(logs.String(), "checksum failure"); c != 2 {
		t.Fatalf("checksum failure logged %d times; want once per entry:\n%s", c, logs.String())
	}
	// The key can be stored again.
	if err := s.Put(testKey(3), testValue(3, size)); err != nil {
		t.Fatal(err)
	}
	if got, ok, _ := s.Get(testKey(3)); !ok || !bytes.Equal(got, testValue(3, size)) {
		t.Fatal("re-Put of a once-corrupted key does not hit")
	}

	// After a restart, Badger truncates its newest value log at the first
	// damaged record, losing the values behind it: their reads come back
	// empty, without an error, and only the checksum notices. Whatever is
	// returned is still right.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openTest(t, dir, 64<<20)
	for i := range n {
		got, ok, err := s2.Get(testKey(i))
		if err != nil {
			t.Fatal(err)
		}
		if ok && !bytes.Equal(got, testValue(i, size)) {
			t.Fatalf("after reopen entry %d has wrong bytes", i)
		}
	}
	st = s2.Stats()
	// n-1: entry 5 was deleted for good before the restart.
	if st.Hits+st.ChecksumFailures != n-1 || st.Entries != st.Hits || st.Bytes != st.Hits*size {
		t.Fatalf("after reopen Stats = %+v; want each of the %d entries either returned intact or dropped as a checksum failure", st, n-1)
	}
}

func TestDecodeValueRejectsDamage(t *testing.T) {
	i := testKey(1).id()
	data := testValue(1, 1000)
	rec := encodeValue(i, data)
	if got, err := decodeValue(i, rec); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("round trip: %v", err)
	}
	for _, pos := range []int{0, 4, 8, 15, 16, 500, len(rec) - 1} {
		bad := bytes.Clone(rec)
		bad[pos] ^= 1
		if _, err := decodeValue(i, bad); err == nil {
			t.Errorf("flipping byte %d passed verification", pos)
		}
		if _, err := copyVerified(i, bad); err == nil {
			t.Errorf("flipping byte %d passed verification while copying", pos)
		}
	}
	big := testValue(3, 3*copyChunk+5)
	if got, err := copyVerified(i, encodeValue(i, big)); err != nil || !bytes.Equal(got, big) || cap(got) < len(big) {
		t.Fatalf("copyVerified round trip of %d bytes: %v", len(big), err)
	}
	if _, err := decodeValue(i, rec[:len(rec)-1]); err == nil {
		t.Error("a truncated value passed verification")
	}
	if _, err := decodeValue(testKey(2).id(), rec); err == nil {
		t.Error("a value under another key's ID passed verification")
	}
}

func FuzzDecodeValue(f *testing.F) {
	i := testKey(1).id()
	f.Add(encodeValue(i, []byte("hello")))
	f.Add([]byte("FFC1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		data, err := decodeValue(i, b)
		if err == nil && !bytes.Equal(encodeValue(i, data), b) {
			t.Fatal("accepted a value that does not re-encode to itself")
		}
		copied, cerr := copyVerified(i, b)
		if (err == nil) != (cerr == nil) || !bytes.Equal(data, copied) {
			t.Fatalf("decodeValue (err %v) and copyVerified (err %v) disagree", err, cerr)
		}
		_, _ = decodeMeta(b)
	})
}
