package namespace

import (
	"strings"
	"testing"

	"github.com/featurefs/featurefs/test/testenv"
)

// The namespace is the FUSE tree's FUSE-free part: it links no go-fuse and
// does not import the tree (package fs) above it.
func TestNamespaceImportsNoFUSE(t *testing.T) {
	deps := testenv.Deps(t, nil, ".")
	if len(deps) < 20 {
		t.Fatalf("go list -deps listed %d packages: %v", len(deps), deps)
	}
	var sawNaming bool
	for _, d := range deps {
		switch {
		case d.ImportPath == "github.com/featurefs/featurefs/fs/naming":
			sawNaming = true
		case strings.Contains(d.ImportPath, "go-fuse"), d.ImportPath == "github.com/featurefs/featurefs/fs":
			t.Errorf("fs/namespace depends on %s", d.ImportPath)
		}
	}
	if !sawNaming {
		t.Errorf("fs/namespace does not import fs/naming; go list said: %v", deps)
	}
}
