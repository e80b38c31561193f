package split

import (
	"strings"
	"testing"

	"github.com/featurefs/featurefs/test/testenv"
)

// The cost model links no ONNX Runtime, FUSE, HTTP or cgo, and not package
// extractor (issue 14, item 2).
func TestSplitIsPure(t *testing.T) {
	const pkg = "github.com/featurefs/featurefs/extractor/split"
	deps := testenv.Deps(t, nil, pkg)
	if len(deps) < 10 {
		t.Fatalf("go list -deps %s listed %d packages: %v", pkg, len(deps), deps)
	}
	var sawSpec bool
	for _, d := range deps {
		dep := d.ImportPath
		switch {
		case dep == "github.com/featurefs/featurefs/extractor/spec":
			sawSpec = true
		case strings.HasPrefix(dep, "github.com/yalue/onnxruntime_go"), strings.HasPrefix(dep, "github.com/hanwen/go-fuse"),
			dep == "net/http", dep == "runtime/cgo", dep == "github.com/featurefs/featurefs/extractor":
			t.Errorf("%s depends on %s", pkg, dep)
		}
		if d.CgoFiles != 0 && strings.HasPrefix(dep, "github.com/") {
			t.Errorf("%s depends on %s, which has %d cgo files", pkg, dep, d.CgoFiles)
		}
	}
	if !sawSpec {
		t.Errorf("%s does not import extractor/spec; go list said: %v", pkg, deps)
	}
}
