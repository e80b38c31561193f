package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/featurefs/featurefs/test/testenv"
)

// The claims docs/ARCHITECTURE.md makes that a program can check (issue
// 26, item 6). The other checked claims have their own tests, which the
// page names: TestFSIsCgoFree, TestMountoptsIsCgoFree, TestSplitIsPure,
// TestNoFUSEDependency, TestNamespaceIsFUSEFree and the goroutine
// ownership test.

const modulePath = "github.com/featurefs/featurefs"

func readArchitecture(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// repoTree walks the module once and returns its directories and files
// (paths from the package's directory), skipping hidden directories, bin/
// and testdata/: the tree the page's claims are checked against.
func repoTree(t *testing.T) (root string, dirs, files []string) {
	t.Helper()
	root = filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			files = append(files, p)
			return nil
		}
		if n := d.Name(); p != root && (strings.HasPrefix(n, ".") || n == "bin" || n == "testdata") {
			return filepath.SkipDir
		}
		dirs = append(dirs, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return root, dirs, files
}

// layerLine is one row of the page's layer picture: "layer N  pkg pkg ...",
// or the "tests" and "tools" rows of packages outside the layers.
var layerLine = regexp.MustCompile(`(?m)^(layer (\d+)|tests|tools)\s+(.+)$`)

// The layer picture lists every package of the module once, and each
// package imports only packages on layers below its own: imports point
// down, and packages on one layer do not import each other. No package on
// a layer imports a test helper.
func TestArchitectureLayers(t *testing.T) {
	doc := readArchitecture(t)
	layer := map[string]int{} // package -> layer; 0 for tests and tools
	helper := map[string]bool{}
	last := 1 << 30
	for _, m := range layerLine.FindAllStringSubmatch(doc, -1) {
		n := 0
		if m[2] != "" {
			n, _ = strconv.Atoi(m[2])
			if n >= last {
				t.Errorf("docs/ARCHITECTURE.md: layer %d comes after layer %d; the picture runs from the top down", n, last)
			}
			last = n
		}
		for _, p := range strings.Fields(m[3]) {
			if _, dup := layer[p]; dup {
				t.Errorf("docs/ARCHITECTURE.md: %s is in the layer picture twice", p)
			}
			layer[p] = n
			helper[p] = m[1] == "tests"
		}
	}
	if len(layer) < 20 {
		t.Fatalf("docs/ARCHITECTURE.md: the layer picture lists %d packages: %v", len(layer), layer)
	}
	imports := testenv.Imports(t, filepath.Join("..", "..")+"/...")
	if len(imports) < 20 {
		t.Fatalf("go list ./... listed %d packages", len(imports))
	}
	for pkg := range imports {
		rel := strings.TrimPrefix(strings.TrimPrefix(pkg, modulePath), "/")
		if _, ok := layer[rel]; !ok {
			t.Errorf("package %s is not in docs/ARCHITECTURE.md's layer picture", rel)
		}
	}
	for rel := range layer {
		if _, ok := imports[filepath.Join(modulePath, rel)]; !ok {
			t.Errorf("docs/ARCHITECTURE.md's layer picture lists %s, which is not a package of the module", rel)
		}
	}
	for pkg, imps := range imports {
		rel := strings.TrimPrefix(strings.TrimPrefix(pkg, modulePath), "/")
		n := layer[rel]
		for _, imp := range imps {
			if !strings.HasPrefix(imp, modulePath+"/") {
				continue
			}
			irel := strings.TrimPrefix(imp, modulePath+"/")
			if n > 0 && helper[irel] {
				t.Errorf("%s (layer %d) imports the test helper %s", rel, n, irel)
			}
			if in, ok := layer[irel]; ok && n > 0 && in >= n {
				t.Errorf("%s (layer %d) imports %s (layer %d): imports must point down the picture in docs/ARCHITECTURE.md", rel, n, irel, in)
			}
		}
	}
}

// codeRef is a source file the page names: a path (fs/features/read.go)
// or, in the "where a change goes" table, a bare name (batch.go).
var codeRef = regexp.MustCompile(`(?:^|[^\w./-])([\w./-]*\w\.(?:go|c|h|s))\b`)

// identRef is a Go name the page quotes: `pkg.Name` or `pkg.Type.Method`.
var identRef = regexp.MustCompile("`([a-z][a-z0-9]*)\\.([A-Za-z][A-Za-z0-9]*)(?:\\.([A-Za-z][A-Za-z0-9]*))?`")

// Every file and every Go name the page cites exists: a file moved or a
// function renamed fails here until the page follows.
func TestArchitectureCitesWhatExists(t *testing.T) {
	doc := readArchitecture(t)
	root, dirs, paths := repoTree(t)
	bases := map[string]bool{}
	pkgDirs := map[string][]string{} // last path element -> package directories
	for _, p := range dirs {
		if ms, _ := filepath.Glob(filepath.Join(p, "*.go")); len(ms) > 0 {
			name := filepath.Base(p)
			if p == root {
				name = "featurefs"
			}
			pkgDirs[name] = append(pkgDirs[name], p)
		}
	}
	for _, p := range paths {
		bases[filepath.Base(p)] = true
	}
	files := 0
	for _, m := range codeRef.FindAllStringSubmatch(doc, -1) {
		ref := m[1]
		files++
		if strings.Contains(ref, "/") {
			if _, err := os.Stat(filepath.Join(root, ref)); err != nil {
				t.Errorf("docs/ARCHITECTURE.md names %s, which does not exist", ref)
			}
		} else if !bases[ref] {
			t.Errorf("docs/ARCHITECTURE.md names %s, and no file has that name", ref)
		}
	}
	decls := map[string]map[string]bool{} // package directory -> declared names, "Type.Method" for methods
	names := 0
	for _, m := range identRef.FindAllStringSubmatch(doc, -1) {
		pkg, name, method := m[1], m[2], m[3]
		dirs := pkgDirs[pkg]
		if len(dirs) == 0 {
			continue // not a package of ours (a flag value, a file name)
		}
		names++
		want := name
		if method != "" {
			want = name + "." + method
		}
		found := false
		for _, dir := range dirs {
			if decls[dir] == nil {
				decls[dir] = declaredNames(t, dir)
			}
			found = found || decls[dir][want]
		}
		if !found {
			t.Errorf("docs/ARCHITECTURE.md quotes `%s`, which package %s (%s) does not declare", m[0][1:len(m[0])-1], pkg, strings.Join(dirs, ", "))
		}
	}
	if files < 20 || names < 10 {
		t.Fatalf("docs/ARCHITECTURE.md: found %d file names and %d Go names; the patterns are wrong", files, names)
	}
}

// declaredNames returns the top-level names a package directory's non-test
// files declare, and its methods as "Type.Method" (fields of a struct
// type too, as "Type.Field").
func declaredNames(t *testing.T, dir string) map[string]bool {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatalf("parse %s: %v", dir, err)
	}
	names := map[string]bool{}
	for _, p := range pkgs {
		for _, f := range p.Files {
			for _, d := range f.Decls {
				switch d := d.(type) {
				case *ast.FuncDecl:
					if d.Recv == nil || len(d.Recv.List) == 0 {
						names[d.Name.Name] = true
						continue
					}
					typ := d.Recv.List[0].Type
					if s, ok := typ.(*ast.StarExpr); ok {
						typ = s.X
					}
					if ix, ok := typ.(*ast.IndexExpr); ok {
						typ = ix.X
					}
					if id, ok := typ.(*ast.Ident); ok {
						names[id.Name+"."+d.Name.Name] = true
					}
				case *ast.GenDecl:
					for _, s := range d.Specs {
						switch s := s.(type) {
						case *ast.ValueSpec:
							for _, n := range s.Names {
								names[n.Name] = true
							}
						case *ast.TypeSpec:
							names[s.Name.Name] = true
							if st, ok := s.Type.(*ast.StructType); ok {
								for _, f := range st.Fields.List {
									for _, n := range f.Names {
										names[s.Name.Name+"."+n.Name] = true
									}
								}
							}
						}
					}
				}
			}
		}
	}
	return names
}

