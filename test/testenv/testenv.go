// Package testenv finds the real dependencies featurefs's tests run against:
// the ONNX Runtime library, the Debian PyTorch interpreter, exported models
// and a MinIO binary. scripts/install-deps.sh installs them. A test that
// needs one that is missing fails with a message saying so; nothing skips.
package testenv

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/featurefs/featurefs/extractor/spec"
)

// Python is the interpreter that has Debian's torch, torchvision and onnx.
const Python = "/usr/bin/python3"

// DepsDir is where scripts/install-deps.sh puts the ONNX Runtime library,
// MinIO and exported models: $FEATUREFS_DEPS or ~/.cache/featurefs.
func DepsDir() string {
	if d := os.Getenv("FEATUREFS_DEPS"); d != "" {
		return d
	}
	return spec.Dir()
}

// RepoRoot returns the directory holding go.mod.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("testenv: go.mod not found above the working directory")
		}
		dir = parent
	}
}

// ORTLib returns the path of libonnxruntime: $FEATUREFS_ORT_LIB, else the one
// install-deps.sh fetched (spec.ORTLibRel under DepsDir). It fails the test
// when the file is missing.
func ORTLib(t testing.TB) string {
	t.Helper()
	p := os.Getenv("FEATUREFS_ORT_LIB")
	if p == "" {
		p = filepath.Join(DepsDir(), filepath.FromSlash(spec.ORTLibRel))
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("testenv: ONNX Runtime library missing (%v): run scripts/install-deps.sh or set FEATUREFS_ORT_LIB", err)
	}
	return p
}

// MinIOBin returns the MinIO server binary install-deps.sh built.
func MinIOBin(t testing.TB) string {
	t.Helper()
	p := os.Getenv("FEATUREFS_MINIO")
	if p == "" {
		p = filepath.Join(DepsDir(), "bin", "minio")
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("testenv: MinIO binary missing (%v): run scripts/install-deps.sh or set FEATUREFS_MINIO", err)
	}
	return p
}

var (
	torchOnce sync.Once
	torchErr  error
	torchOut  []byte
)

// RequireTorch fails the test unless /usr/bin/python3 imports torch,
// torchvision, onnx, numpy and PIL, and returns the interpreter's path.
func RequireTorch(t testing.TB) string {
	t.Helper()
	torchOnce.Do(func() {
		torchOut, torchErr = exec.Command(Python, "-c", "import torch, torchvision, onnx, numpy, PIL").CombinedOutput()
	})
	if torchErr != nil {
		t.Fatalf("testenv: %s cannot import torch/torchvision/onnx/numpy/PIL (%v): %s\nrun scripts/install-deps.sh", Python, torchErr, torchOut)
	}
	return Python
}

// Model returns the path of torchvision model `name` (e.g. "resnet50")
// exported to ONNX with random, seeded weights by scripts/export_model.py.
// Exports are cached in DepsDir()/models, keyed by the script's content, and
// serialized across test processes with a file lock.
func Model(t testing.TB, name string) string {
	t.Helper()
	py := RequireTorch(t)
	script := filepath.Join(RepoRoot(t), "scripts", "export_model.py")
	src, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(src)
	dir := filepath.Join(DepsDir(), "models")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, name+"-"+hex.EncodeToString(sum[:4])+".onnx")
	if _, err := os.Stat(out); err == nil {
		return out
	}
	unlock := lockFile(t, out+".lock")
	defer unlock()
	if _, err := os.Stat(out); err == nil {
		return out
	}
	cmd := exec.Command(py, script, "--model", name, "--out", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("testenv: exporting %s: %v\n%s", name, err, b)
	}
	return out
}

// OddModel returns the path of model `name` made by
// scripts/export_odd_models.py: small conv nets whose inputs featurefs must
// accept ("tiny", "initinputs", "batch1", "batch3") or refuse at load
// ("twoinputs", "flat", "gray", "size128", "uint8"); the script's doc
// string describes each. "tiny", "initinputs", "batch1" and "batch3" have
// the same weights, so their features agree. The models are exported once
// per script version into DepsDir()/models, like Model's.
func OddModel(t testing.TB, name string) string {
	t.Helper()
	py := RequireTorch(t)
	script := filepath.Join(RepoRoot(t), "scripts", "export_odd_models.py")
	src, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(src)
	dir := filepath.Join(DepsDir(), "models", "odd-"+hex.EncodeToString(sum[:4]))
	out := filepath.Join(dir, name+".onnx")
	done := filepath.Join(dir, "done")
	if _, err := os.Stat(done); err != nil {
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			t.Fatal(err)
		}
		unlock := lockFile(t, dir+".lock")
		defer unlock()
		if _, err := os.Stat(done); err != nil {
			cmd := exec.Command(py, script, "--out", dir)
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("testenv: exporting the odd models: %v\n%s", err, b)
			}
			if err := os.WriteFile(done, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := os.Stat(out); err != nil {
		t.Fatalf("testenv: odd model %q: %v (see scripts/export_odd_models.py for the names)", name, err)
	}
	return out
}

func lockFile(t testing.TB, path string) func() {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatal(err)
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}
}
