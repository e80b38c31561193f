package cache

import (
	"testing"

	"github.com/featurefs/featurefs/cache/codec"
)

// BenchmarkFileReadAt reads 800 KB values in files from a warm cache the
// way the mount does (ReadAt, 128 KiB at a time, front to back, 4
// readers): plain bytes (a pread of the chunks read) and compressed (a
// pread of the blob's table and of the chunks read, decoded; readRecordAt).
func BenchmarkFileReadAt(b *testing.B) {
	for _, m := range []codec.Method{0, codec.S2, codec.Zeros} {
		name := "raw"
		if m != 0 {
			name = m.String()
		}
		b.Run(name, func(b *testing.B) {
			s, err := Open(Options{Dir: b.TempDir(), MaxBytes: 4 << 30, Logger: quietLogger(), Compression: m})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			const n = 64
			for k := range n {
				if err := s.Put(testKey(k), reluValue(k, benchValue)); err != nil {
					b.Fatal(err)
				}
			}
			read := func(k int) ([]byte, error) {
				dst := make([]byte, 128<<10)
				for off := int64(0); off < benchValue; off += int64(len(dst)) {
					if _, _, ok, err := s.ReadAt(testKey(k), dst, off); !ok || err != nil {
						b.Fatalf("ReadAt %d at %d: ok %v err %v", k, off, ok, err)
					}
				}
				return dst[:0], nil
			}
			readAll(b, n, 0, read) // warm: page cache, open files
			b.SetBytes(n * benchValue)
			b.ResetTimer()
			for i := uint64(0); b.Loop(); i++ {
				readAll(b, n, i, read)
			}
		})
	}
}

// BenchmarkOpenFileVerify is OpenFile of an 803 KB plain file that it
// verifies at every open (the check of a file handed to the kernel:
// verifyRawFile), warm.
func BenchmarkOpenFileVerify(b *testing.B) {
	s, err := Open(Options{Dir: b.TempDir(), MaxBytes: 1 << 30, Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	k := testKey(0)
	if err := s.Put(k, testValue(0, benchValue)); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(benchValue)
	for b.Loop() {
		s.wrote.clear() // not one it wrote: verified at every open
		f, _, _, ok, err := s.OpenFile(k, FileID{})
		if !ok || err != nil {
			b.Fatalf("OpenFile: ok %v err %v", ok, err)
		}
		f.Close()
	}
}
