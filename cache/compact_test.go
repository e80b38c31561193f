package cache

import (
	"bytes"
	"os"
	"testing"
	"time"

	"github.com/featurefs/featurefs/cache/codec"
)

// putRaw Puts keys 0..n-1 as layer12 features into a store told it runs
// on a GPU host (extraction 0.2 ms per feature), so that each is written
// raw, and returns the store.
func putRaw(t *testing.T, dir string, n int, after time.Duration) (*Store, *fakeWorkload) {
	t.Helper()
	for k := range n {
		layer12Value(k) // made before the Puts, which then follow each other closely
	}
	s := openAuto(t, dir, after)
	w := &fakeWorkload{perFeature: 200 * time.Microsecond}
	s.SetWorkload(w.workload())
	for k := range n {
		if err := s.Put(testKey(k), layer12Value(k)); err != nil {
			t.Fatal(err)
		}
	}
	if st := s.Stats(); st.AutoCompressedPuts != 0 || st.Bytes != int64(n*layer12Len) {
		t.Fatalf("GPU-like Puts: %d compressed, %d bytes counted; want %d raw", st.AutoCompressedPuts, st.Bytes, n*layer12Len)
	}
	return s, w
}

// checkValues checks that keys 0..n-1 read back (Get and ReadAt) as the
// bytes Put, and that the budget counts what the index holds.
func checkValues(t *testing.T, s *Store, n int) {
	t.Helper()
	for k := range n {
		want := layer12Value(k)
		got, ok, err := s.Get(testKey(k))
		if !ok || err != nil || !bytes.Equal(got, want) {
			t.Fatalf("Get %d: ok %v, err %v, bytes equal %v", k, ok, err, bytes.Equal(got, want))
		}
		buf := make([]byte, 128<<10)
		for off := 0; off < len(want); off += len(buf) {
			c, size, ok, err := s.ReadAt(testKey(k), buf, int64(off))
			if !ok || err != nil || size != int64(len(want)) || !bytes.Equal(buf[:c], want[off:min(off+len(buf), len(want))]) {
				t.Fatalf("ReadAt %d at %d: ok %v, err %v, size %d", k, off, ok, err, size)
			}
		}
	}
	if st := s.Stats(); st.Entries != int64(n) || st.ChecksumFailures != 0 {
		t.Fatalf("Stats: %d entries, %d checksum failures; want %d, 0", st.Entries, st.ChecksumFailures, n)
	}
}

// TestCompactionAtRest (issue 49 item 7): raw files written under the GPU
// host's policy are compacted once the store has been idle for
// CompactAfter: they read back byte for byte, the disk and the budget
// shrink to no more than 1/1.5 of the raw bytes, each file holds exactly
// the record a Put of its key under auto writes, and a reopened store
// agrees. On 06087ba raw files stayed raw.
func TestCompactionAtRest(t *testing.T) {
	const n = 16
	dir := t.TempDir()
	s, _ := putRaw(t, dir, n, 100*time.Millisecond)
	raw := filesBytes(t, dir)
	deadline := time.Now().Add(120 * time.Second)
	for s.Stats().Compactions < n && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	st := s.Stats()
	if st.Compactions != n {
		s.Close()
		t.Fatalf("%d of %d raw files compacted within 120 s of idle", st.Compactions, n)
	}
	disk := filesBytes(t, dir)
	t.Logf("compacted %d files: %d bytes on disk, %d before (%.2fx); budget %d bytes, saved %d", n, disk, raw, float64(raw)/float64(disk), st.Bytes, st.CompactionSavedBytes)
	if float64(disk) > float64(n*layer12Len)/1.5 {
		t.Errorf("%d bytes on disk after compaction for %d raw; want at least 1.5x smaller", disk, n*layer12Len)
	}
	if st.Bytes != int64(n*layer12Len)-st.CompactionSavedBytes || st.Bytes > int64(n*layer12Len*2/3) {
		t.Errorf("budget counts %d bytes, saved %d of %d", st.Bytes, st.CompactionSavedBytes, n*layer12Len)
	}
	checkValues(t, s, n)
	for k := range n {
		i := testKey(k).id()
		want, err := encodeCompressed(i, layer12Value(k), 4, codec.Zeros)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(s.filePath(i))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("file of %d: not the record a Put under auto writes (err %v)", k, err)
		}
	}
	bytesBefore := st.Bytes
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openAuto(t, dir, -1)
	defer s.Close()
	if st := s.Stats(); st.Bytes != bytesBefore {
		t.Errorf("reopened: %d bytes counted, %d before", st.Bytes, bytesBefore)
	}
	checkValues(t, s, n)
}

