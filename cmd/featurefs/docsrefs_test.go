package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// mdRef matches a markdown file of the repository's kind named in text: a
// bare upper-case name (README.md, LAYERS.md) or a path under docs/ or
// bench/ or records/, with any ../ before it (docs/SERVE.md, bench/mount.md,
// ../README.md). Other names (an object key, a work file) are not cited
// documents.
var mdRef = regexp.MustCompile(`(?:^|[^\w/.])((?:\.\./)*(?:(?:docs/|bench/|records/)[\w/-]*|[A-Z][A-Z0-9_-]*)\.md)\b`)

// Every markdown file that the repository's code, scripts and docs name
// exists in the repository (issue 24: docs/FEATURE-STORE.md and three
// source files cited a DESIGN.md that lives outside it). A name with a
// directory must be that path from the repository root or from the
// citing file's directory; a bare name must be some file's name.
func TestDocsCiteOnlyRepoFiles(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	type file struct{ rel, text string }
	var files []file
	base := map[string]bool{}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			if n := d.Name(); rel != "." && (strings.HasPrefix(n, ".") || n == "bin" || n == "shared" || n == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		base[d.Name()] = true
		switch filepath.Ext(p) {
		case ".go", ".md", ".sh", ".py":
		default:
			if d.Name() != "Makefile" {
				return nil
			}
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files = append(files, file{rel, string(b)})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !base["README.md"] || len(files) < 50 {
		t.Fatalf("walked %s: %d files, README.md found %v: not the repository", root, len(files), base["README.md"])
	}
	for _, f := range files {
		if f.rel == filepath.Join("cmd", "featurefs", "docsrefs_test.go") {
			continue // names DESIGN.md on purpose
		}
		for i, line := range strings.Split(f.text, "\n") {
			if strings.HasSuffix(f.rel, ".go") && !strings.HasPrefix(strings.TrimSpace(line), "//") {
				continue // Go code names test objects (docs/notes.md); its comments cite documents
			}
			for _, m := range mdRef.FindAllStringSubmatch(line, -1) {
				ref := m[1]
				if name := strings.TrimSuffix(filepath.Base(ref), ".md"); strings.Contains(ref, "bench/") && name == strings.ToUpper(name) {
					continue // a placeholder: docs/bench/AREA.md
				}
				ok := false
				if strings.Contains(ref, "/") {
					for _, dir := range []string{root, filepath.Join(root, filepath.Dir(f.rel))} {
						if _, err := os.Stat(filepath.Join(dir, ref)); err == nil {
							ok = true
						}
					}
				} else {
					ok = base[ref]
				}
				if !ok {
					t.Errorf("%s:%d names %s, which the repository does not have", f.rel, i+1, ref)
				}
			}
		}
	}
}
