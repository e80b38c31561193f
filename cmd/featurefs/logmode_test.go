package main

import (
	"path/filepath"
	"syscall"
	"testing"

	"github.com/featurefs/featurefs/mountopts"
	"github.com/featurefs/featurefs/test/testenv"
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
	// the log's directory (0700) and the log (0600), nothing else
	if dirs, files := testenv.CheckPrivateTree(t, filepath.Dir(o.LogFile)); dirs != 1 || files != 1 {
		t.Errorf("%d directories and %d files under %s, want 1 and the log", dirs, files, filepath.Dir(o.LogFile))
	}
}
