package testenv

import (
	"io/fs"
	"path/filepath"
	"testing"
)

// CheckPrivateTree walks dir (dir included) and reports, as t.Errorf, each
// directory whose permissions are not 0700 and each other entry's that are
// not 0600: what featurefs creates for its cache, its feature store and its
// log may derive from private images. It fails the test (t.Fatal) when the
// walk does, and returns how many directories and other entries it saw, for
// the caller to check that the tree holds what it should.
func CheckPrivateTree(t testing.TB, dir string) (dirs, files int) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		want := fs.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
			dirs++
		} else {
			files++
		}
		if info.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", p, info.Mode().Perm(), want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dirs, files
}
