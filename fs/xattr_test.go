package fs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// getxattr returns a file's extended attribute.
func getxattr(t *testing.T, p, attr string) (string, error) {
	t.Helper()
	buf := make([]byte, 4096)
	n, err := syscall.Getxattr(p, attr, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// TestFeatureFileXattrs: each feature file names its object (long and
// shortened names included) in XattrKey; a known bad object says why in
// XattrError; neither asks the store.
func TestFeatureFileXattrs(t *testing.T) {
	b := newFakeBucket(1000)
	long := "d/x" + strings.Repeat("y", 260) + ".jpg"
	for _, k := range []string{"d/a.jpg", "d/a.png", "d/good.jpg", "d/bad.jpg", long} {
		b.put(k, []byte("img "+k))
	}
	b.put("d/bad.jpg", []byte("BAD bytes"))
	e := testMount(t, b)
	dir := e.path("features", "tiny", "layer0", "d")
	want := map[string]string{}
	for _, name := range names(t, dir) {
		key, err := getxattr(t, filepath.Join(dir, name), XattrKey)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want[key] = name
	}
	for _, k := range []string{"d/a.jpg", "d/a.png", "d/good.jpg", "d/bad.jpg", long} {
		if _, ok := want[k]; !ok {
			t.Errorf("no file names %s in %s: %v", k, XattrKey, want)
		}
	}
	if _, err := getxattr(t, filepath.Join(dir, "good.npy"), XattrError); !errors.Is(err, syscall.ENODATA) {
		t.Errorf("good.npy %s: %v, want ENODATA", XattrError, err)
	}
	if _, err := os.ReadFile(filepath.Join(dir, "bad.npy")); !errors.Is(err, syscall.EIO) {
		t.Fatalf("read bad.npy: %v, want EIO", err)
	}
	lists := b.lists.Load()
	reason, err := getxattr(t, filepath.Join(dir, "bad.npy"), XattrError)
	if err != nil || reason == "" {
		t.Errorf("bad.npy %s: %q, %v", XattrError, reason, err)
	}
	if n := b.lists.Load() - lists; n != 0 {
		t.Errorf("getxattr listed the bucket %d times", n)
	}
}
