package cache

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/featurefs/featurefs/cache/codec"
)

// reluValue returns size bytes of float32s in runs of zeros and positive
// values, as a ReLU layer's output is: they compress.
func reluValue(n, size int) []byte {
	r := rand.New(rand.NewPCG(uint64(n), 3))
	b := make([]byte, size)
	for i := 0; i+4 <= size; {
		zero := r.IntN(3) == 0
		for run := 1 + r.IntN(64); run > 0 && i+4 <= size; run, i = run-1, i+4 {
			v := float32(0)
			if !zero {
				v = float32(r.ExpFloat64())
			}
			binary.LittleEndian.PutUint32(b[i:], math.Float32bits(v))
		}
	}
	return b
}

func TestCompressedValues(t *testing.T) {
	for _, m := range []codec.Method{codec.S2, codec.Zeros} {
		t.Run(m.String(), func(t *testing.T) { testCompressedValues(t, m) })
	}
}

func testCompressedValues(t *testing.T, m codec.Method) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, MaxBytes: 64 << 20, Logger: quietLogger(), Compression: m})
	if err != nil {
		t.Fatal(err)
	}
	const n, size = 8, 200<<10 + 6
	for i := range n {
		if err := s.Put(testKey(i), reluValue(i, size)); err != nil {
			t.Fatal(err)
		}
	}
	// An incompressible value is stored as it is.
	if err := s.Put(testKey(100), testValue(100, size)); err != nil {
		t.Fatal(err)
	}
	check := func(s *Store, what string) {
		t.Helper()
		for i := range n {
			got, ok, err := s.Get(testKey(i))
			if !ok || err != nil || !bytes.Equal(got, reluValue(i, size)) {
				t.Fatalf("%s: Get %d: ok %v err %v", what, i, ok, err)
			}
			dst := make([]byte, 5000)
			for _, off := range []int64{0, 64<<10 - 100, size - 10} {
				m, sz, ok, err := s.ReadAt(testKey(i), dst, off)
				want := reluValue(i, size)[off:min(off+5000, size)]
				if !ok || err != nil || sz != size || !bytes.Equal(dst[:m], want) {
					t.Fatalf("%s: ReadAt %d at %d: ok %v err %v", what, i, off, ok, err)
				}
			}
		}
		if got, ok, _ := s.Get(testKey(100)); !ok || !bytes.Equal(got, testValue(100, size)) {
			t.Fatalf("%s: the incompressible value", what)
		}
	}
	check(s, "compressed")
	st := s.Stats()
	if st.Compression != m.String() || st.CompressionRatio < 1.2 || st.PutRawBytes != (n+1)*size ||
		st.Bytes != st.PutStoredBytes || st.Bytes >= (n+1)*size || st.CompressSeconds <= 0 || st.DecompressSeconds <= 0 {
		t.Fatalf("Stats = %+v; want %s, the budget counting compressed bytes, a ratio over 1.2, codec times", st, m)
	}
	// The random value costs its raw size: stored as it is.
	if raw := st.Bytes - (st.PutStoredBytes - size); raw < size {
		t.Fatalf("the incompressible value counted %d bytes", raw)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Reopened without compression: the compressed values still read, the
	// budget still counts them compressed, and new values are not compressed.
	s2, err := Open(Options{Dir: dir, MaxBytes: 64 << 20, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	check(s2, "reopened without compression")
	if got := s2.Stats().Bytes; got != st.Bytes {
		t.Fatalf("reopened: %d bytes, were %d", got, st.Bytes)
	}
	if err := s2.Put(testKey(7), reluValue(7, size)); err != nil {
		t.Fatal(err)
	}
	if st2 := s2.Stats(); st2.PutStoredBytes != size || st2.Compression != "" {
		t.Fatalf("a Put without compression stored %d bytes (%q)", st2.PutStoredBytes, st2.Compression)
	}
}

func TestDamagedCompressedValueIsAMiss(t *testing.T) {
	s, dir, _ := openLogged(t, Options{Compression: codec.S2})
	const size = 3 * chunkSize
	for i := range 3 {
		if err := s.Put(testKey(i), reluValue(i, size)); err != nil {
			t.Fatal(err)
		}
	}
	// Flip a byte in the middle of value 1's record (its last chunk).
	rec, err := encodeCompressed(testKey(1).id(), reluValue(1, size), 4, codec.S2)
	if err != nil {
		t.Fatal(err)
	}
	corruptOnDisk(t, dir, rec[len(rec)-200:len(rec)-100], 50)
	dst := make([]byte, 100)
	if _, _, ok, err := s.ReadAt(testKey(1), dst, 0); !ok || err != nil {
		t.Fatalf("ReadAt of an intact chunk of a damaged value: ok %v err %v", ok, err)
	}
	if got, ok, err := s.Get(testKey(1)); ok || err != nil || got != nil {
		t.Fatalf("Get of a damaged compressed value: ok %v err %v", ok, err)
	}
	if s.Has(testKey(1)) || s.Stats().ChecksumFailures != 1 {
		t.Fatalf("the damaged entry was not deleted and counted: %+v", s.Stats())
	}
	for _, i := range []int{0, 2} {
		if got, ok, _ := s.Get(testKey(i)); !ok || !bytes.Equal(got, reluValue(i, size)) {
			t.Fatalf("intact value %d", i)
		}
	}
	// Under another key's id, a compressed record does not verify.
	if _, err := decodeValue(testKey(2).id(), rec); err == nil {
		t.Fatal("a compressed value under another key's ID passed verification")
	}
}

// TestRawFiles: with RawFiles (the mount's --cache-compression auto) a
// value large enough for a file of its own is stored raw, and a small one
// kept in Badger is compressed; both read back whole.
func TestRawFiles(t *testing.T) {
	s, err := Open(Options{Dir: t.TempDir(), MaxBytes: 64 << 20, Logger: quietLogger(), Compression: codec.S2, RawFiles: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	large, small := reluValue(1, 803<<10), reluValue(2, 8<<10)
	if err := s.Put(testKey(1), large); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.PutStoredBytes != int64(len(large)) || !st.RawFiles || st.Compression != "s2" {
		t.Errorf("large value: %d bytes stored of %d (raw_files %v, %q); want it raw", st.PutStoredBytes, len(large), st.RawFiles, st.Compression)
	}
	if err := s.Put(testKey(2), small); err != nil {
		t.Fatal(err)
	}
	if st2 := s.Stats(); st2.PutStoredBytes-st.PutStoredBytes >= int64(len(small)) {
		t.Errorf("small value: %d bytes stored of %d; want it compressed", st2.PutStoredBytes-st.PutStoredBytes, len(small))
	}
	for i, v := range [][]byte{large, small} {
		if got, ok, err := s.Get(testKey(i + 1)); !ok || err != nil || !bytes.Equal(got, v) {
			t.Errorf("Get %d: ok %v, err %v", i+1, ok, err)
		}
	}
}
