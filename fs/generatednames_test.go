package fs

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"unicode/utf8"

	"github.com/featurefs/featurefs/extractor/augment"
	"github.com/featurefs/featurefs/fs/archive"
	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/features"
)

// The moved names of the generated files (naming.Generated.Moved), as
// docs/AUGMENT.md and fs/doc.go give them.
const (
	movedAugJSONL = "augment.jsonl~515fabe7447a63f7"
	movedPreds    = "predictions.jsonl~73a657540c708401"
)

// TestGeneratedNamesYieldToBucket (issue 48 item 5): a generated file
// never hides a name from the bucket. A prefix called augment.jsonl/ in
// a view directory keeps its name, once in the listing, and its views are
// reachable; the directory's augment.jsonl is listed and read as
// augment.jsonl~515fabe7447a63f7. Likewise a prefix called
// predictions.jsonl/ under predictions/, whose file is then
// predictions.jsonl~73a657540c708401. A directory without such a prefix
// keeps the usual names, and has no moved one. At 06087ba the view
// directory listed augment.jsonl twice, augment.jsonl/ was "not a
// directory", and predictions/ hid the prefix predictions.jsonl/.
func TestGeneratedNamesYieldToBucket(t *testing.T) {
	b := newFakeBucket(1000)
	b.put("d/1.jpg", []byte("one"))
	b.put("d/augment.jsonl/x.jpg", []byte("ex"))
	b.put("d/predictions.jsonl/y.jpg", []byte("why"))
	e := testMount(t, b, func(c *testConfig) { c.Augment = features.AugmentConfig{Views: 1, Seed: 3} })

	if got, want := names(t, e.path("features", "tiny", "layer1", "d")), []string{"1.npy", "augment.jsonl/", "predictions.jsonl/"}; !slices.Equal(got, want) {
		t.Errorf("plain layer lists %v, want %v", got, want)
	}
	dir := e.path("features", "tiny", "layer1-aug", "0", "d")
	if got, want := names(t, dir), []string{"1.npy", "augment.jsonl/", movedAugJSONL, "predictions.jsonl/"}; !slices.Equal(got, want) {
		t.Errorf("view directory lists %v, want %v", got, want)
	}
	if st, err := os.Stat(filepath.Join(dir, "augment.jsonl")); err != nil || !st.IsDir() {
		t.Errorf("stat of the prefix augment.jsonl/ in the view directory: %v, %v; want a directory", st, err)
	}
	if got, want := names(t, filepath.Join(dir, "augment.jsonl")), []string{"augment.jsonl", "x.npy"}; !slices.Equal(got, want) {
		t.Errorf("augment.jsonl/ in the view directory lists %v, want %v", got, want)
	}
	if _, err := os.ReadFile(filepath.Join(dir, "augment.jsonl", "x.npy")); err != nil {
		t.Errorf("view of d/augment.jsonl/x.jpg: %v", err)
	}
	if files := augFiles(t, filepath.Join(dir, movedAugJSONL)); !slices.Equal(files, []string{"1.npy"}) {
		t.Errorf("%s names %v, want [1.npy]", movedAugJSONL, files)
	}
	if files := augFiles(t, filepath.Join(dir, "augment.jsonl", "augment.jsonl")); !slices.Equal(files, []string{"x.npy"}) {
		t.Errorf("augment.jsonl/augment.jsonl names %v, want [x.npy]", files)
	}
	if _, err := os.Stat(filepath.Join(dir, "augment.jsonl", movedAugJSONL)); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("stat of %s where nothing takes augment.jsonl: %v, want ENOENT", movedAugJSONL, err)
	}

	pdir := e.path("predictions", "tiny", "d")
	if got, want := names(t, pdir), []string{"augment.jsonl/", "predictions.jsonl/", movedPreds}; !slices.Equal(got, want) {
		t.Errorf("predictions directory lists %v, want %v", got, want)
	}
	if got, want := names(t, filepath.Join(pdir, "predictions.jsonl")), []string{"predictions.jsonl"}; !slices.Equal(got, want) {
		t.Errorf("predictions.jsonl/ lists %v, want %v", got, want)
	}
	for p, key := range map[string]string{
		filepath.Join(pdir, movedPreds):                               "d/1.jpg",
		filepath.Join(pdir, "predictions.jsonl", "predictions.jsonl"): "d/predictions.jsonl/y.jpg",
	} {
		data, err := os.ReadFile(p)
		if err != nil || strings.Count(string(data), "\n") != 1 || !strings.Contains(string(data), key) {
			t.Errorf("%s: %q, %v; want one line, of %s", p, data, err, key)
		}
	}
	if _, err := os.Stat(filepath.Join(pdir, "predictions.jsonl", movedPreds)); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("stat of %s where nothing takes predictions.jsonl: %v, want ENOENT", movedPreds, err)
	}
}