// boundRef is a bound the page states with its constant: `Name` (VALUE)
// or `pkg.Name` (VALUE), VALUE a number with an optional unit.
var boundRef = regexp.MustCompile("`(?:([a-z]\\w*)\\.)?([A-Za-z_]\\w*)` \\(([0-9][0-9,]*)(?: (MiB|s))?")

// Each bound the page states next to its constant's name is that
// constant's value.
func TestArchitectureBoundsAreTheCode(t *testing.T) {
	doc := readArchitecture(t)
	root, all, _ := repoTree(t)
	consts := map[string]int64{} // name -> value, over the module's packages but test/ and scripts/
	var dirs []string
	for _, p := range all {
		if rel, _ := filepath.Rel(root, p); rel == "test" || rel == "scripts" || strings.HasPrefix(rel, "test"+string(filepath.Separator)) || strings.HasPrefix(rel, "scripts"+string(filepath.Separator)) {
			continue
		}
		dirs = append(dirs, p)
	}
	for _, dir := range dirs {
		for name, v := range intConsts(t, dir) {
			consts[name] = v
		}
	}
	checked := 0
	for _, m := range boundRef.FindAllStringSubmatch(doc, -1) {
		name, unit := m[2], m[4]
		want, err := strconv.ParseInt(strings.ReplaceAll(m[3], ",", ""), 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", m[0], err)
		}
		switch unit {
		case "MiB":
			want <<= 20
		case "s":
			want *= 1e9 // a time.Duration
		}
		got, ok := consts[name]
		if !ok {
			t.Errorf("docs/ARCHITECTURE.md states %s, but no integer constant %s is declared", m[0], name)
			continue
		}
		checked++
		if got != want {
			t.Errorf("docs/ARCHITECTURE.md states %s, but %s is %d", m[0], name, got)
		}
	}
	if checked < 5 {
		t.Errorf("checked %d bounds against the code; the page states at least 5", checked)
	}
}

