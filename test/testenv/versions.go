package testenv

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// ModelVersions returns the directory of the ResNet-50 versions that
// scripts/export_versions.py exports (base.onnx, renamed.onnx,
// layer4fc.onnx, bn-layer2.onnx; its doc string describes each). They are
// exported once per version of the script and of scripts/export_model.py
// into DepsDir()/models, like Model's, under a file lock.
func ModelVersions(t testing.TB) string {
	t.Helper()
	py := RequireTorch(t)
	h := sha256.New()
	script := filepath.Join(RepoRoot(t), "scripts", "export_versions.py")
	for _, f := range []string{script, filepath.Join(RepoRoot(t), "scripts", "export_model.py")} {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		h.Write(src)
	}
	dir := filepath.Join(DepsDir(), "models", "versions-"+hex.EncodeToString(h.Sum(nil)[:4]))
	done := filepath.Join(dir, "done")
	if _, err := os.Stat(done); err == nil {
		return dir
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	unlock := lockFile(t, dir+".lock")
	defer unlock()
	if _, err := os.Stat(done); err == nil {
		return dir
	}
	cmd := exec.Command(py, script, "--out", dir)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("testenv: exporting the model versions: %v\n%s", err, b)
	}
	if err := os.WriteFile(done, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}
