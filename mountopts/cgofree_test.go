package mountopts

import (
	"strings"
	"testing"

	"github.com/featurefs/featurefs/test/testenv"
)

// Parsing options links no ONNX Runtime, NVML or cgo extractor: mountopts
// depends on the cgo-free leaf extractor/spec only (issue 14, item 4).
func TestMountoptsIsCgoFree(t *testing.T) {
	deps := testenv.Deps(t, nil, ".")
	var sawSpec bool
	for _, d := range deps {
		pkg := d.ImportPath
		switch {
		case pkg == "github.com/featurefs/featurefs/extractor/spec":
			sawSpec = true
		case strings.Contains(pkg, "onnxruntime"), strings.Contains(pkg, "go-nvml"),
			pkg == "github.com/featurefs/featurefs/extractor":
			t.Errorf("mountopts depends on %s", pkg)
		}
		if d.CgoFiles != 0 && strings.HasPrefix(pkg, "github.com/") {
			t.Errorf("mountopts depends on %s, which has %d cgo files", pkg, d.CgoFiles)
		}
	}
	if !sawSpec {
		t.Errorf("mountopts does not import extractor/spec; go list said: %v", deps)
	}
}
