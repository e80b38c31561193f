package test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestRealDirectoryNamedLikeAnArchive: a real prefix named like an
// archive (real.tar/, no object real.tar) is a directory, never an
// archive: through a kernel mount it keeps its name with archives on (the
// default) and with --archives off, by a lookup before any listing and in
// the listing, its features read; beside it, an archive object packed.tar
// is the directory packed. At 1942f8f the real directory was listed as
// real/ with archives on and as real.tar/ with --archives off, so a class
// name depended on a flag.
func TestRealDirectoryNamedLikeAnArchive(t *testing.T) {
	jpg := filepath.Join(t.TempDir(), "a.jpg")
	writeJPEG(t, jpg, 64, 48, 1)
	img, err := os.ReadFile(jpg)
	if err != nil {
		t.Fatal(err)
	}
	srv, env := minioBucket(t, "names", "", "")
	srv.Put(t, "names", "train/real.tar/a.jpg", img)
	srv.Put(t, "names", "train/Other.ZIP/b.jpg", img)
	srv.Put(t, "names", "train/packed.tar", packTar(t, map[string][]byte{"c.jpg": img}))

	for _, c := range []struct {
		archives string
		want     []string
	}{
		{"tar,zip", []string{"Other.ZIP", "packed", "real.tar"}},
		{"off", []string{"Other.ZIP", "real.tar"}}, // packed.tar is an object, not an image: not shown
	} {
		m := testMount(t, mountConfig{Source: "s3://names", Env: env, Args: []string{"--endpoint-url", srv.Endpoint, "--archives", c.archives}})
		train := filepath.Join(m.Layer(testLayer), "train")
		// A lookup by name first (no listing of train/ yet), then the
		// listing, then the features read.
		for _, p := range []string{"real.tar/a.npy", "Other.ZIP/b.npy"} {
			if _, err := os.Stat(filepath.Join(train, p)); err != nil {
				t.Errorf("--archives %s: stat %s before any listing: %v", c.archives, p, err)
			}
		}
		for _, p := range []string{"real", "Other"} {
			if _, err := os.Stat(filepath.Join(train, p)); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("--archives %s: stat %s: %v, want ENOENT (the directory keeps its extension)", c.archives, p, err)
			}
		}
		ents, err := os.ReadDir(train)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range ents {
			got = append(got, e.Name())
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("--archives %s: train/ lists %q, want %q", c.archives, got, c.want)
		}
		read := []string{"real.tar/a.npy", "Other.ZIP/b.npy"}
		if c.archives != "off" {
			read = append(read, "packed/c.npy")
		}
		for _, p := range read {
			if b, err := os.ReadFile(filepath.Join(train, p)); err != nil || len(b) == 0 {
				t.Errorf("--archives %s: read %s: %d bytes, %v", c.archives, p, len(b), err)
			}
		}
		m.Unmount(t)
	}
}
