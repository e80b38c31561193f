package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// recorder is a testing.TB that keeps what Errorf reports instead of
// failing the test.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestCheckPrivateTree: a 0755 directory and a 0644 file are reported, by
// path; 0700 directories and 0600 files are not; the counts include dir.
func TestCheckPrivateTree(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tree")
	for _, d := range []string{"ok", "open"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"ok/a", "ok/b", "open/c"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for p, mode := range map[string]os.FileMode{"": 0o700, "ok": 0o700, "open": 0o755, "ok/b": 0o644} {
		if err := os.Chmod(filepath.Join(dir, p), mode); err != nil {
			t.Fatal(err)
		}
	}
	r := &recorder{TB: t}
	dirs, files := CheckPrivateTree(r, dir)
	if dirs != 3 || files != 3 {
		t.Errorf("%d directories and %d files, want 3 and 3", dirs, files)
	}
	want := []string{
		filepath.Join(dir, "ok/b") + ": mode -rw-r--r--, want -rw-------",
		filepath.Join(dir, "open") + ": mode -rwxr-xr-x, want -rwx------",
	}
	slices.Sort(r.errs)
	if !slices.Equal(r.errs, want) {
		t.Errorf("reported %q, want %q", r.errs, want)
	}
}
