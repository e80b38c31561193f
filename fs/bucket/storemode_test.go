package bucket_test

import (
	"context"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/test/testenv"
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
	dirs, files := testenv.CheckPrivateTree(t, dir)
	if n := dirs + files; n < 6 {
		t.Errorf("walked %d entries, want the store, 3 directories, the file and its metadata", n)
	}
}
