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
