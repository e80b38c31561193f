package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/featurefs/featurefs/extractor/augment"
)

// TestExtractLongNames (issue 48 item 7): an image whose output name is
// long but legal (251 and 255 bytes) is written: the temporary name fits
// whenever the output's does, and none is left behind. At 06087ba the
// temporary name was the output's with 26 bytes more: "openat
// .tmp-xxx...npy-...: file name too long".
func TestExtractLongNames(t *testing.T) {
	src, out := t.TempDir(), t.TempDir()
	var images []string
	for _, n := range []int{251, 255} {
		images = append(images, filepath.Join(src, "cls", strings.Repeat("x", n-len(".jpg"))+".jpg"))
	}
	names, err := outputPaths(images, src)
	if err != nil {
		t.Fatal(err)
	}
	pf, err := os.Create(filepath.Join(t.TempDir(), "progress"))
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	res := extractAll(context.Background(), images, names, out, newProgressFor(pf, time.Hour, "extract"),
		func(_ context.Context, img string) ([]byte, error) { return []byte(filepath.Base(img)), nil })
	if res.failed != 0 {
		t.Fatalf("%d of %d failed: %+v", res.failed, res.total, res.failures)
	}
	for i, n := range names {
		if b, err := os.ReadFile(filepath.Join(out, n)); err != nil || string(b) != filepath.Base(images[i]) {
			t.Errorf("%d-byte output: %q, %v", len(filepath.Base(n)), b, err)
		}
	}
	ents, err := os.ReadDir(filepath.Join(out, "cls"))
	if err != nil || len(ents) != len(names) {
		t.Errorf("out/cls holds %d entries (%v), want the %d outputs alone", len(ents), err, len(names))
	}
}

// TestExtractViewLinesYieldToImageDirectories (issue 48 item 5): a
// directory of images called augment.jsonl keeps its name in extract
// --augment's output, and the augment.jsonl of the directory holding it
// is written as augment.jsonl~515fabe7447a63f7, as a mount of the
// images shows it; a directory without one keeps augment.jsonl. At
// 06087ba the run failed: "renameat ...augment.jsonl: file exists".
func TestExtractViewLinesYieldToImageDirectories(t *testing.T) {
	out := t.TempDir()
	names := []string{"0/d/1.npy", "0/d/augment.jsonl/x.npy", "0/e/2.npy"}
	for _, n := range names {
		if err := os.MkdirAll(filepath.Join(out, filepath.Dir(n)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(out, n), []byte("npy"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	params := []augment.Params{{Top: 1, Size: 224}, {Top: 2, Size: 224}, {Top: 3, Size: 224}}
	if err := writeViewLines(out, names, params, []bool{true, true, true}); err != nil {
		t.Fatalf("writeViewLines: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(out, "0", "d", "augment.jsonl")); err != nil || !fi.IsDir() {
		t.Errorf("0/d/augment.jsonl: %v, %v; want the directory of images", fi, err)
	}
	for p, want := range map[string][]string{
		"0/d/augment.jsonl~515fabe7447a63f7": {"1.npy"},
		"0/d/augment.jsonl/augment.jsonl":    {"x.npy"},
		"0/e/augment.jsonl":                  {"2.npy"},
	} {
		if got := viewLineNames(t, filepath.Join(out, p)); !slices.Equal(got, want) {
			t.Errorf("%s names %q, want %q", p, got, want)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "0", "e", "augment.jsonl~515fabe7447a63f7")); !os.IsNotExist(err) {
		t.Errorf("0/e has a moved augment.jsonl: %v", err)
	}
}

// TestExtractViewLinesNameNonUTF8 (issue 48 item 6): extract's
// augment.jsonl gives a name that is not UTF-8 in base64 too
// ("file_b64"), as a mount's does. At 06087ba its line said only
// "\ufffd-bad.npy".
func TestExtractViewLinesNameNonUTF8(t *testing.T) {
	out := t.TempDir()
	names := []string{"0/\xff-bad.npy", "0/ok.npy"}
	if err := os.Mkdir(filepath.Join(out, "0"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := writeViewLines(out, names, make([]augment.Params, 2), []bool{true, true}); err != nil {
		t.Fatal(err)
	}
	if got, want := viewLineNames(t, filepath.Join(out, "0", "augment.jsonl")), []string{"ok.npy", "\xff-bad.npy"}; !slices.Equal(got, want) {
		t.Errorf("augment.jsonl names %q, want %q", got, want)
	}
}

// viewLineNames returns the names an augment.jsonl's lines give: "file",
// or the bytes of "file_b64" when there is one.
func viewLineNames(t *testing.T, p string) []string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Error(err)
		return nil
	}
	defer f.Close()
	var names []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l struct {
			File    string  `json:"file"`
			FileB64 *string `json:"file_b64"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Errorf("%s: %q: %v", p, sc.Text(), err)
			continue
		}
		if l.FileB64 != nil {
			b, err := base64.StdEncoding.DecodeString(*l.FileB64)
			if err != nil {
				t.Errorf("%s: %q: %v", p, sc.Text(), err)
			}
			l.File = string(b)
		}
		names = append(names, l.File)
	}
	return names
}
