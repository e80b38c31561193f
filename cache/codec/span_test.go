package codec

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestSpanIsWhatReadAtReads: ReadAt on a blob whose bytes outside its
// header, its table and Span's range are scrambled returns what it
// returns on the whole blob, for reads of every alignment and length
// (empty ones included); so a reader of a blob in a file reads only those
// (cache/files.go readRecordAt).
func TestSpanIsWhatReadAtReads(t *testing.T) {
	raw := relu(5*ChunkSize+1234, 0.4, 7)
	for _, m := range []Method{S2, Zeros, ZstdFastest} {
		b, err := Encode(nil, raw, 4, m)
		if err != nil {
			t.Fatal(err)
		}
		meta, err := MetaLen(b[:HeaderLen])
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(1, 2))
		offs := []int64{0, 1, ChunkSize - 1, ChunkSize, 3*ChunkSize + 17, int64(len(raw)) - 1, int64(len(raw)), int64(len(raw)) + 5}
		for range 40 {
			offs = append(offs, int64(r.IntN(len(raw))))
		}
		for _, off := range offs {
			for _, n := range []int{0, 1, 4096, ChunkSize, 2*ChunkSize + 3, len(raw)} {
				start, end, err := Span(b, off, n)
				if err != nil {
					t.Fatalf("%s: Span(%d, %d): %v", m, off, n, err)
				}
				if start > end || (start < meta && start != end) || end > len(b) {
					t.Fatalf("%s: Span(%d, %d) = [%d, %d) of %d bytes, table ends at %d", m, off, n, start, end, len(b), meta)
				}
				sparse := bytes.Clone(b)
				for i := meta; i < len(sparse); i++ {
					if i < start || i >= end {
						sparse[i] ^= 0xa5
					}
				}
				want := make([]byte, n)
				wn, wsize, werr := ReadAt(b, want, off)
				got := make([]byte, n)
				gn, gsize, gerr := ReadAt(sparse, got, off)
				if werr != nil || gerr != nil || gn != wn || gsize != wsize || !bytes.Equal(got[:gn], want[:wn]) {
					t.Fatalf("%s: ReadAt(%d, %d): whole blob %d, %d, %v; only the span %d, %d, %v", m, off, n, wn, wsize, werr, gn, gsize, gerr)
				}
			}
		}
	}
	if _, _, err := Span([]byte("not a blob at all, no"), 0, 1); err == nil {
		t.Error("Span of a non-blob: no error")
	}
}
