package cache

import (
	"bytes"
	"errors"
	"testing"
)

func TestPutGetHasDelete(t *testing.T) {
	s := openTest(t, t.TempDir(), 64<<20)
	k := testKey(1)
	if _, ok, err := s.Get(k); ok || err != nil {
		t.Fatalf("Get on empty store = ok %v, err %v; want a miss", ok, err)
	}
	if s.Has(k) {
		t.Fatal("Has on empty store = true")
	}
	v := testValue(1, 800_000)
	if err := s.Put(k, v); err != nil {
		t.Fatal(err)
	}
	got, ok, err := s.Get(k)
	if err != nil || !ok || !bytes.Equal(got, v) {
		t.Fatalf("Get after Put = %d bytes, ok %v, err %v; want the %d bytes put", len(got), ok, err, len(v))
	}
	if !s.Has(k) {
		t.Fatal("Has after Put = false")
	}
	// Replacing a value changes the bytes and the accounting.
	v2 := testValue(2, 5000)
	if err := s.Put(k, v2); err != nil {
		t.Fatal(err)
	}
	if got, ok, _ := s.Get(k); !ok || !bytes.Equal(got, v2) {
		t.Fatal("Get after second Put did not return the new value")
	}
	st := s.Stats()
	if st.Entries != 1 || st.Bytes != 5000 || st.Hits != 2 || st.Misses != 1 || st.Puts != 2 {
		t.Fatalf("Stats = %+v; want 1 entry, 5000 bytes, 2 hits, 1 miss, 2 puts", st)
	}
	if err := s.Delete(k); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Get(k); ok || s.Has(k) {
		t.Fatal("entry still there after Delete")
	}
	if st := s.Stats(); st.Entries != 0 || st.Bytes != 0 {
		t.Fatalf("Stats after Delete = %+v; want empty", st)
	}
	if err := s.Delete(k); err != nil {
		t.Fatalf("Delete of a missing key: %v", err)
	}
}

func TestPutTooLarge(t *testing.T) {
	s := openTest(t, t.TempDir(), 1<<20)
	err := s.Put(testKey(1), make([]byte, 1<<20+1))
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Put of a value over the budget: err = %v; want ErrTooLarge", err)
	}
	if s.Has(testKey(1)) {
		t.Fatal("refused value was stored")
	}
}

func TestReopenAfterCleanClose(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, MaxBytes: 256 << 20, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	var total int64
	for i := range n {
		v := testValue(i, testSize(i))
		total += int64(len(v))
		if err := s.Put(testKey(i), v); err != nil {
			t.Fatal(err)
		}
	}
	// Read the first half so that the second half is least recently used.
	for i := range n / 2 {
		if _, ok, err := s.Get(testKey(i)); !ok || err != nil {
			t.Fatalf("Get(%d) = ok %v err %v", i, ok, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get(testKey(0)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after Close: err = %v; want ErrClosed", err)
	}

	s = openTest(t, dir, 256<<20)
	st := s.Stats()
	if st.Entries != n || st.Bytes != total {
		t.Fatalf("after reopen Stats = %+v; want %d entries, %d bytes", st, n, total)
	}
	for i := range n {
		got, ok, err := s.Get(testKey(i))
		if err != nil || !ok || !bytes.Equal(got, testValue(i, testSize(i))) {
			t.Fatalf("after reopen Get(%d) = %d bytes, ok %v, err %v", i, len(got), ok, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// The access order survived the restart: with the budget halved, the
	// entries read last (in key order, after the reopen) stay and the
	// earliest read go.
	s2, err := Open(Options{Dir: dir, MaxBytes: total / 2, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	waitFor(t, func() bool { return s2.Stats().Bytes <= total/2 })
	for i := n - 20; i < n; i++ {
		if !s2.Has(testKey(i)) {
			t.Fatalf("entry %d (most recently read) was evicted", i)
		}
	}
	for i := range 20 {
		if s2.Has(testKey(i)) {
			t.Fatalf("entry %d (least recently read) survived eviction", i)
		}
	}
}

func TestClear(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, 64<<20)
	for i := range 10 {
		if err := s.Put(testKey(i), testValue(i, 10000)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Clear(); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Entries != 0 || st.Bytes != 0 || s.Has(testKey(1)) {
		t.Fatalf("after Clear Stats = %+v", st)
	}
	if err := s.Put(testKey(1), testValue(1, 10000)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// An inspecting open reports the serving budget and evicts nothing.
	in, err := Open(Options{Dir: dir, Inspect: true, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if st := in.Stats(); st.Entries != 1 || st.MaxBytes != 64<<20 {
		t.Fatalf("inspecting Stats = %+v; want 1 entry and the recorded 64 MiB budget", st)
	}
	// Clearing from a tool keeps the recorded budget.
	if err := in.Clear(); err != nil {
		t.Fatal(err)
	}
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	in2, err := Open(Options{Dir: dir, Inspect: true, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer in2.Close()
	if st := in2.Stats(); st.Entries != 0 || st.MaxBytes != 64<<20 {
		t.Fatalf("after a tool's Clear Stats = %+v; want empty with the 64 MiB budget", st)
	}
}
