package namespace

import (
	"testing"

	"github.com/featurefs/featurefs/test/testenv"
)

// The namespace is the FUSE tree's FUSE-free part: it links no go-fuse and
// does not import the tree (package fs) above it.
func TestNamespaceImportsNoFUSE(t *testing.T) {
	testenv.CheckDeps(t, ".", 20, testenv.FUSE, "github.com/featurefs/featurefs/fs/naming")
}
