package test

// scripts/install-ort.sh (run by install-deps.sh): the decision to install
// the GPU providers (an NVIDIA GPU, --gpu, FEATUREFS_GPU) and the install
// itself, against a temporary FEATUREFS_DEPS, with a fake nvidia-smi and a
// fake npm that serves small tarballs laid out like the real packages (no
// download).

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/featurefs/featurefs/test/testenv"
)

// fakeTarball writes a .tgz of files (name -> content) under
// package/Plugins/Linux/x64/ and returns its sha512 in hex.
func fakeTarball(t *testing.T, path string, files map[string]string) string {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for name, content := range files {
		hdr := &tar.Header{Name: "package/Plugins/Linux/x64/" + name, Mode: 0o755, Size: int64(len(content)), Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha512.Sum512(buf.Bytes())
	return hex.EncodeToString(sum[:])
}

// ortInstall is a fake install environment.
type ortInstall struct {
	deps, fakeBin, npmLog string
	env                   []string
}

func newORTInstall(t *testing.T) *ortInstall {
	t.Helper()
	dir := t.TempDir()
	in := &ortInstall{deps: filepath.Join(dir, "deps"), fakeBin: filepath.Join(dir, "bin"), npmLog: filepath.Join(dir, "npm.log")}
	tgz := filepath.Join(dir, "tarballs")
	for _, d := range []string{in.fakeBin, tgz} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	coreSum := fakeTarball(t, filepath.Join(tgz, "com.github.asus4.onnxruntime-0.4.9.tgz"), map[string]string{
		"libonnxruntime.so": "core 1.29.0", "libonnxruntime_providers_shared.so": "shared from core", "libonnxruntime.so.meta": "unity"})
	gpuSum := fakeTarball(t, filepath.Join(tgz, "com.github.asus4.onnxruntime.linux-x64-gpu-0.4.9.tgz"), map[string]string{
		"libonnxruntime_providers_cuda.so": "cuda provider", "libonnxruntime_providers_tensorrt.so": "tensorrt provider",
		"libonnxruntime_providers_shared.so": "shared from gpu"})
	// npm pack --silent NAME@VERSION: copies the tarball into the current
	// directory and prints its name, as npm does.
	npm := `#!/bin/bash
set -e
[ "$1" = pack ] && [ "$2" = --silent ] || { echo "fake npm: unexpected $*" >&2; exit 1; }
echo "$3" >>` + in.npmLog + `
f="${3%@*}-${3##*@}.tgz"
cp "` + tgz + `/$f" .
echo "$f"
`
	if err := os.WriteFile(filepath.Join(in.fakeBin, "npm"), []byte(npm), 0o755); err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "PATH=") && !strings.HasPrefix(e, "FEATUREFS_GPU=") && !strings.HasPrefix(e, "FEATUREFS_DEPS=") {
			env = append(env, e)
		}
	}
	in.env = append(env, "PATH="+in.fakeBin+":/usr/bin:/bin", "FEATUREFS_DEPS="+in.deps,
		"ORT_CORE_SHA512="+coreSum, "ORT_GPU_SHA512="+gpuSum)
	return in
}

// withNvidiaSMI puts a fake nvidia-smi on the fake PATH.
func (in *ortInstall) withNvidiaSMI(t *testing.T) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(in.fakeBin, "nvidia-smi"), []byte("#!/bin/sh\necho 'GPU 0: Fake'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

// run runs scripts/install-ort.sh with args and extra env.
func (in *ortInstall) run(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(testenv.RepoRoot(t), "scripts", "install-ort.sh")}, args...)...)
	cmd.Env = append(append([]string(nil), in.env...), env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return o.String(), e.String(), code
}

// hostHasGPU reports whether this machine itself signals an NVIDIA GPU
// the way the script checks (then "no GPU" cannot be faked).
func hostHasGPU() bool {
	if _, err := os.Stat("/dev/nvidiactl"); err == nil {
		return true
	}
	for _, d := range []string{"/usr/bin", "/bin"} {
		if _, err := os.Stat(filepath.Join(d, "nvidia-smi")); err == nil {
			return true
		}
	}
	return false
}

func TestInstallORTDecidesGPU(t *testing.T) {
	in := newORTInstall(t)
	out, stderr, code := in.run(t, nil, "--plan")
	if code != 0 || !strings.Contains(out, "core: install ONNX Runtime 1.29.0 (com.github.asus4.onnxruntime@0.4.9) to "+in.deps+"/lib/onnxruntime-1.29.0/libonnxruntime.so.1\n") {
		t.Fatalf("--plan: exit %d\n%s%s", code, out, stderr)
	}
	if hostHasGPU() {
		if !strings.Contains(out, "gpu: install") {
			t.Errorf("this host has an NVIDIA GPU: --plan %q", out)
		}
	} else if !strings.Contains(out, "gpu: skip (no NVIDIA GPU (no /dev/nvidiactl, no nvidia-smi on PATH; --gpu or FEATUREFS_GPU=1 installs them anyway))") {
		t.Errorf("no GPU: --plan %q, want the GPU providers skipped with the reason", out)
	}
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"--plan", "--gpu"}, "gpu: install the CUDA and TensorRT providers (com.github.asus4.onnxruntime.linux-x64-gpu@0.4.9) to " + in.deps + "/lib/onnxruntime-1.29.0 (--gpu)"},
		{[]string{"FEATUREFS_GPU=1"}, []string{"--plan"}, "gpu: install the CUDA and TensorRT providers (com.github.asus4.onnxruntime.linux-x64-gpu@0.4.9) to " + in.deps + "/lib/onnxruntime-1.29.0 (FEATUREFS_GPU=1)"},
	} {
		if out, _, code := in.run(t, c.env, c.args...); code != 0 || !strings.Contains(out, c.want) {
			t.Errorf("%v %v: exit %d, %q; want %q", c.env, c.args, code, out, c.want)
		}
	}
	in.withNvidiaSMI(t)
	if out, _, _ := in.run(t, nil, "--plan"); !hostHasGPU() && !strings.Contains(out, "gpu: install the CUDA and TensorRT providers") ||
		!hostHasGPU() && !strings.Contains(out, "(nvidia-smi is "+in.fakeBin+"/nvidia-smi)") {
		t.Errorf("with nvidia-smi on PATH: %q", out)
	}
	if out, _, _ := in.run(t, []string{"FEATUREFS_GPU=0"}, "--plan"); !strings.Contains(out, "gpu: skip (FEATUREFS_GPU=0)") {
		t.Errorf("FEATUREFS_GPU=0 with nvidia-smi: %q, want skip", out)
	}
	if _, stderr, code := in.run(t, nil, "--bogus"); code != 2 || !strings.Contains(stderr, "unknown argument --bogus") {
		t.Errorf("--bogus: exit %d, %q", code, stderr)
	}
	if _, err := os.Stat(in.deps); err == nil {
		t.Error("--plan created FEATUREFS_DEPS")
	}
}

