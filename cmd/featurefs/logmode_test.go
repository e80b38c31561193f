package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/featurefs/featurefs/mountopts"
)

// TestLogFileIsPrivate: under umask 022, --log-file is created 0600 in a
// 0700 directory (before: 0644 in 0755): the log names the objects.
func TestLogFileIsPrivate(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	o := mountopts.Default()
	o.LogFile = filepath.Join(t.TempDir(), "logs", "featurefs.log")
	_, c, err := newLogger(o)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	for p, want := range map[string]os.FileMode{o.LogFile: 0o600, filepath.Dir(o.LogFile): 0o700} {
		info, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm() != want {
			t.Errorf("%s: %v, want %v", p, info.Mode().Perm(), want)
		}
	}
}
