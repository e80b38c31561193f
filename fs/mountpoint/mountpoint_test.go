package mountpoint

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
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
		{"/proc", "not empty"}, // a mount, but not FUSE: a directory like any other
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

// TestCheckAcceptsVolumes: a directory that is itself a mount point, but
// not a live FUSE mount (a bind mount, as every Kubernetes volumeMount
// and container volume is; a tmpfs, as a memory emptyDir is), is mounted
// on like any directory, and then mounted over for real; a live FUSE
// mount there is refused as in use. Needs root (mount(2)).
func TestCheckAcceptsVolumes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root to bind-mount (the integration tests run as root)")
	}
	src, dir := t.TempDir(), t.TempDir()
	for _, c := range []struct {
		name         string
		source, kind string
		flags        uintptr
	}{
		{"bind mount", src, "", syscall.MS_BIND},
		{"tmpfs", "tmpfs", "tmpfs", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := syscall.Mount(c.source, dir, c.kind, c.flags, ""); err != nil {
				t.Fatalf("mount: %v", err)
			}
			defer syscall.Unmount(dir, syscall.MNT_DETACH)
			if _, _, ok := MountedOn(dir); !ok {
				t.Fatalf("%s not seen as a mount point", dir)
			}
			if err := Check(dir, false, nil); err != nil {
				t.Fatalf("Check of a %s: %v, want it accepted", c.name, err)
			}
			srv, err := gofs.Mount(dir, &gofs.Inode{}, &gofs.Options{MountOptions: fuse.MountOptions{DirectMount: true, FsName: "checktest", Name: "checktest"}})
			if err != nil {
				t.Fatalf("FUSE mount over the %s: %v", c.name, err)
			}
			err = Check(dir, true, nil)
			if uerr := srv.Unmount(); uerr != nil {
				t.Errorf("unmount: %v", uerr)
			}
			srv.Wait()
			if err == nil || !strings.Contains(err.Error(), "in use") {
				t.Errorf("Check of a live FUSE mount = %v, want 'in use'", err)
			}
		})
	}
}
