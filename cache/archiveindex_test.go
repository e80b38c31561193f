package cache

import (
	"fmt"
	"testing"
)

// indexKey is the key of an archive index entry (a head or a part) n.
func indexKey(n int) Key {
	return Key{Source: "s3://bucket", Object: fmt.Sprintf("shards/%d.tar", n), ETag: fmt.Sprintf("\"e%d\"", n), ModelDigest: ArchiveIndexDigest}
}

// TestArchiveIndexesCountedApart: entries whose key is an archive
// index's are counted apart from features (Stats.ArchiveIndexEntries,
// ArchiveIndexBytes), across a reopen (the metadata record keeps the
// kind), an access-order flush (which rewrites the record), a replacement,
// a Delete and evictions. At 1942f8f an archive index was an entry like
// any other: featurefs stats said "7 features" after 3 extractions of
// archive members.
func TestArchiveIndexesCountedApart(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, 64<<20)
	for n := 0; n < 3; n++ {
		if err := s.Put(indexKey(n), testValue(100+n, 1000+n)); err != nil {
			t.Fatal(err)
		}
	}
	idxBytes := s.Stats().Bytes
	for n := 0; n < 2; n++ {
		if err := s.Put(testKey(n), testValue(n, testSize(n))); err != nil {
			t.Fatal(err)
		}
	}
	check := func(when string, entries, indexes int64, indexBytes int64) {
		t.Helper()
		st := s.Stats()
		if st.Entries != entries || st.ArchiveIndexEntries != indexes || st.ArchiveIndexBytes != indexBytes || st.ArchiveIndexBytes > st.Bytes {
			t.Errorf("%s: %d entries (%d bytes), %d archive index entries (%d bytes); want %d entries, %d archive index entries (%d bytes)",
				when, st.Entries, st.Bytes, st.ArchiveIndexEntries, st.ArchiveIndexBytes, entries, indexes, indexBytes)
		}
	}
	check("after 3 indexes and 2 features", 5, 3, idxBytes)

	// A read marks the entry for an access-order flush, which rewrites its
	// record: the kind survives it, and a reopen.
	if _, ok, err := s.Get(indexKey(1)); !ok || err != nil {
		t.Fatalf("Get index 1: %v %v", ok, err)
	}
	s.flushAccess()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, dir, 64<<20)
	check("reopened", 5, 3, idxBytes)

	// Replaced by a value of another size, then deleted.
	if err := s.Put(indexKey(0), testValue(7, 3000)); err != nil {
		t.Fatal(err)
	}
	idxBytes = idxBytes - s0(1000) + s0(3000)
	check("index 0 replaced", 5, 3, idxBytes)
	if err := s.Delete(indexKey(0)); err != nil {
		t.Fatal(err)
	}
	idxBytes -= s0(3000)
	check("index 0 deleted", 4, 2, idxBytes)

	// Evicted: a store too small for them all keeps its counts true.
	small := openTest(t, t.TempDir(), 256<<10)
	for n := 0; n < 200; n++ {
		k := testKey(n)
		if n%2 == 0 {
			k = indexKey(n)
		}
		if err := small.Put(k, testValue(n, 4<<10)); err != nil {
			t.Fatal(err)
		}
	}
	st := small.Stats()
	if st.Evictions == 0 || st.ArchiveIndexEntries == 0 || st.ArchiveIndexEntries >= st.Entries || st.ArchiveIndexBytes >= st.Bytes ||
		st.ArchiveIndexBytes != st.ArchiveIndexEntries*(st.Bytes/st.Entries) {
		t.Errorf("after evictions: %d evictions, %d entries (%d bytes), %d archive index entries (%d bytes): want evictions, and both kinds counted apart (equal sizes)",
			st.Evictions, st.Entries, st.Bytes, st.ArchiveIndexEntries, st.ArchiveIndexBytes)
	}
}

// s0 is the stored size of a value of n bytes in an uncompressed store
// (its record: header and chunk table included).
func s0(n int) int64 {
	return int64(storedLen(encodeValue(id{}, make([]byte, n)), n))
}

// FuzzDecodeMeta: a metadata record read back from Badger never panics
// decodeMeta, and what it accepts encodes back to the same bytes.
func FuzzDecodeMeta(f *testing.F) {
	f.Add(metaRecord{size: 10, seq: 3}.encode())
	f.Add(metaRecord{size: 10, seq: 3, kind: kindArchiveIndex}.encode())
	f.Add([]byte{2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMeta(b)
		if err != nil {
			return
		}
		if got := m.encode(); string(got) != string(b) {
			t.Fatalf("decode(%x) = %+v, encodes to %x", b, m, got)
		}
	})
}
