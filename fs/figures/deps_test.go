package figures

import (
	"strings"
	"testing"

	"github.com/featurefs/featurefs/test/testenv"
)

// The figures are a leaf under the tree and the read path: the stats
// document and the error kinds are defined here, and both fs and
// fs/features fill them, so neither climbs up to the other's types (issue
// 26, item 5).
func TestFiguresIsBelowTheTreeAndThePipeline(t *testing.T) {
	deps := testenv.Deps(t, nil, ".")
	if len(deps) < 10 {
		t.Fatalf("go list -deps listed %d packages: %v", len(deps), deps)
	}
	for _, d := range deps {
		switch p := d.ImportPath; {
		case p == "github.com/featurefs/featurefs/fs",
			p == "github.com/featurefs/featurefs/fs/features",
			p == "github.com/featurefs/featurefs/fs/remote",
			strings.Contains(p, "go-fuse"):
			t.Errorf("fs/figures depends on %s", p)
		}
	}
}
