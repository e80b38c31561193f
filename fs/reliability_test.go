package fs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestKeysCannotEscapeTheTree lists a bucket whose keys try to leave the
// tree or break it ("..", ".", absolute and empty elements) next to keys
// with components longer than the usual 255-byte NAME_MAX (FUSE allows
// names up to 1024 bytes, S3 keys up to 1024 in all): the mount shows none
// of the former and every one of the latter, every listed file reads, and
// the extractor is only ever asked for well-formed keys.
func TestKeysCannotEscapeTheTree(t *testing.T) {
	b := newFakeBucket(3)
	bad := []string{"../escape.jpg", "/abs.jpg", "a/../b.jpg", "./dot.jpg", "a//b.jpg", "a/./c.jpg", "..", "a/.", "a/"}
	long := strings.Repeat("L", 300)
	good := map[string]string{ // key -> file under the layer directory
		"ok/fine.jpg":                       "ok/fine.npy",
		"a/real.png":                        "a/real.npy",
		long + ".jpg":                       long + ".npy",
		"d" + long + "/x.jpg":               "d" + long + "/x.npy",
		"ok/" + long + ".jpg":               "ok/" + long + ".jpg.npy",
		"ok/" + long + ".png":               "ok/" + long + ".png.npy",
		strings.Repeat("k/", 400) + "x.jpg": strings.Repeat("k/", 400) + "x.npy",
	}
	for _, k := range bad {
		b.put(k, []byte("image "+k))
	}
	for k := range good {
		b.put(k, []byte("image "+k))
	}
	e := testMount(t, b)
	root := e.path("features", "tiny", "layer1")

	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if name == "." || name == ".." || name == "" || strings.Contains(name, "/") {
			t.Errorf("listed a name that cannot be a file name: %q", name)
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(root, p)
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walking the tree: %v", err)
	}
	var want []string
	for _, f := range good {
		want = append(want, f)
	}
	if !same(files, want) {
		t.Errorf("files = %q, want %q", files, want)
	}
	for _, f := range files {
		if _, err := os.ReadFile(filepath.Join(root, f)); err != nil {
			t.Errorf("read %s: %v", f, err)
		}
	}
	// Lookups of names that were not listed find nothing.
	for _, name := range []string{"..%2Fescape.npy", "abs.npy", "b.npy", "dot.npy", "escape.npy"} {
		if _, err := os.Stat(filepath.Join(root, name)); !errors.Is(err, syscall.ENOENT) {
			t.Errorf("stat %s: %v, want ENOENT", name, err)
		}
	}
	e.x.mu.Lock()
	defer e.x.mu.Unlock()
	for k := range e.x.calls {
		for _, bk := range bad {
			if k == bk {
				t.Errorf("the extractor was asked for key %q", k)
			}
		}
	}
}
