package fs

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/featurefs/featurefs/test/testenv"
)

// The FUSE tree, the read path and the feature server and client (every
// package under fs/) build without cgo: they program against the contract
// in extractor/api, not package extractor (ONNX Runtime, NVML), which
// cmd/featurefs constructs and passes in (issue 26, item 3).
func TestFSIsCgoFree(t *testing.T) {
	// The test runs in fs/: ./... is every package under it.
	deps := testenv.Deps(t, nil, "./...")
	if len(deps) < 50 {
		t.Fatalf("go list -deps ./fs/... listed %d packages: %v", len(deps), deps)
	}
	var sawAPI bool
	for _, d := range deps {
		switch {
		case d.ImportPath == "github.com/featurefs/featurefs/extractor/api":
			sawAPI = true
		case d.ImportPath == "github.com/featurefs/featurefs/extractor",
			strings.Contains(d.ImportPath, "onnxruntime"), strings.Contains(d.ImportPath, "go-nvml"):
			t.Errorf("fs/... depends on %s", d.ImportPath)
		}
		if !d.Standard && d.CgoFiles != 0 {
			t.Errorf("fs/... depends on %s, which has %d cgo files", d.ImportPath, d.CgoFiles)
		}
	}
	if !sawAPI {
		t.Errorf("fs/... does not import extractor/api; go list said: %v", deps)
	}
	// And it builds, and its tests type-check, with cgo off.
	for _, args := range [][]string{{"build", "./..."}, {"vet", "./..."}} {
		cmd := exec.Command(testenv.GoTool(t), args...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("CGO_ENABLED=0 go %s (in fs/): %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
