package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// MountTmpfs mounts a tmpfs of size bytes on a fresh directory (the test
// needs root) and unmounts it when the test ends (after the mounts that use
// it: cleanups run last first).
func MountTmpfs(t testing.TB, size int64) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d,mode=0755", size), "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("testenv: mount a %d-byte tmpfs on %s (the test needs root): %v: %s", size, dir, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
			exec.Command("umount", "-l", dir).Run()
		}
	})
	return dir
}

// FillFS writes dir/filler until the filesystem holding dir has no block
// left for an unprivileged writer, and fails the test otherwise.
func FillFS(t testing.TB, dir string) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for buf := make([]byte, 64<<10); len(buf) > 0; {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill %s: %v", dir, err)
			}
			buf = buf[:len(buf)/2]
		}
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil || st.Bavail != 0 {
		t.Fatalf("%s: %d blocks free after filling it (%v)", dir, st.Bavail, err)
	}
}
