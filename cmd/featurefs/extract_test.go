package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// featurefs extract mirrors the inputs' directories under -o, relative to
// their common parent or --relative-to, so a class tree extracts (it used
// to refuse train/dog/img000.jpg after train/cat/img000.jpg).
func TestOutputPathsMirrorDirectories(t *testing.T) {
	root := t.TempDir()
	in := func(rel ...string) []string {
		var out []string
		for _, r := range rel {
			out = append(out, filepath.Join(root, filepath.FromSlash(r)))
		}
		return out
	}
	for _, c := range []struct {
		name   string
		inputs []string
		relTo  string
		want   string
	}{
		{"class tree", in("train/cat/img000.jpg", "train/dog/img000.jpg"), "", "cat/img000.npy dog/img000.npy"},
		{"one directory", in("d/a.jpg", "d/b.png"), "", "a.npy b.npy"},
		{"one file", in("d/a.jpg"), "", "a.npy"},
		{"differ by extension", in("d/a.jpg", "d/a.png", "e/a.jpg"), "", "d/a.jpg.npy d/a.png.npy e/a.npy"},
		{"relative-to", in("train/cat/img000.jpg", "train/dog/img000.jpg"), filepath.Join(root), "train/cat/img000.npy train/dog/img000.npy"},
		{"uneven depth", in("x/a.jpg", "x/y/z/b.jpg"), "", "a.npy y/z/b.npy"},
	} {
		got, err := outputPaths(c.inputs, c.relTo)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		for i := range got {
			got[i] = filepath.ToSlash(got[i])
		}
		if strings.Join(got, " ") != c.want {
			t.Errorf("%s: %q, want %s", c.name, got, c.want)
		}
	}
}

// True collisions are refused, naming both inputs and the file; an input
// outside --relative-to too.
func TestOutputPathsRefuseCollisions(t *testing.T) {
	root := t.TempDir()
	p := func(rel string) string { return filepath.Join(root, filepath.FromSlash(rel)) }
	for _, c := range []struct {
		name   string
		inputs []string
		relTo  string
		want   []string
	}{
		{"same image twice", []string{p("d/a.jpg"), p("d/a.jpg")}, "", []string{"d/a.jpg is given twice"}},
		{"a.jpg.jpg next to a.jpg and a.png", []string{p("d/a.jpg"), p("d/a.png"), p("d/a.jpg.jpg")}, "", []string{"a.jpg.jpg", "would both write a.jpg.npy"}},
		{"outside relative-to", []string{p("d/a.jpg"), p("e/b.jpg")}, p("d"), []string{"e/b.jpg is not under --relative-to"}},
	} {
		_, err := outputPaths(c.inputs, c.relTo)
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(filepath.ToSlash(err.Error()), w) {
				t.Errorf("%s: %q lacks %q", c.name, err, w)
			}
		}
	}
}

