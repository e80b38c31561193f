package bucket_test

import (
	"context"
	"io/fs"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/featurefs/featurefs/fs/bucket"
)

// TestLocalStoreIsPrivate: under umask 022, a local-directory feature store
// is created 0700 with 0700 subdirectories and 0600 files (features derive
// from images that may be private); before, its directories were 0755.
func TestLocalStoreIsPrivate(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	dir := filepath.Join(t.TempDir(), "store")
	s, err := bucket.OpenStore(context.Background(), dir, bucket.S3Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(context.Background(), "m/layer1/a/b.npy", []byte("x"), map[string]string{"k": "v"}); err != nil {
		t.Fatal(err)
	}
	n := 0
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		n++
		if want := fs.FileMode(0o600); d.IsDir() {
			if info.Mode().Perm() != 0o700 {
				t.Errorf("%s: %v, want 0700", p, info.Mode().Perm())
			}
		} else if info.Mode().Perm() != want {
			t.Errorf("%s: %v, want %v", p, info.Mode().Perm(), want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 6 {
		t.Errorf("walked %d entries, want the store, 3 directories, the file and its metadata", n)
	}
}