// TestGeneratedNamesYieldToArchives (issue 48 item 5): an archive
// augment.jsonl.tar (the directory augment.jsonl/) and an archive's
// sidecar called augment.jsonl (beside augment.jpg) keep their names in a
// view directory, and its augment.jsonl is the moved one.
func TestGeneratedNamesYieldToArchives(t *testing.T) {
	src := t.TempDir()
	writeTar(t, filepath.Join(src, "augment.jsonl.tar"), map[string]string{"z.jpg": "zed"})
	writeTar(t, filepath.Join(src, "e.tar"), map[string]string{"augment.jpg": "aug", "augment.jsonl": "sidecar\n"})
	if err := os.WriteFile(filepath.Join(src, "r.jpg"), []byte("are"), 0o644); err != nil {
		t.Fatal(err)
	}
	lb, err := bucket.Open(context.Background(), src, bucket.S3Options{})
	if err != nil {
		t.Fatal(err)
	}
	ab := archive.Wrap(lb, archive.Config{Formats: archive.Formats, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}).(*archive.Bucket)
	t.Cleanup(func() { ab.Close() })
	e := testMount(t, newFakeBucket(1000), func(c *testConfig) {
		c.Bucket, c.Archives = ab, archive.Formats
		c.Augment = features.AugmentConfig{Views: 1}
	})
	root := e.path("features", "tiny", "layer1-aug", "0")
	if got, want := names(t, root), []string{"augment.jsonl/", movedAugJSONL, "e/", "r.npy"}; !slices.Equal(got, want) {
		t.Errorf("view root lists %v, want %v", got, want)
	}
	if got, want := names(t, filepath.Join(root, "augment.jsonl")), []string{"augment.jsonl", "z.npy"}; !slices.Equal(got, want) {
		t.Errorf("the archive augment.jsonl.tar lists %v, want %v", got, want)
	}
	if files := augFiles(t, filepath.Join(root, movedAugJSONL)); !slices.Equal(files, []string{"r.npy"}) {
		t.Errorf("%s names %v, want [r.npy]", movedAugJSONL, files)
	}
	if got, want := names(t, filepath.Join(root, "e")), []string{"augment.jsonl", movedAugJSONL, "augment.npy"}; !slices.Equal(got, want) {
		t.Errorf("e.tar's view lists %v, want %v", got, want)
	}
	if data, err := os.ReadFile(filepath.Join(root, "e", "augment.jsonl")); err != nil || string(data) != "sidecar\n" {
		t.Errorf("the sidecar e.tar/augment.jsonl reads %q, %v", data, err)
	}
	if files := augFiles(t, filepath.Join(root, "e", movedAugJSONL)); !slices.Equal(files, []string{"augment.npy"}) {
		t.Errorf("e/%s names %v, want [augment.npy]", movedAugJSONL, files)
	}
}

// augFiles reads an augment.jsonl and returns the names its lines give.
func augFiles(t *testing.T, p string) []string {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Errorf("read %s: %v", p, err)
		return nil
	}
	var files []string
	for l := range strings.Lines(string(data)) {
		var line struct {
			File string `json:"file"`
		}
		if err := json.Unmarshal([]byte(l), &line); err != nil {
			t.Errorf("%s: line %q: %v", p, l, err)
			continue
		}
		files = append(files, line.File)
	}
	return files
}

// writeTar writes a tar of members (path: content) to p.
func writeTar(t *testing.T, p string, members map[string]string) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	paths := make([]string, 0, len(members))
	for m := range members {
		paths = append(paths, m)
	}
	slices.Sort(paths)
	for _, m := range paths {
		if err := tw.WriteHeader(&tar.Header{Name: m, Mode: 0o644, Typeflag: tar.TypeReg, Size: int64(len(members[m]))}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(members[m]))
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestAugmentJSONLNamesNonUTF8 (issue 48 item 6): the line of a view file
// whose name is not UTF-8 also gives the name's bytes in base64
// ("file_b64"), by which the file is found again: its extended attribute
// is the line's parameters; the file's size is still what a read
// returns. At 06087ba the line said only "\ufffd\ufffd-bad-utf8.npy",
// and getxattr of that name was ENOENT.
func TestAugmentJSONLNamesNonUTF8(t *testing.T) {
	b := newFakeBucket(1000)
	b.put("d/\xff\xfe-bad-utf8.jpg", []byte("bad bytes"))
	b.put("d/ok.jpg", []byte("ok"))
	b.put("d/BAD\xff.jpg", []byte("BAD image"))
	e := testMount(t, b, func(c *testConfig) { c.Augment = features.AugmentConfig{Views: 1, Seed: 2} })
	dir := e.path("features", "tiny", "layer1-aug", "0", "d")
	st, err := os.Stat(filepath.Join(dir, "augment.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "augment.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(data)) != st.Size() {
		t.Errorf("augment.jsonl: stat says %d bytes, a read returns %d", st.Size(), len(data))
	}
	var found []string
	for l := range strings.Lines(string(data)) {
		var line struct {
			File    string  `json:"file"`
			FileB64 *string `json:"file_b64"`
			Error   string  `json:"error"`
			augment.Params
		}
		if err := json.Unmarshal([]byte(l), &line); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		name := line.File
		if line.FileB64 != nil {
			raw, err := base64.StdEncoding.DecodeString(*line.FileB64)
			if err != nil {
				t.Fatalf("line %q: file_b64: %v", l, err)
			}
			name = string(raw)
		}
		if utf8.ValidString(name) != (line.FileB64 == nil) {
			t.Errorf("line %q: file_b64 given for a UTF-8 name, or missing for another", l)
		}
		found = append(found, name)
		if line.Error != "" {
			continue
		}
		buf := make([]byte, 512)
		n, err := getxattr(filepath.Join(dir, name), augment.Xattr, buf)
		if err != nil {
			t.Errorf("getxattr of the file line %q names (%q): %v", l, name, err)
			continue
		}
		var want augment.Params
		if err := json.Unmarshal(buf[:n], &want); err != nil || want != line.Params {
			t.Errorf("%q: attribute %s (%v), line %+v", name, buf[:n], err, line.Params)
		}
	}
	if want := []string{"BAD\xff.npy", "ok.npy", "\xff\xfe-bad-utf8.npy"}; !slices.Equal(found, want) {
		t.Errorf("augment.jsonl names %q, want %q", found, want)
	}
}
