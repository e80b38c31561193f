package lifetime

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// Every goroutine started under fs/ is owned (docs/ARCHITECTURE.md,
// "Ownership and lifetimes"): a go statement appears only in this package
// (Owner.Start, Owner.CloseAfter), so a goroutine that outlives its call is
// started by an Owner (Go, or Add then Start) whose Close cancels and
// waits for it; the only other way is a fan-out its function waits for, a
// sync.WaitGroup declared in that function whose Wait it calls. The
// callbacks of time.AfterFunc and context.AfterFunc are not counted here.
func TestGoroutinesAreOwned(t *testing.T) {
	root := filepath.Join("..", "..") // fs/
	fset := token.NewFileSet()
	var files, owned, scoped int
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		files++
		rel, _ := filepath.Rel(root, path)
		inLifetime := filepath.ToSlash(filepath.Dir(rel)) == "internal/lifetime"
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			groups, waited := waitGroups(fn.Body)
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.GoStmt:
					if !inLifetime {
						t.Errorf("%s: %s starts a goroutine with a go statement: start it with a lifetime.Owner (Go), or as a fan-out of a sync.WaitGroup the function waits for", fset.Position(n.Pos()), fn.Name.Name)
					}
				case *ast.CallExpr:
					sel, ok := n.Fun.(*ast.SelectorExpr)
					if !ok || sel.Sel.Name != "Go" {
						return true
					}
					recv := exprString(sel.X)
					switch id, isIdent := sel.X.(*ast.Ident); {
					case strings.HasSuffix(strings.ToLower(recv), "owner"):
						owned++
					case isIdent && groups[id.Name] && waited[id.Name]:
						scoped++
					default:
						t.Errorf("%s: %s calls %s.Go: neither a lifetime.Owner nor a sync.WaitGroup declared in the function and waited for there", fset.Position(n.Pos()), fn.Name.Name, recv)
					}
				}
				return true
			})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The walk must have seen the tree, the read path and the server.
	if files < 50 || owned < 10 || scoped < 5 {
		t.Fatalf("read %d files under fs/, found %d Owner.Go and %d WaitGroup.Go: not the tree it should check", files, owned, scoped)
	}
	t.Logf("%d files under fs/: %d goroutines started by an Owner, %d by a waited fan-out", files, owned, scoped)
}

// waitGroups returns the variables a function body declares as
// sync.WaitGroup, and those it calls Wait on.
func waitGroups(body *ast.BlockStmt) (groups, waited map[string]bool) {
	groups, waited = map[string]bool{}, map[string]bool{}
	ast.Inspect(body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.ValueSpec:
			if exprString(n.Type) == "sync.WaitGroup" {
				for _, name := range n.Names {
					groups[name.Name] = true
				}
			}
		case *ast.CallExpr:
			if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Wait" && len(n.Args) == 0 {
				if id, ok := sel.X.(*ast.Ident); ok {
					waited[id.Name] = true
				}
			}
		}
		return true
	})
	return groups, waited
}

// exprString renders an identifier or a selector chain (a.b.c); anything
// else as "?".
func exprString(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return exprString(e.X) + "." + e.Sel.Name
	}
	return "?"
}
