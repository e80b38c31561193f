package cache

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/featurefs/featurefs/cache/codec"
)

// corruptOnDisk flips the byte at off within the first occurrence of
// pattern in the cache's value-log files.
// (Values of 64 KiB and more are in feature files: those are searched too.)
func corruptOnDisk(t *testing.T, dir string, pattern []byte, off int) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.vlog"))
	inFiles, _ := filepath.Glob(filepath.Join(dir, filesDir, "*", "*"))
	files = append(files, inFiles...)
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
	t.Fatalf("pattern not found in %d value-log and feature files of %s", len(files), dir)
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

// encodeWhole frames data as values were framed before per-chunk
// checksums (flags 0): one CRC over the id and the bytes.
func encodeWhole(i id, data []byte) []byte {
	rec := make([]byte, headerLen+len(data))
	copy(rec, magic[:])
	binary.LittleEndian.PutUint32(rec[4:], checksum(i, data))
	binary.LittleEndian.PutUint32(rec[8:], uint32(len(data)))
	copy(rec[headerLen:], data)
	return rec
}

func TestWholeFramedValuesStillRead(t *testing.T) {
	i := testKey(1).id()
	data := testValue(1, 3*chunkSize+77)
	rec := encodeWhole(i, data)
	if got, err := decodeValue(i, rec); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("decodeValue of a flags-0 value: %v", err)
	}
	if got, err := copyVerified(i, rec); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("copyVerified of a flags-0 value: %v", err)
	}
	dst := make([]byte, 5000)
	if n, size, err := readAtVerified(i, rec, dst, chunkSize-100); err != nil || n != 5000 || size != len(data) ||
		!bytes.Equal(dst, data[chunkSize-100:chunkSize+4900]) {
		t.Fatalf("readAtVerified of a flags-0 value: n %d size %d err %v", n, size, err)
	}
	// A flags-0 value is verified whole, even for a read of an intact part.
	bad := bytes.Clone(rec)
	bad[len(bad)-1] ^= 1
	if _, _, err := readAtVerified(i, bad, dst, 0); !errors.Is(err, errChecksum) {
		t.Fatalf("readAtVerified of a damaged flags-0 value: %v; want a checksum error", err)
	}
}

func TestReadAtVerifiesTheChunksItReads(t *testing.T) {
	i := testKey(1).id()
	data := testValue(2, 4*chunkSize+123) // five chunks, the last short
	rec := encodeValue(i, data)
	if want := headerLen + 4*5 + len(data); len(rec) != want {
		t.Fatalf("record of %d bytes is %d bytes; want %d (header, 5 chunk CRCs, bytes)", len(data), len(rec), want)
	}
	ranges := [][2]int{{0, 1}, {0, 4096}, {chunkSize - 1, 2}, {chunkSize, chunkSize}, {100, 3 * chunkSize},
		{4 * chunkSize, 123}, {4*chunkSize + 100, 4096}, {len(data) - 1, 10}, {len(data), 10}, {len(data) + 5, 10}}
	for _, r := range ranges {
		dst := make([]byte, r[1])
		n, size, err := readAtVerified(i, rec, dst, int64(r[0]))
		want := data[min(r[0], len(data)):min(r[0]+r[1], len(data))]
		if err != nil || size != len(data) || !bytes.Equal(dst[:n], want) {
			t.Fatalf("readAtVerified(off %d, len %d) = n %d, size %d, err %v; want %d bytes", r[0], r[1], n, size, err, len(want))
		}
	}
	// Damage chunk 2: reads of other chunks still verify, reads that touch
	// it fail, and so does a whole read.
	bad := bytes.Clone(rec)
	bad[headerLen+4*5+2*chunkSize+10] ^= 1
	dst := make([]byte, 4096)
	if n, _, err := readAtVerified(i, bad, dst, 0); err != nil || !bytes.Equal(dst[:n], data[:4096]) {
		t.Fatalf("read of intact chunk 0: %v", err)
	}
	if _, _, err := readAtVerified(i, bad, dst, 3*chunkSize); err != nil {
		t.Fatalf("read of intact chunk 3: %v", err)
	}
	for _, off := range []int64{2 * chunkSize, 2*chunkSize - 100, 3*chunkSize - 1} {
		if _, _, err := readAtVerified(i, bad, dst, off); !errors.Is(err, errChecksum) {
			t.Fatalf("read at %d of damaged chunk 2: %v; want a checksum error", off, err)
		}
	}
	if _, err := decodeValue(i, bad); err == nil {
		t.Fatal("decodeValue passed a damaged chunk")
	}
	if _, err := copyVerified(i, bad); err == nil {
		t.Fatal("copyVerified passed a damaged chunk")
	}
	// Damage the table or the header: every read fails.
	for _, pos := range []int{4, 8, 12, headerLen + 4*3} {
		bad := bytes.Clone(rec)
		bad[pos] ^= 1
		if _, _, err := readAtVerified(i, bad, dst, 0); err == nil {
			t.Errorf("flipping byte %d of the header or table passed a read of chunk 0", pos)
		}
	}
	// Under another key's id nothing verifies.
	if _, _, err := readAtVerified(testKey(2).id(), rec, dst, 0); err == nil {
		t.Fatal("a value under another key's ID passed verification")
	}
}

