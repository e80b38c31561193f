package figures

import (
	"testing"

	"github.com/featurefs/featurefs/test/testenv"
)

// The figures are a leaf under the tree and the read path: the stats
// document and the error kinds are defined here, and both fs and
// fs/features fill them, so neither climbs up to the other's types (issue
// 26, item 5).
func TestFiguresIsBelowTheTreeAndThePipeline(t *testing.T) {
	testenv.CheckDeps(t, ".", 10, func(d testenv.Dep) string {
		switch d.ImportPath {
		case "github.com/featurefs/featurefs/fs/features", "github.com/featurefs/featurefs/fs/remote":
			return "above the figures"
		}
		return testenv.FUSE(d)
	})
}
