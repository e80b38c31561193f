package bucket_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/featurefs/featurefs/cache/safefile"
	"github.com/featurefs/featurefs/fs/bucket"
)

// TestLocalStoreRefusesLinks: a local feature store writes nothing outside
// its directory and never through a link: a link planted at an object's
// name (or its metadata sidecar's) fails that Put with ErrSymlink and is
// left as it was, a linked directory fails it too, and the victims are
// unchanged (issue 36, item 3). On ca82ffd the Put over the link
// succeeded, replacing it without a word.
func TestLocalStoreRefusesLinks(t *testing.T) {
	vdir := t.TempDir()
	victim := filepath.Join(vdir, "victim")
	if err := os.WriteFile(victim, []byte("precious\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "store")
	s, err := bucket.OpenStore(context.Background(), dir, bucket.S3Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "m"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, l := range [][2]string{{"m/a.npy", victim}, {"m/b.npy" + bucket.MetaSuffix, victim}, {"m/sub", vdir}} {
		if err := os.Symlink(l[1], filepath.Join(dir, l[0])); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	if err := s.Put(ctx, "m/a.npy", []byte("x"), nil); !errors.Is(err, safefile.ErrSymlink) {
		t.Errorf("Put over a link: %v, want ErrSymlink", err)
	}
	if err := s.Put(ctx, "m/b.npy", []byte("x"), map[string]string{"k": "v"}); !errors.Is(err, safefile.ErrSymlink) {
		t.Errorf("Put with a link at its sidecar: %v, want ErrSymlink", err)
	}
	if err := s.Put(ctx, "m/sub/c.npy", []byte("x"), nil); err == nil {
		t.Errorf("Put under a linked directory succeeded")
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "precious\n" {
		t.Errorf("victim: %q, %v", b, err)
	}
	if ents, _ := os.ReadDir(vdir); len(ents) != 1 {
		t.Errorf("%d files in the victim's directory, want 1", len(ents))
	}
	if fi, err := os.Lstat(filepath.Join(dir, "m/a.npy")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("m/a.npy: %v, %v; want the link left", fi, err)
	}
	if err := s.Put(ctx, "m/d.npy", []byte("x"), map[string]string{"k": "v"}); err != nil {
		t.Fatal(err)
	}
}
