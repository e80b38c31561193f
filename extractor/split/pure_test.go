package split

import (
	"os/exec"
	"strings"
	"testing"
)

// The cost model links no ONNX Runtime, FUSE, HTTP or cgo, and not package
// extractor (issue 14, item 2).
func TestSplitIsPure(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command (go test puts it on PATH): %v", err)
	}
	const pkg = "github.com/featurefs/featurefs/extractor/split"
	out, err := exec.Command(goBin, "list", "-deps", "-f", "{{.ImportPath}} {{len .CgoFiles}}", pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 10 {
		t.Fatalf("go list -deps %s listed %d packages:\n%s", pkg, len(lines), out)
	}
	var sawSpec bool
	for _, line := range lines {
		dep, cgoFiles, _ := strings.Cut(line, " ")
		switch {
		case dep == "github.com/featurefs/featurefs/extractor/spec":
			sawSpec = true
		case strings.HasPrefix(dep, "github.com/yalue/onnxruntime_go"), strings.HasPrefix(dep, "github.com/hanwen/go-fuse"),
			dep == "net/http", dep == "runtime/cgo", dep == "github.com/featurefs/featurefs/extractor":
			t.Errorf("%s depends on %s", pkg, dep)
		}
		if cgoFiles != "0" && strings.HasPrefix(dep, "github.com/") {
			t.Errorf("%s depends on %s, which has %s cgo files", pkg, dep, cgoFiles)
		}
	}
	if !sawSpec {
		t.Errorf("%s does not import extractor/spec; go list said:\n%s", pkg, out)
	}
}