// TestCompactionYieldsToReads: a read that arrives while a file is being
// compacted does not wait for it (the compactor is parked at each of its
// steps meanwhile, holding the key's stripe), not even a read of the very
// key being compacted before its file is replaced; the read of that key
// between the file's rename and its index entry gets the right bytes once
// the entry is committed, never a miss; and once work appears the
// compactor starts no other file until the store is idle again.
func TestCompactionYieldsToReads(t *testing.T) {
	const n = 12
	const after = 150 * time.Millisecond
	for _, step := range []string{"intent", "renamed"} {
		t.Run(step, func(t *testing.T) {
			dir := t.TempDir()
			s, w := putRaw(t, dir, n, after)
			defer s.Close()
			parked := make(chan id, 1)
			resume := make(chan struct{})
			hook := func(name string, i id) {
				if name == step {
					parked <- i
					<-resume
				}
			}
			s.auto.testStep.Store(&hook)
			var x id
			select {
			case x = <-parked:
			case <-time.After(30 * time.Second):
				t.Fatal("no compaction started within 30 s of idle")
			}
			s.auto.testStep.Store(nil)
			kx := -1
			for k := range n {
				if testKey(k).id() == x {
					kx = k
				}
			}
			ky := (kx + 1) % n
			// Another key: read while the compactor is parked.
			t0 := time.Now()
			got, ok, err := s.Get(testKey(ky))
			if d := time.Since(t0); !ok || err != nil || !bytes.Equal(got, layer12Value(ky)) || d > time.Second {
				t.Fatalf("Get of another key during a compaction: ok %v, err %v, %v", ok, err, d)
			}
			// The key being compacted.
			done := make(chan time.Duration, 1)
			go func() {
				t0 := time.Now()
				got, ok, err := s.Get(testKey(kx))
				if !ok || err != nil || !bytes.Equal(got, layer12Value(kx)) {
					t.Errorf("Get of the key being compacted (%s): ok %v, err %v", step, ok, err)
				}
				done <- time.Since(t0)
			}()
			var waited bool
			select {
			case d := <-done:
				if step == "renamed" {
					t.Fatalf("Get of the key between rename and index entry returned in %v without waiting for the entry", d)
				}
				t.Logf("Get of the key being compacted at %q: %v, the compactor parked", step, d)
			case <-time.After(300 * time.Millisecond):
				if step == "intent" {
					t.Fatal("Get of the key being compacted waited for the compactor before its file was replaced")
				}
				waited = true
			}
			close(resume)
			if waited {
				select {
				case d := <-done:
					t.Logf("Get of the key being compacted at %q: returned %v after it started, once the entry was committed", step, d)
				case <-time.After(10 * time.Second):
					t.Fatal("Get of the key being compacted did not return after the compactor went on")
				}
			}
			// Work (the caller's activity) keeps the compactor from
			// starting another file.
			time.Sleep(50 * time.Millisecond) // the file in hand is finished
			c0 := s.Stats().Compactions
			for range 20 {
				w.active.Add(1)
				time.Sleep(after / 5)
			}
			if c := s.Stats().Compactions; c != c0 {
				t.Errorf("%d files compacted while the caller was busy", c-c0)
			}
			// Idle again: the rest is compacted.
			waitCompactions(t, s, n)
			checkValues(t, s, n)
			if st := s.Stats(); st.ChecksumFailures != 0 || st.Misses != 0 {
				t.Errorf("%d checksum failures, %d misses; want none", st.ChecksumFailures, st.Misses)
			}
		})
	}
}

// TestCompactionSkipsHandedOutFiles: a value OpenFile handed out (the
// kernel may hold it as a passthrough backing file) stays a file of
// exactly its bytes; the others are compacted.
func TestCompactionSkipsHandedOutFiles(t *testing.T) {
	const n = 4
	dir := t.TempDir()
	s, _ := putRaw(t, dir, n, 200*time.Millisecond)
	defer s.Close()
	f, _, _, ok, err := s.OpenFile(testKey(0), FileID{})
	if !ok || err != nil {
		t.Fatalf("OpenFile: ok %v, err %v", ok, err)
	}
	defer f.Close()
	waitCompactions(t, s, n-1)
	time.Sleep(300 * time.Millisecond)
	if c := s.Stats().Compactions; c != n-1 {
		t.Errorf("%d compacted; want %d (all but the one handed out)", c, n-1)
	}
	if g, _, _, ok, _ := s.OpenFile(testKey(0), FileID{}); !ok {
		t.Error("the value handed out is no longer a plain file")
	} else {
		g.Close()
	}
	checkValues(t, s, n)
}

// waitCompactions waits up to 120 s for n compactions (a compaction
// takes a few ms, then as long asleep; the race detector and a loaded
// machine make it 0.1-0.5 s).
func waitCompactions(t *testing.T, s *Store, n int64) {
	t.Helper()
	deadline := time.Now().Add(120 * time.Second)
	for s.Stats().Compactions < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d compactions within 120 s", s.Stats().Compactions, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestNPYElemSize: the element size a compaction encodes with is the one a
// Put of a float32 or float16 feature takes; anything else is left raw.
func TestNPYElemSize(t *testing.T) {
	hdr := func(v byte, descr string) []byte {
		d := "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (4,), }"
		b := []byte("\x93NUMPY")
		b = append(b, v, 0)
		if v == 1 {
			b = append(b, byte(len(d)), 0)
		} else {
			b = append(b, byte(len(d)), 0, 0, 0)
		}
		return append(b, d...)
	}
	for _, c := range []struct {
		b    []byte
		want int
	}{
		{hdr(1, "<f4"), 4}, {hdr(1, "<f2"), 2}, {hdr(2, "<f4"), 4}, {hdr(3, "<f2"), 2},
		{hdr(1, ">f4"), 0}, {hdr(1, "<f8"), 0}, {hdr(1, "|u1"), 0}, {hdr(4, "<f4"), 0},
		{hdr(1, "<f4")[:20], 0}, {[]byte("not a npy file at all"), 0}, {nil, 0},
		{layer12Value(0), 4},
	} {
		if got := npyElemSize(c.b); got != c.want {
			t.Errorf("npyElemSize(%q) = %d, want %d", c.b[:min(len(c.b), 40)], got, c.want)
		}
	}
}