// intConsts evaluates the integer constants a package directory's non-test
// files declare with literal values: numbers, shifts, products and
// time units (time.Second and the like), and constants declared before.
func intConsts(t *testing.T, dir string) map[string]int64 {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatalf("parse %s: %v", dir, err)
	}
	units := map[string]int64{"Nanosecond": 1, "Microsecond": 1e3, "Millisecond": 1e6, "Second": 1e9, "Minute": 60e9, "Hour": 3600e9}
	vals := map[string]int64{}
	var eval func(e ast.Expr) (int64, bool)
	eval = func(e ast.Expr) (int64, bool) {
		switch e := e.(type) {
		case *ast.BasicLit:
			if e.Kind != token.INT {
				return 0, false
			}
			v, err := strconv.ParseInt(strings.ReplaceAll(e.Value, "_", ""), 0, 64)
			return v, err == nil
		case *ast.ParenExpr:
			return eval(e.X)
		case *ast.Ident:
			v, ok := vals[e.Name]
			return v, ok
		case *ast.SelectorExpr:
			if x, ok := e.X.(*ast.Ident); ok && x.Name == "time" {
				v, ok := units[e.Sel.Name]
				return v, ok
			}
		case *ast.BinaryExpr:
			a, ok1 := eval(e.X)
			b, ok2 := eval(e.Y)
			if !ok1 || !ok2 {
				return 0, false
			}
			switch e.Op {
			case token.SHL:
				return a << b, true
			case token.MUL:
				return a * b, true
			case token.ADD:
				return a + b, true
			case token.SUB:
				return a - b, true
			}
		}
		return 0, false
	}
	var files []*ast.File
	for _, p := range pkgs {
		for _, f := range p.Files {
			files = append(files, f)
		}
	}
	// Two passes, so a constant defined from one declared in a later file
	// is evaluated too.
	for pass := 0; pass < 2; pass++ {
		for _, f := range files {
			for _, d := range f.Decls {
				g, ok := d.(*ast.GenDecl)
				if !ok || (g.Tok != token.CONST && g.Tok != token.VAR) {
					continue
				}
				for _, s := range g.Specs {
					vs := s.(*ast.ValueSpec)
					for i, n := range vs.Names {
						if i < len(vs.Values) {
							if v, ok := eval(vs.Values[i]); ok {
								vals[n.Name] = v
							}
						}
					}
				}
			}
		}
	}
	return vals
}

// testRef is a test the page names.
var testRef = regexp.MustCompile(`\bTest[A-Z]\w*`)

// Every test the page names is a test function of the module: a renamed or
// deleted test fails here until the page follows.
func TestArchitectureNamesRealTests(t *testing.T) {
	doc := readArchitecture(t)
	_, _, paths := repoTree(t)
	tests := map[string]bool{}
	decl := regexp.MustCompile(`(?m)^func (Test\w+)\(`)
	for _, p := range paths {
		if !strings.HasSuffix(p, "_test.go") {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range decl.FindAllStringSubmatch(string(b), -1) {
			tests[m[1]] = true
		}
	}
	named := 0
	for _, name := range testRef.FindAllString(doc, -1) {
		named++
		if !tests[name] {
			t.Errorf("docs/ARCHITECTURE.md names %s, which no test file declares", name)
		}
	}
	if named < 10 || !tests["TestArchitectureNamesRealTests"] {
		t.Fatalf("found %d test names in docs/ARCHITECTURE.md and %d test functions; the patterns are wrong", named, len(tests))
	}
}

// The page's patterns find what they should (and a stats field such as
// `fs.cache_writes_skipped` is not a Go name).
func TestArchitecturePatterns(t *testing.T) {
	for _, c := range []struct {
		re   *regexp.Regexp
		text string
		want []string
	}{
		{codeRef, "(fs/features/read.go) and batch.go, not fs/x.gox", []string{"fs/features/read.go", "batch.go"}},
		{identRef, "`bucket.DefaultMaxConcurrentGets`, `cache.Store.ReadAt`, `fs.cache_writes_skipped`", []string{"bucket DefaultMaxConcurrentGets ", "cache Store ReadAt"}},
		{boundRef, "`featurestore.DefaultMaxQueue` (1,024) and `defaultCacheWriteBytes` (64 MiB", []string{"featurestore DefaultMaxQueue 1,024 ", " defaultCacheWriteBytes 64 MiB"}},
	} {
		var got []string
		for _, m := range c.re.FindAllStringSubmatch(c.text, -1) {
			got = append(got, strings.Join(m[1:], " "))
		}
		if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", c.want) {
			t.Errorf("%q: got %q, want %q", c.text, got, c.want)
		}
	}
}
