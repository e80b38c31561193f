package mountopts

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Parsing options links no ONNX Runtime, NVML or cgo extractor: mountopts
// depends on the cgo-free leaf extractor/spec only (issue 14, item 4).
func TestMountoptsIsCgoFree(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out, err := exec.Command(goBin, "list", "-deps", "-f", "{{.ImportPath}} {{len .CgoFiles}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	var sawSpec bool
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, cgoFiles, _ := strings.Cut(line, " ")
		switch {
		case pkg == "github.com/featurefs/featurefs/extractor/spec":
			sawSpec = true
		case strings.Contains(pkg, "onnxruntime"), strings.Contains(pkg, "go-nvml"),
			pkg == "github.com/featurefs/featurefs/extractor":
			t.Errorf("mountopts depends on %s", pkg)
		}
		if cgoFiles != "0" && strings.HasPrefix(pkg, "github.com/") {
			t.Errorf("mountopts depends on %s, which has %s cgo files", pkg, cgoFiles)
		}
	}
	if !sawSpec {
		t.Errorf("mountopts does not import extractor/spec; go list said:\n%s", out)
	}
}
