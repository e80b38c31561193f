package spec

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestReadRegular: a regular file is read whole; a FIFO (with no writer:
// an open that waited for one would hang), a device and a directory are
// refused at once as not regular, and a file over the bound before a
// byte is read.
func TestReadRegular(t *testing.T) {
	dir := t.TempDir()
	ok := filepath.Join(dir, "ok")
	if err := os.WriteFile(ok, []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadRegular(ok, 10); err != nil || string(b) != "0123456789" {
		t.Errorf("a 10-byte file at a 10-byte bound: %q, %v", b, err)
	}
	if _, err := ReadRegular(ok, 9); !errors.Is(err, ErrFileTooLarge) {
		t.Errorf("a 10-byte file at a 9-byte bound: %v, want ErrFileTooLarge", err)
	}
	for _, p := range []string{fifo, "/dev/zero", dir} {
		done := make(chan error, 1)
		go func() { _, err := ReadRegular(p, 1<<20); done <- err }()
		select {
		case err := <-done:
			if !errors.Is(err, ErrNotRegular) {
				t.Errorf("%s: %v, want ErrNotRegular", p, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: still reading after 5 s", p)
		}
	}
}
