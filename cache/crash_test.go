package cache

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
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

// TestKill9DuringCompaction kills a child compacting raw files at rest
// (compact.go) with SIGKILL at each step of a compaction (its intent
// recorded; its file renamed into place, the index not yet pointing at
// it; the index committed) and at random moments, then reopens the cache:
// every value reads back byte for byte, none is lost or damaged, the file
// stopped between rename and index is rolled forward, the budget counts
// what each file holds, and nothing of the compaction is left over. On
// 06087ba there is no compaction to kill (issue 49 item 7).
func TestKill9DuringCompaction(t *testing.T) {
	const n = 12
	for _, step := range []string{"intent", "renamed", "committed", "random"} {
		t.Run(step, func(t *testing.T) {
			dir := t.TempDir()
			s, _ := putRaw(t, dir, n, -1)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			rounds := 1
			if step == "random" {
				rounds = 8
			}
			var compacted int
			for round := range rounds {
				cmd, out, _ := startHelper(t, "compactor", dir, step)
				lines := make(chan string)
				go func() {
					defer close(lines)
					for out.Scan() {
						lines <- out.Text()
					}
				}()
				line := func() string {
					select {
					case l := <-lines:
						return l
					case <-time.After(120 * time.Second):
						t.Fatalf("killed at %s: the helper said nothing for 120 s (no compaction reached that step)", step)
						return ""
					}
				}
				if l := line(); l != "ready" {
					t.Fatalf("helper: %q", l)
				}
				var at string
				if step == "random" {
					// Compaction starts 20 ms after the open's work; a
					// file takes a few ms (0.1-0.5 s under the race
					// detector), then as long again asleep. Kills from
					// 20 ms to 2.6 s after the open, plus up to 10 ms.
					time.Sleep(time.Duration(20<<round)*time.Millisecond + time.Duration(rand.IntN(10_000))*time.Microsecond)
				} else {
					l := line()
					if !strings.HasPrefix(l, "at ") {
						t.Fatalf("helper: %q", l)
					}
					at = strings.TrimPrefix(l, "at ")
				}
				if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				cmd.Wait()

				s := openAuto(t, dir, -1)
				checkValues(t, s, n)
				var want int64
				compacted = 0
				for k := range n {
					i := testKey(k).id()
					info, err := os.Stat(s.filePath(i))
					if err != nil {
						t.Fatal(err)
					}
					if info.Size() == layer12Len {
						want += layer12Len
						continue
					}
					compacted++
					want += info.Size() - headerLen
					if i.String() == at && step == "intent" {
						t.Errorf("killed at %s: %s's file was replaced", step, at)
					}
				}
				if step == "renamed" || step == "committed" {
					if compacted != 1 {
						t.Errorf("killed at %s: %d files compacted, want 1 (the one in hand)", step, compacted)
					}
				}
				st := s.Stats()
				t.Logf("round %d, killed at %s: %d of %d files compacted, %d bytes counted", round, step, compacted, n, st.Bytes)
				if st.Bytes != want {
					t.Errorf("budget counts %d bytes; the files hold %d", st.Bytes, want)
				}
				if err := s.db.View(func(txn *badger.Txn) error {
					_, err := txn.Get(intentKey)
					return err
				}); !errors.Is(err, badger.ErrKeyNotFound) {
					t.Errorf("compaction intent left in the index after reopen: %v", err)
				}
				if tmps, _ := filepath.Glob(filepath.Join(dir, filesDir, "*", tmpPrefix+"*")); len(tmps) != 0 {
					t.Errorf("temporary files left after reopen: %v", tmps)
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
			}
			if step == "random" && compacted == 0 {
				t.Errorf("no file compacted in %d rounds of random kills", rounds)
			}
		})
	}
}
