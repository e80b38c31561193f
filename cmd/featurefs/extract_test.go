package main

import (
	"path/filepath"
	"strings"
	"testing"
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
