package cache

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

// openWithin opens dir, failing the test if Open blocks for 10 s.
func openWithin(t *testing.T, dir string) (*Store, error) {
	t.Helper()
	type res struct {
		s   *Store
		err error
	}
	ch := make(chan res, 1)
	go func() {
		s, err := Open(Options{Dir: dir, MaxBytes: 64 << 20, Logger: quietLogger()})
		ch <- res{s, err}
	}()
	select {
	case r := <-ch:
		return r.s, r.err
	case <-time.After(10 * time.Second):
		t.Fatalf("Open(%s) hung", dir)
		return nil, nil
	}
}

func TestSecondOpenInProcessIsLocked(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, 64<<20)
	if err := s.Put(testKey(1), testValue(1, 5000)); err != nil {
		t.Fatal(err)
	}
	s2, err := openWithin(t, dir)
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), dir) {
		if s2 != nil {
			s2.Close()
		}
		t.Fatalf("second Open: err = %v; want ErrLocked naming %s", err, dir)
	}
	// The first store is unharmed.
	if _, ok, err := s.Get(testKey(1)); !ok || err != nil {
		t.Fatalf("first store after a refused second Open: ok %v err %v", ok, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s3, err := openWithin(t, dir)
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	s3.Close()
}

func TestOtherProcessHoldsLock(t *testing.T) {
	dir := t.TempDir()
	cmd, out, stdin := startHelper(t, "lock", dir)
	if !out.Scan() || out.Text() != "ready" {
		t.Fatalf("helper did not open the cache: %q", out.Text())
	}
	_, err := openWithin(t, dir)
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("Open while another process holds the cache: err = %v; want ErrLocked", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, dir) || !strings.Contains(msg, "pid "+strconv.Itoa(cmd.Process.Pid)) {
		t.Fatalf("lock error %q does not name the directory %s and the holder's pid %d", msg, dir, cmd.Process.Pid)
	}
	t.Logf("lock error: %v", err)

	// A holder that dies without closing (kill -9) leaves no stale lock.
	stdin.Close()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	s, err := openWithin(t, dir)
	if err != nil {
		t.Fatalf("Open after the holder was killed: %v", err)
	}
	s.Close()
}

// TestOpenWaitsForClosingHolder: with Options.WaitClosing, Open waits for
// a process that marked itself closing (an unmounted mount whose process
// has not exited yet) and succeeds once it has closed, calling OnWait once
// with its pid; a holder that is not closing is still refused, after the
// grace of lockGrace; without WaitClosing Open fails at once as before
// (issue 36, item 14).
func TestOpenWaitsForClosingHolder(t *testing.T) {
	dir := t.TempDir()
	cmd, out, stdin := startHelper(t, "closing", dir)
	if !out.Scan() || out.Text() != "ready" {
		t.Fatalf("helper did not open the cache: %q", out.Text())
	}
	if pid, closing := Holder(dir); pid != cmd.Process.Pid || closing {
		t.Errorf("Holder: %d, %v; want %d, not closing", pid, closing, cmd.Process.Pid)
	}
	start := time.Now()
	_, err := Open(Options{Dir: dir, MaxBytes: 64 << 20, Logger: quietLogger(), WaitClosing: 30 * time.Second,
		OnWait: func(int) { t.Error("OnWait called for a holder that is not closing") }})
	if d := time.Since(start); !errors.Is(err, ErrLocked) || d < lockGrace/2 || d > 15*time.Second {
		t.Fatalf("Open while a serving process holds the cache: %v after %v; want ErrLocked after about %v", err, d, lockGrace)
	}
	stdin.Close()
	if !out.Scan() || out.Text() != "closing" {
		t.Fatalf("helper: %q", out.Text())
	}
	if pid, closing := Holder(dir); pid != cmd.Process.Pid || !closing {
		t.Errorf("Holder of a closing store: %d, %v; want %d, closing", pid, closing, cmd.Process.Pid)
	}
	if _, err := openWithin(t, dir); !errors.Is(err, ErrLocked) {
		t.Fatalf("Open without WaitClosing: %v; want ErrLocked at once", err)
	}
	var pids []int
	s, err := Open(Options{Dir: dir, MaxBytes: 64 << 20, Logger: quietLogger(), WaitClosing: 30 * time.Second,
		OnWait: func(pid int) { pids = append(pids, pid) }})
	if err != nil {
		t.Fatalf("Open waiting for a closing holder: %v", err)
	}
	defer s.Close()
	if len(pids) != 1 || pids[0] != cmd.Process.Pid {
		t.Errorf("OnWait called with %v; want once with %d", pids, cmd.Process.Pid)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("helper: %v", err)
	}
}
