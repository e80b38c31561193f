package testenv

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// Dep is one package a build links, as `go list -deps` lists it.
type Dep struct {
	// ImportPath is the package's import path.
	ImportPath string
	// Standard is whether it is in the standard library.
	Standard bool
	// CgoFiles is how many of its files import "C".
	CgoFiles int
}

// GoTool returns the go command (go test puts it on PATH).
func GoTool(t testing.TB) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command (go test puts it on PATH): %v", err)
	}
	return goBin
}

// Deps returns the packages `go list -deps PATTERNS` lists, run in the
// test's directory with env added to the environment (e.g.
// "CGO_ENABLED=0"); the test fails if go list does.
func Deps(t testing.TB, env []string, patterns ...string) []Dep {
	t.Helper()
	cmd := exec.Command(GoTool(t), append([]string{"list", "-deps", "-f", "{{.ImportPath}} {{.Standard}} {{len .CgoFiles}}"}, patterns...)...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", strings.Join(patterns, " "), err, out)
	}
	var deps []Dep
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("go list -deps %s: line %q", strings.Join(patterns, " "), line)
		}
		n, err := strconv.Atoi(f[2])
		if err != nil {
			t.Fatalf("go list -deps %s: line %q: %v", strings.Join(patterns, " "), line, err)
		}
		deps = append(deps, Dep{ImportPath: f[0], Standard: f[1] == "true", CgoFiles: n})
	}
	return deps
}

// Imports returns, for each package `go list PATTERNS` lists (run in the
// test's directory), the packages its non-test files import; the test
// fails if go list does.
func Imports(t testing.TB, patterns ...string) map[string][]string {
	t.Helper()
	cmd := exec.Command(GoTool(t), append([]string{"list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}"}, patterns...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", strings.Join(patterns, " "), err, out)
	}
	imports := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			t.Fatalf("go list %s: empty line in %q", strings.Join(patterns, " "), out)
		}
		imports[f[0]] = f[1:]
	}
	return imports
}

// CheckDeps checks the packages pkg depends on (Deps, run in the test's
// directory): none may match refused (it returns why, "" for a package
// that may be there), and each of wanted must be among them (a package
// split in two would lose the import the check is about). The list must
// hold at least min packages, so that an empty answer is not a pass.
func CheckDeps(t testing.TB, pkg string, min int, refused func(Dep) string, wanted ...string) {
	t.Helper()
	deps := Deps(t, nil, pkg)
	if len(deps) < min {
		t.Fatalf("go list -deps %s listed %d packages, fewer than %d: %v", pkg, len(deps), min, deps)
	}
	seen := map[string]bool{}
	for _, d := range deps {
		seen[d.ImportPath] = true
		if why := refused(d); why != "" {
			t.Errorf("%s depends on %s: %s", pkg, d.ImportPath, why)
		}
	}
	for _, w := range wanted {
		if !seen[w] {
			t.Errorf("%s does not depend on %s; go list said: %v", pkg, w, deps)
		}
	}
}

// FUSE says why a package must not be depended on by one that stays
// FUSE-free: go-fuse, or the tree (package fs) that renders with it; "" for
// any other.
func FUSE(d Dep) string {
	switch {
	case strings.Contains(d.ImportPath, "go-fuse"):
		return "go-fuse"
	case d.ImportPath == "github.com/featurefs/featurefs/fs":
		return "the FUSE tree"
	}
	return ""
}
