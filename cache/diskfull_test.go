package cache

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/featurefs/featurefs/test/testenv"
)

func countLines(log, sub string) int {
	n := 0
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, sub) {
			n++
		}
	}
	return n
}

// TestFullFilesystem fills a 24 MiB tmpfs through a store with the default
// 10 GiB budget, from four writers. Badger writes its value log through a
// memory map of a sparse file, so on 8f60f93 a write into the full
// filesystem killed the process with SIGBUS. Now: a warning at open gives the
// budget, the free space and the effective bound; Puts past it fail with
// ErrDiskFull and one WARN; every value stored reads back, also after a
// reopen; with the filesystem filled to its last byte by another file, an
// inspecting open is read-only and sees every entry, and Clear empties the
// cache and opens it for writing again.
func TestFullFilesystem(t *testing.T) {
	dir := filepath.Join(testenv.MountTmpfs(t, 24<<20), "cache")
	var log syncBuffer
	s, err := Open(Options{Dir: dir, Logger: textLogger(&log)})
	if err != nil {
		t.Fatal(err)
	}
	if n := countLines(log.String(), "larger than the free space of the cache's filesystem"); n != 1 {
		t.Errorf("%d warnings at open that the budget exceeds the free space, want 1:\n%s", n, log.String())
	}
	if !strings.Contains(log.String(), "effective_bound_bytes=") || !strings.Contains(log.String(), "free_bytes=") {
		t.Errorf("the warning at open lacks the free space or the effective bound:\n%s", log.String())
	}

	const size = 512 << 10
	var (
		mu     sync.Mutex
		stored []int
		wg     sync.WaitGroup
	)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			refused := 0
			for n := w; refused < 5; n += 4 {
				err := s.Put(testKey(n), testValue(n, size))
				switch {
				case err == nil:
					mu.Lock()
					stored = append(stored, n)
					mu.Unlock()
				case errors.Is(err, ErrDiskFull):
					refused++
				default:
					t.Errorf("Put %d: %v, want nil or ErrDiskFull", n, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	st := s.Stats()
	t.Logf("stored %d values of %d KiB; free %d bytes, reserve %d bytes, %d refusals", len(stored), size>>10, st.DiskFreeBytes, st.DiskReserveBytes, st.DiskFullRefusals)
	if len(stored) < 10 {
		t.Fatalf("only %d values stored in 24 MiB", len(stored))
	}
	if st.DiskFullRefusals < 20 {
		t.Errorf("DiskFullRefusals = %d, want at least 20", st.DiskFullRefusals)
	}
	if n := countLines(log.String(), "cache filesystem full"); n != 1 {
		t.Errorf("%d 'cache filesystem full' warnings, want 1:\n%s", n, log.String())
	}
	check := func(s *Store, when string) {
		t.Helper()
		for _, n := range stored {
			v, ok, err := s.Get(testKey(n))
			if err != nil || !ok || !bytes.Equal(v, testValue(n, size)) {
				t.Fatalf("%s: Get %d: ok=%v err=%v, equal=%v", when, n, ok, err, bytes.Equal(v, testValue(n, size)))
			}
		}
	}
	check(s, "full")
	if err := s.Close(); err != nil {
		t.Fatalf("Close on the full filesystem: %v", err)
	}

	s, err = Open(Options{Dir: dir, Logger: textLogger(&log)})
	if err != nil {
		t.Fatalf("reopen on the full filesystem: %v", err)
	}
	if got := s.Stats().Entries; got != int64(len(stored)) {
		t.Errorf("reopened: %d entries, want %d", got, len(stored))
	}
	check(s, "reopened")
	if err := s.Put(testKey(1<<20), testValue(1<<20, size)); !errors.Is(err, ErrDiskFull) {
		t.Errorf("Put on the reopened full cache: %v, want ErrDiskFull", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Another file takes the last byte: cache stats and clear still work.
	testenv.FillFS(t, filepath.Dir(dir))
	var ilog syncBuffer
	s, err = Open(Options{Dir: dir, Logger: textLogger(&ilog), Inspect: true})
	if err != nil {
		t.Fatalf("inspecting open on a filesystem with 0 bytes free: %v", err)
	}
	st = s.Stats()
	if !st.ReadOnly || st.Entries != int64(len(stored)) {
		t.Errorf("inspect at 0 bytes free: read-only %v, %d entries; want true, %d", st.ReadOnly, st.Entries, len(stored))
	}
	check(s, "read-only")
	if err := s.Clear(); err != nil {
		t.Fatalf("Clear at 0 bytes free: %v", err)
	}
	st = s.Stats()
	if st.ReadOnly || st.Entries != 0 {
		t.Errorf("after Clear: read-only %v, %d entries; want false, 0", st.ReadOnly, st.Entries)
	}
	// Open for writing again: the next refusal is said again, once.
	cleared := len(ilog.String())
	for n, refused := 0, 0; refused < 3; n++ {
		err := s.Put(testKey(1<<21+n), testValue(n, size))
		switch {
		case errors.Is(err, ErrDiskFull):
			refused++
		case err != nil:
			t.Fatalf("Put after Clear: %v, want nil or ErrDiskFull", err)
		case n > 64:
			t.Fatalf("%d Puts of %d KiB after Clear and none refused in a 24 MiB filesystem", n, size>>10)
		}
	}
	if n := countLines(ilog.String()[cleared:], "cache filesystem full"); n != 1 {
		t.Errorf("%d 'cache filesystem full' warnings after Clear reopened the cache for writing, want 1:\n%s", n, ilog.String())
	}
	if err := s.Clear(); err != nil { // room for the Put below
		t.Fatalf("Clear: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(Options{Dir: dir, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(testKey(7), testValue(7, size)); err != nil {
		t.Errorf("Put after Clear: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestDirRemovedWhileOpen: the cache directory deleted under an open store
// gives one WARN, Puts fail with ErrDirRemoved, values stored before still
// read, and Close returns at once without Badger's "error flushing
// memtable ... retrying" (on 8f60f93 Puts went on and Close retried the
// flush every second, forever).
func TestDirRemovedWhileOpen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	var log syncBuffer
	s, err := Open(Options{Dir: dir, MaxBytes: 64 << 20, Logger: textLogger(&log)})
	if err != nil {
		t.Fatal(err)
	}
	for n := range 20 {
		if err := s.Put(testKey(n), testValue(n, testSize(n))); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	for n := 20; n < 40; n++ {
		if err := s.Put(testKey(n), testValue(n, testSize(n))); !errors.Is(err, ErrDirRemoved) {
			t.Fatalf("Put %d after the directory was removed: %v, want ErrDirRemoved", n, err)
		}
	}
	for n := range 20 {
		v, ok, err := s.Get(testKey(n))
		if err != nil || !ok || !bytes.Equal(v, testValue(n, testSize(n))) {
			t.Fatalf("Get %d after the directory was removed: ok=%v err=%v", n, ok, err)
		}
	}
	time.Sleep(2 * tickInterval) // the cleaner runs and finds nothing to do
	if !s.Stats().DirRemoved {
		t.Error("Stats().DirRemoved is false")
	}
	done := make(chan error, 1)
	go func() { done <- s.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("Close did not return within 10s; log:\n%s", log.String())
	}
	out := log.String()
	if n := countLines(out, "removed while in use"); n != 1 {
		t.Errorf("%d warnings that the directory was removed, want 1:\n%s", n, out)
	}
	if n := countLines(out, "level=ERROR") + countLines(out, "retrying"); n != 0 {
		t.Errorf("%d error or retry lines:\n%s", n, out)
	}
}

// TestPrivateFiles: whatever the umask, a new cache directory is 0700 and
// every file in it 0600 (on 8f60f93: 0755 and 0644 under umask 022); an
// existing directory open to others gets one warning.
func TestPrivateFiles(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	parent := t.TempDir()
	dir := filepath.Join(parent, "cache")
	var log syncBuffer
	s, err := Open(Options{Dir: dir, MaxBytes: 8 << 20, Logger: textLogger(&log)})
	if err != nil {
		t.Fatal(err)
	}
	for n := range 60 { // past the budget: evictions, new value-log files
		if err := s.Put(testKey(n), testValue(n, 256<<10)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Reclaim(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(log.String(), "open to other users") {
		t.Errorf("a new directory was reported open to other users:\n%s", log.String())
	}
	_, files := testenv.CheckPrivateTree(t, dir)
	if files < 4 {
		t.Errorf("only %d files in the cache directory", files)
	}

	open := filepath.Join(parent, "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	var log2 syncBuffer
	s, err = Open(Options{Dir: open, MaxBytes: 8 << 20, Logger: textLogger(&log2)})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if n := countLines(log2.String(), "open to other users"); n != 1 {
		t.Errorf("%d warnings for a 0755 cache directory, want 1:\n%s", n, log2.String())
	}

	// A volume (a pod's emptyDir is 0777): its mode is not the user's to
	// change, so no WARN asks for chmod 700.
	vol := filepath.Join(parent, "volume")
	if err := os.Mkdir(vol, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(vol, 0o777)
	var log3 syncBuffer
	s, err = Open(Options{Dir: vol, MaxBytes: 8 << 20, Logger: textLogger(&log3), DirIsVolume: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if strings.Contains(log3.String(), "chmod 700") || strings.Contains(log3.String(), "level=WARN") {
		t.Errorf("a 0777 volume as the cache directory was warned about:\n%s", log3.String())
	}
}

// TestClearDirOnCrashedFullCache: a cache left by kill -9 (write-ahead logs
// to replay) on a filesystem with 0 bytes free cannot be opened, even
// read-only, and says so (ErrDiskFull, naming featurefs cache clear);
// ClearDir empties it without opening it, and it opens again.
func TestClearDirOnCrashedFullCache(t *testing.T) {
	fsDir := testenv.MountTmpfs(t, 32<<20)
	dir := filepath.Join(fsDir, "cache")
	cmd, out, _ := startHelper(t, "writer", dir, "0")
	for n := 0; n < 60 && out.Scan(); n++ {
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	mems, _ := filepath.Glob(filepath.Join(dir, "*.mem"))
	if len(mems) == 0 {
		t.Fatal("the killed writer left no write-ahead log")
	}
	testenv.FillFS(t, fsDir)
	_, err := Open(Options{Dir: dir, Logger: quietLogger(), Inspect: true})
	if !errors.Is(err, ErrDiskFull) || !strings.Contains(err.Error(), "cache clear") {
		t.Fatalf("Open of a crashed cache at 0 bytes free: %v, want ErrDiskFull naming cache clear", err)
	}
	if err := ClearDir(dir); err != nil {
		t.Fatalf("ClearDir: %v", err)
	}
	s, err := Open(Options{Dir: dir, Logger: quietLogger(), Inspect: true})
	if err != nil {
		t.Fatalf("Open after ClearDir: %v", err)
	}
	defer s.Close()
	if st := s.Stats(); st.Entries != 0 || st.ReadOnly {
		t.Errorf("after ClearDir: %d entries, read-only %v", st.Entries, st.ReadOnly)
	}
}
