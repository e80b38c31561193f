package cache

import (
	"bytes"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestKill9DuringWrites kills a child process with SIGKILL while four of its
// goroutines Put values of 4 KiB to 800 KB, then reopens the cache: every
// Put the child reported as returned must be there with the right bytes,
// every entry returned must be intact, and the accounting must match. Two
// rounds, so the second child writes into a recovered cache.
func TestKill9DuringWrites(t *testing.T) {
	dir := t.TempDir()
	const killAfter = 120
	for round := range 2 {
		first := round * 100_000
		cmd, out, _ := startHelper(t, "writer", dir, strconv.Itoa(first))
		acked := map[int]bool{}
		for len(acked) < killAfter && out.Scan() {
			line := out.Text()
			k, err := strconv.Atoi(strings.TrimPrefix(line, "put "))
			if err != nil {
				t.Fatalf("helper: %s", line)
			}
			acked[k] = true
		}
		if len(acked) < killAfter {
			t.Fatalf("helper stopped after %d puts", len(acked))
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		cmd.Wait()
		// Puts that returned after we stopped reading were also durable,
		// but we only know about the ones we read.

		s, err := Open(Options{Dir: dir, MaxBytes: 4 << 30, Logger: quietLogger()})
		if err != nil {
			t.Fatalf("round %d: reopen after kill -9: %v", round, err)
		}
		for k := range acked {
			v, ok, err := s.Get(testKey(k))
			if err != nil || !ok {
				s.Close()
				t.Fatalf("round %d: acknowledged Put %d lost after kill -9 (ok %v, err %v)", round, k, ok, err)
			}
			if !bytes.Equal(v, testValue(k, crashSize(k))) {
				s.Close()
				t.Fatalf("round %d: entry %d has wrong bytes", round, k)
			}
		}
		// Every key the child may have started: whatever is returned is
		// right, and the index agrees with the store.
		var n, sum int64
		for r := range round + 1 {
			for k := r * 100_000; k < r*100_000+len(acked)+64; k++ {
				v, ok, err := s.Get(testKey(k))
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					continue
				}
				if !bytes.Equal(v, testValue(k, crashSize(k))) {
					t.Fatalf("round %d: entry %d has wrong bytes", round, k)
				}
				n++
				sum += int64(len(v))
			}
		}
		st := s.Stats()
		t.Logf("round %d: %d acknowledged puts, %d entries after reopen, %d checksum failures", round, len(acked), st.Entries, st.ChecksumFailures)
		if st.Entries != n || st.Bytes != sum {
			t.Fatalf("round %d: Stats = %+v; want %d entries of %d bytes", round, st, n, sum)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
