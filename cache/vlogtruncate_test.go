package cache

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestBadgerVlogTruncatedWhileClosed measures what docs/CACHE.md says
// Badger does with a value log truncated while the store is closed (the
// values under Options.FileThreshold live there, not in files of their
// own): cut in the middle, the store opens; the values wholly before the
// cut read right; Badger logs an ERROR for each value past it and hands
// back an empty value, which the checksum turns into a miss (the entry
// dropped, counted, said once); no value is wrong, none is an error.
// Cut to nothing, Badger refuses to open the store ("Open existing file
// ... Create a new file"): the mount fails at its start, and `featurefs
// cache clear` empties the cache. (Truncated while the store is open,
// Badger's mapping of it faults the process: SIGBUS. Not tested here.)
func TestBadgerVlogTruncatedWhileClosed(t *testing.T) {
	const n, size = 40, 8 << 10 // 8 KiB: Badger's value log, not a file
	for _, cut := range []string{"half", "empty"} {
		t.Run(cut, func(t *testing.T) {
			dir := t.TempDir()
			s, err := Open(Options{Dir: dir, MaxBytes: 64 << 20, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			for k := range n {
				if err := s.Put(testKey(k), testValue(k, size)); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			vlogs, _ := filepath.Glob(filepath.Join(dir, "*.vlog"))
			if len(vlogs) != 1 {
				t.Fatalf("value-log files %v; want one", vlogs)
			}
			info, err := os.Stat(vlogs[0])
			if err != nil {
				t.Fatal(err)
			}
			to := int64(0)
			if cut == "half" {
				to = info.Size() / 2
			}
			if err := os.Truncate(vlogs[0], to); err != nil {
				t.Fatal(err)
			}
			logs := &syncBuffer{}
			s, err = Open(Options{Dir: dir, MaxBytes: 64 << 20, Logger: textLogger(logs)})
			if cut == "empty" {
				if err == nil {
					s.Close()
					t.Fatal("Open with an empty value log succeeded; docs/CACHE.md says Badger refuses it")
				}
				t.Logf("Open with an empty value log: %v", err)
				return
			}
			if err != nil {
				t.Fatalf("Open with a value log cut in half: %v", err)
			}
			defer s.Close()
			hits, misses := 0, 0
			for k := range n {
				v, ok, err := s.Get(testKey(k))
				switch {
				case err != nil:
					t.Fatalf("Get %d: %v; want its bytes or a miss", k, err)
				case ok && !bytes.Equal(v, testValue(k, size)):
					t.Fatalf("Get %d: wrong bytes", k)
				case ok:
					hits++
				default:
					misses++
				}
			}
			st := s.Stats()
			t.Logf("value log cut from %d to %d bytes: %d values read right, %d misses, %d checksum failures",
				info.Size(), to, hits, misses, st.ChecksumFailures)
			if hits == 0 || misses == 0 || st.ChecksumFailures != int64(misses) || st.Entries != int64(hits) {
				t.Errorf("%d hits, %d misses, %d checksum failures, %d entries; want some of each, a failure per miss, an entry per hit",
					hits, misses, st.ChecksumFailures, st.Entries)
			}
			// The store goes on: a Put after it reads.
			if err := s.Put(testKey(n), testValue(n, size)); err != nil {
				t.Fatal(err)
			}
			if v, ok, err := s.Get(testKey(n)); !ok || err != nil || !bytes.Equal(v, testValue(n, size)) {
				t.Fatalf("Get after a Put: ok %v err %v", ok, err)
			}
		})
	}
}
