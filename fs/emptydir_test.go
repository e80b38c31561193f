package fs

import (
	"os"
	"path/filepath"
	"testing"
)

// emptyDirBucket has directories that hold no image: a folder marker, a
// prefix of text files only, one whose first pages hold only text files but
// an image further on, and a prefix holding only such a directory.
func emptyDirBucket() *fakeBucket {
	b := newFakeBucket(2)
	b.put("cls/a.jpg", []byte("a"))
	b.put("trail/", nil)
	b.put("docs/readme.txt", []byte("r"))
	b.put("docs/notes.md", []byte("n"))
	for _, k := range []string{"late/0.txt", "late/1.txt", "late/2.txt", "late/z.png"} {
		b.put(k, []byte(k))
	}
	b.put("nested/deep/x.jpg", []byte("x"))
	b.put("outer/marker/", nil)
	return b
}

// TestEmptyDirectoriesHidden: a directory without an image or a
// subdirectory is neither listed nor found by a lookup (DatasetFolder fails
// on an empty class directory); with ShowEmptyDirs it is.
func TestEmptyDirectoriesHidden(t *testing.T) {
	e := testMount(t, emptyDirBucket())
	layer := e.path("features", "tiny", "layer0")
	if got, want := names(t, layer), []string{"cls/", "late/", "nested/", "outer/"}; !same(got, want) {
		t.Errorf("ls layer0 = %q, want %q", got, want)
	}
	// outer/ holds only an empty directory: shown (only a directory's own
	// listing is looked into), and empty itself.
	if got := names(t, filepath.Join(layer, "outer")); len(got) != 0 {
		t.Errorf("ls outer = %q, want nothing", got)
	}
	if got, want := names(t, filepath.Join(layer, "late")), []string{"z.npy"}; !same(got, want) {
		t.Errorf("ls late = %q, want %q", got, want)
	}
	// A fresh mount looks them up without a listing (Stat path).
	e2 := testMount(t, emptyDirBucket())
	layer2 := e2.path("features", "tiny", "layer0")
	for _, d := range []string{"trail", "docs"} {
		if _, err := os.Stat(filepath.Join(layer2, d)); !os.IsNotExist(err) {
			t.Errorf("stat %s (no image) on a fresh mount: %v, want ENOENT", d, err)
		}
	}
	for _, d := range []string{"cls", "late", "nested"} {
		if fi, err := os.Stat(filepath.Join(layer2, d)); err != nil || !fi.IsDir() {
			t.Errorf("stat %s on a fresh mount: %v", d, err)
		}
	}

	shown := testMount(t, emptyDirBucket(), func(c *testConfig) { c.ShowEmptyDirs = true })
	if got, want := names(t, shown.path("features", "tiny", "layer0")), []string{"cls/", "docs/", "late/", "nested/", "outer/", "trail/"}; !same(got, want) {
		t.Errorf("ShowEmptyDirs: ls layer0 = %q, want %q", got, want)
	}
}