// openLogged opens a 64 MiB store in a new directory with opts (Dir,
// MaxBytes and Logger set here), its log kept; it is closed when the test
// ends.
func openLogged(t *testing.T, opts Options) (*Store, string, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	opts.Dir, opts.MaxBytes, opts.Logger = t.TempDir(), 64<<20, textLogger(logs)
	s, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, opts.Dir, logs
}

func TestStoreReadAt(t *testing.T) {
	s, dir, logs := openLogged(t, Options{})
	const size = 3*chunkSize + 500
	for i := range 4 {
		if err := s.Put(testKey(i), testValue(i, size)); err != nil {
			t.Fatal(err)
		}
	}
	dst := make([]byte, 10000)
	for i := range 4 {
		for _, off := range []int64{0, chunkSize - 5000, size - 3000, size} {
			n, sz, ok, err := s.ReadAt(testKey(i), dst, off)
			want := testValue(i, size)[min(off, size):min(off+10000, size)]
			if !ok || err != nil || sz != size || !bytes.Equal(dst[:n], want) {
				t.Fatalf("ReadAt(%d, off %d) = n %d size %d ok %v err %v", i, off, n, sz, ok, err)
			}
		}
	}
	if _, _, ok, err := s.ReadAt(testKey(9), dst, 0); ok || err != nil {
		t.Fatalf("ReadAt of a missing key: ok %v err %v", ok, err)
	}
	// A damaged chunk of value 2 (on disk, under the open store): a read
	// of another chunk still hits; one of the damaged chunk is a miss and
	// deletes the entry, logged once.
	corruptOnDisk(t, dir, testValue(2, size)[2*chunkSize:2*chunkSize+64], 0)
	if _, _, ok, err := s.ReadAt(testKey(2), dst, 0); !ok || err != nil {
		t.Fatalf("ReadAt of an intact chunk of a damaged value: ok %v err %v", ok, err)
	}
	if _, _, ok, err := s.ReadAt(testKey(2), dst, 2*chunkSize); ok || err != nil {
		t.Fatalf("ReadAt of a damaged chunk: ok %v err %v; want a miss", ok, err)
	}
	if s.Has(testKey(2)) {
		t.Fatal("the damaged entry was not deleted")
	}
	if c := strings.Count(logs.String(), "checksum failure"); c != 1 || s.Stats().ChecksumFailures != 1 {
		t.Fatalf("checksum failure logged %d times, counted %d; want once:\n%s", c, s.Stats().ChecksumFailures, logs.String())
	}
}

func FuzzDecodeValue(f *testing.F) {
	i := testKey(1).id()
	f.Add(encodeValue(i, []byte("hello")))
	f.Add(encodeValue(i, testValue(1, chunkSize+3)))
	f.Add(encodeWhole(i, []byte("hello")))
	if rec, err := encodeCompressed(i, make([]byte, 3000), 4, codec.S2); err == nil {
		f.Add(rec)
	}
	f.Add([]byte("FFC1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		data, err := decodeValue(i, b)
		if err == nil {
			again, err := decodeValue(i, encodeValue(i, data))
			if err != nil || !bytes.Equal(again, data) {
				t.Fatalf("the accepted bytes do not round-trip: %v", err)
			}
			if binary.LittleEndian.Uint32(b[12:]) == flagsChunked && !bytes.Equal(encodeValue(i, data), b) {
				t.Fatal("accepted a chunked value that does not re-encode to itself")
			}
		}
		copied, cerr := copyVerified(i, b)
		if (err == nil) != (cerr == nil) || !bytes.Equal(data, copied) {
			t.Fatalf("decodeValue (err %v) and copyVerified (err %v) disagree", err, cerr)
		}
		// A read of any part of an accepted value returns that part.
		if err == nil {
			dst := make([]byte, 7)
			for _, off := range []int{0, len(data) / 2, max(len(data)-3, 0)} {
				n, size, rerr := readAtVerified(i, b, dst, int64(off))
				if rerr != nil || size != len(data) || !bytes.Equal(dst[:n], data[off:min(off+7, len(data))]) {
					t.Fatalf("readAtVerified at %d of an accepted value: %v", off, rerr)
				}
			}
		}
		_, _ = decodeMeta(b)
	})
}