// A directory argument stands for its images (recursively, by extension,
// in lexical order) and counts as their parent; --files-from entries are
// lines (a CR before the newline and empty lines ignored) or NUL-ended,
// files and directories alike, from a file or a reader (stdin).
func TestCollectInputs(t *testing.T) {
	root := t.TempDir()
	for _, rel := range []string{"d/b.jpg", "d/a.PNG", "d/sub/c.jpeg", "d/notes.txt", "e/x.jpg", "empty/.keep"} {
		p := filepath.Join(root, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	exts := []string{"jpg", "jpeg", "png"}
	rel := func(ps []string) string {
		var out []string
		for _, p := range ps {
			r, err := filepath.Rel(root, p)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, filepath.ToSlash(r))
		}
		return strings.Join(out, " ")
	}
	p := func(r string) string { return filepath.Join(root, filepath.FromSlash(r)) }

	in, err := collectInputs(context.Background(), []string{p("d"), p("e/x.jpg"), p("missing.jpg"), p("empty")}, "", false, nil, exts)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rel(in.images), "d/a.PNG d/b.jpg d/sub/c.jpeg e/x.jpg missing.jpg"; got != want {
		t.Errorf("images %q, want %q", got, want)
	}
	if got := rel(in.dirs); got != "d empty" {
		t.Errorf("dirs %q, want d empty", got)
	}
	if got := rel(in.empty); got != "empty" {
		t.Errorf("empty %q, want empty", got)
	}
	names, err := outputPathsUnder(in.images, in.dirs, "")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := filepath.ToSlash(strings.Join(names, " ")), "d/a.npy d/b.npy d/sub/c.npy e/x.npy missing.npy"; got != want {
		t.Errorf("outputs %q, want %q", got, want)
	}
	// One directory: its images relative to it.
	in, err = collectInputs(context.Background(), []string{p("d")}, "", false, nil, exts)
	if err != nil {
		t.Fatal(err)
	}
	names, err = outputPathsUnder(in.images, in.dirs, "")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := filepath.ToSlash(strings.Join(names, " ")), "a.npy b.npy sub/c.npy"; got != want {
		t.Errorf("one directory: outputs %q, want %q", got, want)
	}

	list := p("e/x.jpg") + "\r\n\n" + p("d/sub") + "\n" + p("d/b.jpg")
	in, err = collectInputs(context.Background(), nil, "-", false, strings.NewReader(list), exts)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rel(in.images), "e/x.jpg d/sub/c.jpeg d/b.jpg"; got != want {
		t.Errorf("--files-from -: %q, want %q", got, want)
	}
	with := p("e/with\nnewline.jpg")
	in, err = collectInputs(context.Background(), nil, "-", true, strings.NewReader(p("e/x.jpg")+"\x00"+with+"\x00\x00"+p("d/b.jpg")), exts)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rel(in.images), "e/x.jpg e/with\nnewline.jpg d/b.jpg"; got != want {
		t.Errorf("--files-from - --null: %q, want %q", got, want)
	}
	listFile := p("list")
	if err := os.WriteFile(listFile, []byte(p("d")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	in, err = collectInputs(context.Background(), []string{p("e/x.jpg")}, listFile, false, nil, exts)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rel(in.images), "e/x.jpg d/a.PNG d/b.jpg d/sub/c.jpeg"; got != want {
		t.Errorf("an argument and --files-from FILE: %q, want %q", got, want)
	}
	if _, err := collectInputs(context.Background(), nil, p("nolist"), false, nil, exts); err == nil || exitCode(err) != exitUsage {
		t.Errorf("a missing --files-from file: %v (exit %d), want a usage error", err, exitCode(err))
	}
}

// extractAll writes each image's features, counts every image once, and
// lists the failures by image, sorted, with the reasons; the others are
// still written.
func TestExtractAllListsFailures(t *testing.T) {
	out := t.TempDir()
	var images, names []string
	for i := range 200 {
		images = append(images, fmt.Sprintf("in/%03d.jpg", i))
		names = append(names, fmt.Sprintf("d%d/%03d.npy", i%3, i))
	}
	pf, err := os.Create(filepath.Join(t.TempDir(), "progress"))
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	prog := newProgressFor(pf, time.Hour, "extract")
	res := extractAll(context.Background(), images, names, out, prog, func(_ context.Context, img string) ([]byte, error) {
		if strings.HasSuffix(img, "7.jpg") {
			return nil, errors.New("bad image: test")
		}
		return []byte(img), nil
	})
	prog.finish(true)
	if res.total != 200 || res.done != 200 || res.failed != 20 || len(res.failures) != 20 {
		t.Fatalf("total %d done %d failed %d listed %d, want 200 200 20 20", res.total, res.done, res.failed, len(res.failures))
	}
	for i, f := range res.failures {
		if want := fmt.Sprintf("in/%03d.jpg", 10*i+7); f.key != want || f.reason != "bad image: test" {
			t.Errorf("failure %d: %s: %s, want %s: bad image: test", i, f.key, f.reason, want)
		}
	}
	for i, n := range names {
		b, err := os.ReadFile(filepath.Join(out, n))
		if failed := i%10 == 7; failed != (err != nil) || (!failed && string(b) != images[i]) {
			t.Errorf("%s: %q, %v", n, b, err)
		}
	}
	if b, _ := os.ReadFile(pf.Name()); !strings.Contains(string(b), "extract: 200/200 ") {
		t.Errorf("progress: %q, want a line with 200/200", b)
	}
}
