package fs

import (
	"errors"
	"os"
	"syscall"
	"testing"
	"time"
)

func TestEveryChangeIsEROFS(t *testing.T) {
	b := newFakeBucket(1000)
	b.put("d/1.jpg", []byte("one"))
	e := testMount(t, b)
	dir := e.path("features", "tiny", "layer0", "d")
	file := e.path("features", "tiny", "layer0", "d", "1.npy")
	if _, err := os.Stat(file); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, c := range []struct {
		name string
		op   func() error
	}{
		{"open for write", func() error { f, err := os.OpenFile(file, os.O_WRONLY, 0); f.Close(); return err }},
		{"open for append", func() error { f, err := os.OpenFile(file, os.O_RDWR|os.O_APPEND, 0); f.Close(); return err }},
		{"create", func() error { f, err := os.Create(dir + "/new.npy"); f.Close(); return err }},
		{"create in root", func() error { f, err := os.Create(e.path("x")); f.Close(); return err }},
		{"mkdir", func() error { return os.Mkdir(dir+"/sub", 0o755) }},
		{"mkdir in model", func() error { return os.Mkdir(e.path("features", "tiny", "layer9"), 0o755) }},
		{"rename", func() error { return os.Rename(file, dir+"/2.npy") }},
		{"unlink", func() error { return os.Remove(file) }},
		{"rmdir", func() error { return syscall.Rmdir(dir) }},
		{"unlink layers", func() error { return os.Remove(e.path("features", "tiny", "layers")) }},
		{"truncate", func() error { return os.Truncate(file, 0) }},
		{"chmod", func() error { return os.Chmod(file, 0o666) }},
		{"chown", func() error { return os.Chown(file, 1, 1) }},
		{"utimes", func() error { return os.Chtimes(file, now, now) }},
		{"symlink", func() error { return os.Symlink("/etc/passwd", dir+"/link") }},
		{"link", func() error { return os.Link(file, dir+"/hard") }},
		{"mknod", func() error { return syscall.Mknod(dir+"/fifo", syscall.S_IFIFO|0o644, 0) }},
		{"setxattr", func() error { return syscall.Setxattr(file, "user.x", []byte("1"), 0) }},
		{"write stats", func() error { return os.WriteFile(e.path(".featurefs", "stats"), []byte("{}"), 0o644) }},
	} {
		if err := c.op(); !errors.Is(err, syscall.EROFS) {
			t.Errorf("%s: %v, want EROFS", c.name, err)
		}
	}
	if _, err := os.ReadFile(file); err != nil {
		t.Errorf("read after refused changes: %v", err)
	}
}

// TestNodesRefuseChangesThemselves calls the nodes' methods directly: a
// mount without MS_RDONLY would still refuse every change.
func TestNodesRefuseChangesThemselves(t *testing.T) {
	var ro readOnly
	ctx := t.Context()
	for name, errno := range map[string]syscall.Errno{
		"setattr":     ro.Setattr(ctx, nil, nil, nil),
		"unlink":      ro.Unlink(ctx, "x"),
		"rmdir":       ro.Rmdir(ctx, "x"),
		"rename":      ro.Rename(ctx, "x", nil, "y", 0),
		"setxattr":    ro.Setxattr(ctx, "user.x", nil, 0),
		"removexattr": ro.Removexattr(ctx, "user.x"),
		"allocate":    ro.Allocate(ctx, nil, 0, 1, 0),
	} {
		if errno != syscall.EROFS {
			t.Errorf("%s: %v", name, errno)
		}
	}
	if _, _, _, errno := ro.Create(ctx, "x", 0, 0o644, nil); errno != syscall.EROFS {
		t.Errorf("create: %v", errno)
	}
	if _, errno := ro.Mkdir(ctx, "x", 0o755, nil); errno != syscall.EROFS {
		t.Errorf("mkdir: %v", errno)
	}
	if _, errno := ro.Symlink(ctx, "t", "x", nil); errno != syscall.EROFS {
		t.Errorf("symlink: %v", errno)
	}
	if _, errno := ro.Link(ctx, nil, "x", nil); errno != syscall.EROFS {
		t.Errorf("link: %v", errno)
	}
	if _, errno := ro.Write(ctx, nil, []byte("x"), 0); errno != syscall.EROFS {
		t.Errorf("write: %v", errno)
	}
	// Files are never opened (noOpen): an open for writing, which the
	// read-only mount refuses first, would still find Write refusing.
	ff := &featureFile{}
	if _, _, errno := ff.Open(ctx, syscall.O_RDWR); errno != syscall.ENOSYS {
		t.Errorf("open O_RDWR: %v, want ENOSYS (noOpen)", errno)
	}
	if errno := ff.Flush(ctx, nil); errno != syscall.ENOSYS {
		t.Errorf("flush: %v, want ENOSYS (noOpen)", errno)
	}
}
