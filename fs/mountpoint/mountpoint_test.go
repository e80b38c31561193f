package mountpoint

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestUnescape(t *testing.T) {
	if got := unescape(`/tmp/a\040b\134c`); got != `/tmp/a b\c` {
		t.Errorf("got %q", got)
	}
	if got := unescape(`/x\04`); got != `/x\04` {
		t.Errorf("short escape: %q", got)
	}
}

func TestParseMountinfo(t *testing.T) {
	const text = `22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
40 22 0:35 / /mnt/a\040b rw,nosuid - fuse.featurefs s3://bucket/p\040q ro
41 22 0:36 / /mnt/stacked rw - tmpfs tmpfs rw
42 41 0:37 / /mnt/stacked ro - fuse.featurefs /data ro
`
	for dir, want := range map[string][2]string{
		"/":            {"ext4", "/dev/sda1"},
		"/mnt/a b":     {"fuse.featurefs", "s3://bucket/p q"},
		"/mnt/stacked": {"fuse.featurefs", "/data"}, // the last mount wins
	} {
		fstype, src, ok := parseMountinfo(text, dir)
		if !ok || fstype != want[0] || src != want[1] {
			t.Errorf("%s: %q %q %v, want %q", dir, fstype, src, ok, want)
		}
	}
	if _, _, ok := parseMountinfo(text, "/mnt"); ok {
		t.Error("/mnt is not a mount point")
	}
	if fstype, _, ok := MountedOn("/proc"); !ok || fstype != "proc" {
		t.Errorf("MountedOn(/proc) = %q, %v", fstype, ok)
	}
}

// TestCheck: a free empty directory is fine; a missing one, a file, one in
// use and a non-empty one are refused with a message saying what to do;
// allowNonempty accepts the non-empty one.
func TestCheck(t *testing.T) {
	dir := t.TempDir()
	if err := Check(dir, false, nil); err != nil {
		t.Errorf("free directory: %v", err)
	}
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dir, want string
	}{
		{filepath.Join(dir, "nope"), "mkdir -p"},
		{file, "not a directory"},
		{"/proc", "in use"},
		{dir, "--allow-nonempty"},
	} {
		if err := Check(c.dir, false, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Check(%s) = %v, want an error saying %q", c.dir, err, c.want)
		}
	}
	if err := Check(dir, true, nil); err != nil {
		t.Errorf("non-empty with allowNonempty: %v", err)
	}
}

// TestUnmountRetriesThenDetaches: a busy unmount is retried; one that keeps
// failing ends in a lazy detach (which fails here: nothing is mounted).
func TestUnmountRetriesThenDetaches(t *testing.T) {
	calls := 0
	Unmount(func() error {
		calls++
		if calls < 3 {
			return errors.New("busy")
		}
		return nil
	}, t.TempDir(), nil)
	if calls != 3 {
		t.Errorf("unmount called %d times, want 3 (two busy, then done)", calls)
	}
	calls = 0
	Unmount(func() error { calls++; return errors.New("busy") }, t.TempDir(), nil)
	if calls != 5 {
		t.Errorf("a mount that stays busy: unmount called %d times, want 5", calls)
	}
}
