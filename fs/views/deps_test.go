package views

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/featurefs/featurefs/test/testenv"
)

// The views are the generated files without FUSE: they link no go-fuse
// and do not import the tree (package fs) above them, so a new view is
// tested without a kernel and touches no go-fuse code.
func TestViewsImportNoFUSE(t *testing.T) {
	testenv.CheckDeps(t, ".", 20, testenv.FUSE)
}

// maxTreeLines bounds the go-fuse tree's own code (fs/*.go but tests):
// the nodes that render the views and the feature tree, the kernel's
// cache and the mount. It grew from 2,491 to 3,454 lines in one round of
// views written as node types of their own; with the views here, 2,568.
// A view that pushes the tree past it belongs in this package.
const maxTreeLines = 2600

func TestTheTreeStaysThin(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "*.go"))
	if err != nil || len(files) < 10 {
		t.Fatalf("fs/*.go: %d files, %v", len(files), err)
	}
	lines := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines += bytes.Count(b, []byte("\n"))
	}
	if lines >= maxTreeLines {
		t.Errorf("fs/*.go (tests aside) holds %d lines, the bound is %d: describe the new view in fs/views (a Dir or a File) and let fs render it", lines, maxTreeLines)
	}
}