func TestInstallORTInstallsProvidersWithGPU(t *testing.T) {
	in := newORTInstall(t)
	in.withNvidiaSMI(t)
	dir := filepath.Join(in.deps, "lib", "onnxruntime-1.29.0")
	out, stderr, code := in.run(t, nil)
	if code != 0 || out != dir+"/libonnxruntime.so.1\n" {
		t.Fatalf("install: exit %d, stdout %q\n%s", code, out, stderr)
	}
	for name, want := range map[string]string{
		"libonnxruntime.so.1": "core 1.29.0", "libonnxruntime_providers_cuda.so": "cuda provider",
		"libonnxruntime_providers_tensorrt.so": "tensorrt provider", "libonnxruntime_providers_shared.so": "shared from gpu",
	} {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != want {
			t.Errorf("%s: %q, %v; want %q", name, b, err, want)
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 4 {
		t.Errorf("%d files in %s (temporary files left?): %v", len(ents), dir, ents)
	}
	log, _ := os.ReadFile(in.npmLog)
	if string(log) != "com.github.asus4.onnxruntime@0.4.9\ncom.github.asus4.onnxruntime.linux-x64-gpu@0.4.9\n" {
		t.Errorf("npm fetched %q", log)
	}
	// Idempotent: nothing fetched again.
	if out2, stderr, code := in.run(t, nil); code != 0 || out2 != out {
		t.Errorf("second run: exit %d, %q\n%s", code, out2, stderr)
	}
	if log2, _ := os.ReadFile(in.npmLog); string(log2) != string(log) {
		t.Errorf("second run fetched again: %q", log2)
	}
	if plan, _, _ := in.run(t, nil, "--plan"); !strings.Contains(plan, "core: installed") || !strings.Contains(plan, "gpu: installed") {
		t.Errorf("--plan after install: %q", plan)
	}
}

func TestInstallORTCoreOnlyWithoutGPU(t *testing.T) {
	in := newORTInstall(t)
	dir := filepath.Join(in.deps, "lib", "onnxruntime-1.29.0")
	_, stderr, code := in.run(t, []string{"FEATUREFS_GPU=0"})
	if code != 0 || !strings.Contains(stderr, "GPU providers not installed: FEATUREFS_GPU=0") {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "libonnxruntime.so.1")); err != nil || string(b) != "core 1.29.0" {
		t.Errorf("core: %q %v", b, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "libonnxruntime_providers_shared.so")); string(b) != "shared from core" {
		t.Errorf("providers_shared: %q, want the core package's", b)
	}
	if _, err := os.Stat(filepath.Join(dir, "libonnxruntime_providers_cuda.so")); err == nil {
		t.Error("CUDA provider installed without a GPU")
	}
	if log, _ := os.ReadFile(in.npmLog); string(log) != "com.github.asus4.onnxruntime@0.4.9\n" {
		t.Errorf("npm fetched %q, want the core package only", log)
	}
	// Asked for later: the providers are added, the core is not fetched again.
	if _, stderr, code := in.run(t, nil, "--gpu"); code != 0 {
		t.Fatalf("--gpu: exit %d\n%s", code, stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "libonnxruntime_providers_cuda.so")); string(b) != "cuda provider" {
		t.Errorf("after --gpu: CUDA provider %q", b)
	}
	if log, _ := os.ReadFile(in.npmLog); string(log) != "com.github.asus4.onnxruntime@0.4.9\ncom.github.asus4.onnxruntime.linux-x64-gpu@0.4.9\n" {
		t.Errorf("npm fetched %q", log)
	}
}

func TestInstallORTRefusesWrongHash(t *testing.T) {
	in := newORTInstall(t)
	_, stderr, code := in.run(t, []string{"FEATUREFS_GPU=0", "ORT_CORE_SHA512=" + strings.Repeat("0", 128)})
	if code == 0 || !strings.Contains(stderr, "com.github.asus4.onnxruntime@0.4.9: sha512 ") || !strings.Contains(stderr, "refusing it") {
		t.Errorf("wrong sha512: exit %d\n%s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(in.deps, "lib", "onnxruntime-1.29.0", "libonnxruntime.so.1")); err == nil {
		t.Error("a tarball with the wrong sha512 was installed")
	}
}
