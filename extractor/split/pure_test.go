package split

import (
	"strings"
	"testing"

	"github.com/featurefs/featurefs/test/testenv"
)

// The cost model links no ONNX Runtime, FUSE, HTTP or cgo, and not package
// extractor (issue 14, item 2).
func TestSplitIsPure(t *testing.T) {
	testenv.CheckDeps(t, "github.com/featurefs/featurefs/extractor/split", 10, func(d testenv.Dep) string {
		dep := d.ImportPath
		switch {
		case strings.HasPrefix(dep, "github.com/yalue/onnxruntime_go"), strings.HasPrefix(dep, "github.com/hanwen/go-fuse"),
			dep == "net/http", dep == "runtime/cgo", dep == "github.com/featurefs/featurefs/extractor":
			return "the cost model stays pure"
		case d.CgoFiles != 0 && strings.HasPrefix(dep, "github.com/"):
			return "cgo"
		}
		return ""
	}, "github.com/featurefs/featurefs/extractor/spec")
}
