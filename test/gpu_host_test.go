package test

// The GPU path on a machine without a GPU: featurefs doctor, and the
// device choice of a real featurefs process, against a fake NVIDIA host (a
// fake NVML that lists one GPU, fake CUDA libraries built as empty shared
// objects with the right sonames, a fake CUDA provider next to a copy of
// the real ONNX Runtime). Everything up to ONNX Runtime loading the CUDA
// provider runs for real: the library search, dlopen, NVML through
// go-nvml, the provider check, the probe.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/featurefs/featurefs/test/testenv"
)

// fakeCUDALibs are the libraries a fake GPU host has, cuDNN aside.
var fakeCUDALibs = []string{"libcuda.so.1", "libcudart.so.13", "libcublasLt.so.13", "libcublas.so.13", "libcurand.so.10"}

// buildSO compiles src (C, "" for an empty library) into dir/name with
// soname name.
func buildSO(t *testing.T, dir, name, src string) {
	t.Helper()
	if src == "" {
		src = filepath.Join(t.TempDir(), "empty.c")
		if err := os.WriteFile(src, []byte("int featurefs_fake_library;\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command("gcc", "-shared", "-fPIC", "-Wl,-soname,"+name, "-o", filepath.Join(dir, name), src).CombinedOutput()
	if err != nil {
		t.Fatalf("gcc %s: %v\n%s", name, err, out)
	}
}

// fakeGPUHost returns a directory of fake CUDA libraries (with the fake
// NVML; without cuDNN) and an ONNX Runtime directory: a copy of the real
// core library with a fake CUDA provider library beside it.
func fakeGPUHost(t *testing.T) (libDir, ortLib string) {
	t.Helper()
	libDir = filepath.Join(t.TempDir(), "cuda libs")
	ortDir := filepath.Join(t.TempDir(), "ort")
	for _, d := range []string{libDir, ortDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	buildSO(t, libDir, "libnvidia-ml.so.1", filepath.Join(testenv.RepoRoot(t), "test", "testdata", "fakegpu", "fakenvml.c"))
	for _, l := range fakeCUDALibs {
		buildSO(t, libDir, l, "")
	}
	buildSO(t, ortDir, "libonnxruntime_providers_cuda.so", "")
	real := testenv.ORTLib(t)
	ortLib = filepath.Join(ortDir, "libonnxruntime.so.1")
	copyFile(t, real, ortLib)
	copyFile(t, filepath.Join(filepath.Dir(real), "libonnxruntime_providers_shared.so"), filepath.Join(ortDir, "libonnxruntime_providers_shared.so"))
	return libDir, ortLib
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}

// doctorJSON is the part of `featurefs doctor --json` the tests read.
type doctorJSON struct {
	ORT struct {
		Path      string `json:"path"`
		Version   string `json:"version"`
		Providers []struct {
			Name    string `json:"name"`
			Present bool   `json:"present"`
		} `json:"providers"`
	} `json:"ort"`
	Driver string `json:"driver"`
	CUDA   string `json:"cuda"`
	GPUs   []struct {
		Index      int    `json:"index"`
		Name       string `json:"name"`
		TotalBytes uint64 `json:"total_bytes"`
		FreeBytes  uint64 `json:"free_bytes"`
		Used       bool   `json:"used"`
		NotUsed    string `json:"not_used"`
	} `json:"gpus"`
	NVMLError string `json:"nvml_error"`
	CUDALibs  []struct {
		Name string `json:"name"`
		Path string `json:"path"`
	} `json:"cuda_libs"`
	SearchDirs []string `json:"search_dirs"`
	Auto       string   `json:"auto"`
	AutoWhy    string   `json:"auto_why"`
}

// On this machine (no NVIDIA driver, the CPU build of ONNX Runtime):
// doctor says so clearly, section by section, and exits 0.
func TestDoctorWithoutGPU(t *testing.T) {
	r := runCLI(t, time.Minute, nil, "doctor")
	if r.Code != 0 {
		t.Fatalf("featurefs doctor: %s", r)
	}
	out := r.Stdout
	for _, want := range []string{
		"ONNX Runtime\n  library    " + testenv.ORTLib(t) + "\n  version    1.29.0",
		"CUDA: libonnxruntime_providers_cuda.so missing (scripts/install-deps.sh --gpu installs it)",
		"GPUs (NVML)\n  no GPU: nvml init: NVML library (libnvidia-ml.so.1) not found",
		"libcudnn.so.9          missing  (cuDNN 9, needed)",
		"libcudart.so.13        missing  (CUDA 13 runtime, needed)",
		"--device auto\n  runs on the CPU: GPU unavailable: nvml init: NVML library (libnvidia-ml.so.1) not found\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor output lacks %q:\n%s", want, out)
		}
	}
	if r.Stderr != "" {
		t.Errorf("doctor wrote to stderr: %q", r.Stderr)
	}
	j := runCLI(t, time.Minute, nil, "doctor", "--json")
	var d doctorJSON
	if err := json.Unmarshal([]byte(j.Stdout), &d); err != nil || j.Code != 0 {
		t.Fatalf("doctor --json: %v\n%s", err, j)
	}
	if d.Auto != "cpu" || d.ORT.Version != "1.29.0" || len(d.GPUs) != 0 || d.NVMLError == "" || len(d.CUDALibs) != 12 {
		t.Errorf("doctor --json: %+v", d)
	}
	if bad := runCLI(t, time.Minute, nil, "doctor", "extra"); bad.Code != 2 || !strings.Contains(bad.Stderr, `unexpected argument "extra"`) {
		t.Errorf("doctor extra: %s", bad)
	}
}

// On a fake GPU host without cuDNN, doctor shows the GPU, each library
// found where it is, cuDNN missing, and that auto runs on the CPU naming
// libcudnn.so.9 and where it was looked for; with cuDNN added, everything
// loads and ONNX Runtime's (fake) CUDA provider is what fails.
func TestDoctorOnFakeGPUHost(t *testing.T) {
	libDir, ortLib := fakeGPUHost(t)
	r := runCLI(t, time.Minute, nil, "doctor", "--ort-lib", ortLib, "--cuda-lib-dir", libDir)
	if r.Code != 0 {
		t.Fatalf("featurefs doctor: %s", r)
	}
	out := r.Stdout
	for _, want := range []string{
		"CUDA: libonnxruntime_providers_cuda.so present",
		"GPUs (NVML)\n  driver 580.65.06, CUDA 13.0\n  cuda:0  Fake H100 80GB  80GiB total, 79GiB free, compute capability 9.0\n",
		"libcudart.so.13        " + filepath.Join(libDir, "libcudart.so.13") + "  (CUDA 13 runtime, needed)",
		"libnvidia-ml.so.1      " + filepath.Join(libDir, "libnvidia-ml.so.1"),
		"libcudnn.so.9          missing  (cuDNN 9, needed)",
		"  searched ",
		"    " + libDir + "\n",
		"--device auto\n  runs on the CPU: GPU unavailable: libcudnn.so.9 not found (looked in " + libDir + ", ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor output lacks %q:\n%s", want, out)
		}
	}

	buildSO(t, libDir, "libcudnn.so.9", "")
	j := runCLI(t, time.Minute, nil, "doctor", "--json", "--ort-lib", ortLib, "--cuda-lib-dir", libDir)
	var d doctorJSON
	if err := json.Unmarshal([]byte(j.Stdout), &d); err != nil || j.Code != 0 {
		t.Fatalf("doctor --json: %v\n%s", err, j)
	}
	if d.Auto != "cpu" || !strings.Contains(d.AutoWhy, "no usable CUDA provider on cuda:0") || !strings.Contains(d.AutoWhy, "libonnxruntime_providers_cuda.so") {
		t.Errorf("with every library there: auto %q, %q; want the CPU, the fake CUDA provider failing", d.Auto, d.AutoWhy)
	}
	if len(d.GPUs) != 1 || d.GPUs[0].Name != "Fake H100 80GB" || d.GPUs[0].TotalBytes != 80<<30 || d.Driver != "580.65.06" || d.CUDA != "13.0" {
		t.Errorf("GPUs %+v, driver %q, CUDA %q", d.GPUs, d.Driver, d.CUDA)
	}
	for _, l := range d.CUDALibs {
		if l.Name == "libcudnn.so.9" && l.Path != filepath.Join(libDir, "libcudnn.so.9") {
			t.Errorf("libcudnn.so.9 at %q", l.Path)
		}
	}
}

// On a fake host with three GPUs (FEATUREFS_FAKE_NVML_GPUS=3; cuda:2 has
// 512 MiB free) and every library there, doctor shows each GPU and why
// --device auto does not use it: the (fake) CUDA provider fails its probe
// on cuda:0 and cuda:1, cuda:2 is short of memory beside them. A real
// extract refuses a GPU named twice (usage, exit 2) and one the host lacks,
// naming the GPUs there are (exit 4).
func TestDoctorShowsEveryGPU(t *testing.T) {
	libDir, ortLib := fakeGPUHost(t)
	buildSO(t, libDir, "libcudnn.so.9", "")
	env := []string{"FEATUREFS_FAKE_NVML_GPUS=3"}
	j := runCLI(t, time.Minute, env, "doctor", "--json", "--ort-lib", ortLib, "--cuda-lib-dir", libDir)
	var d doctorJSON
	if err := json.Unmarshal([]byte(j.Stdout), &d); err != nil || j.Code != 0 {
		t.Fatalf("doctor --json: %v\n%s", err, j)
	}
	if len(d.GPUs) != 3 {
		t.Fatalf("doctor --json lists %d GPUs, want 3: %+v", len(d.GPUs), d.GPUs)
	}
	for i, want := range []struct {
		name, why string
		free      uint64
	}{
		{"Fake H100 80GB", "no usable CUDA provider on cuda:0", 79 << 30},
		{"Fake A100 40GB", "no usable CUDA provider on cuda:1", 30 << 30},
		{"Fake L4 24GB", "512 MiB free, under the 1024 MiB a GPU needs beside others", 512 << 20},
	} {
		g := d.GPUs[i]
		if g.Index != i || g.Name != want.name || g.FreeBytes != want.free || g.Used || !strings.Contains(g.NotUsed, want.why) {
			t.Errorf("GPU %d: %+v; want %s, %d bytes free, not used: %q", i, g, want.name, want.free, want.why)
		}
	}
	if d.Auto != "cpu" || !strings.Contains(d.AutoWhy, "no usable CUDA provider on cuda:0") {
		t.Errorf("auto %q, %q; want the CPU, the freest GPU's probe failing", d.Auto, d.AutoWhy)
	}

	r := runCLI(t, time.Minute, env, "doctor", "--ort-lib", ortLib, "--cuda-lib-dir", libDir)
	for _, want := range []string{
		"  cuda:0  Fake H100 80GB  80GiB total, 79GiB free, compute capability 9.0\n          not used: see --device auto below\n",
		"  cuda:1  Fake A100 40GB  40GiB total, 30GiB free, compute capability 8.0\n          not used: this ONNX Runtime has no usable CUDA provider on cuda:1 (",
		"  cuda:2  Fake L4 24GB  24GiB total, 512MiB free, compute capability 8.9\n          not used: 512 MiB free, under the 1024 MiB a GPU needs beside others\n",
	} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("doctor output lacks %q:\n%s", want, r.Stdout)
		}
	}

	model := testenv.OddModel(t, "tiny")
	img := filepath.Join(t.TempDir(), "a.jpg")
	writeJPEG(t, img, 64, 48, 1)
	extract := func(device string) cliResult {
		return runCLI(t, time.Minute, env, "extract", "--model", model, "--layer", "layer0", "--ort-lib", ortLib, "--cuda-lib-dir", libDir,
			"--device", device, "-o", filepath.Join(t.TempDir(), "out"), img)
	}
	if r := extract("cuda:1,0,1"); r.Code != 2 || !strings.Contains(r.Stderr, `--device "cuda:1,0,1": cuda:1 given twice`) {
		t.Errorf("--device cuda:1,0,1: %s; want exit 2 saying cuda:1 is given twice", r)
	}
	if r := extract("cuda:0,7"); r.Code != 4 || !strings.Contains(r.Stderr, "no cuda:7: the machine has 3 GPU(s): cuda:0 (Fake H100 80GB), cuda:1 (Fake A100 40GB), cuda:2 (Fake L4 24GB)") {
		t.Errorf("--device cuda:0,7: %s; want exit 4 naming the 3 GPUs", r)
	}
}

// A real featurefs process on the fake host without cuDNN: --device auto
// runs on the CPU after one line naming libcudnn.so.9; --device cuda fails
// with exit code 4 and that reason; --allow-cpu-fallback runs on the CPU
// with a warning saying it.
func TestGPUFallbackLineNamesMissingLibrary(t *testing.T) {
	libDir, ortLib := fakeGPUHost(t)
	model := testenv.OddModel(t, "tiny")
	img := filepath.Join(t.TempDir(), "a.jpg")
	writeJPEG(t, img, 64, 48, 1)
	args := func(out string, extra ...string) []string {
		return append([]string{"extract", "--model", model, "--layer", "layer0", "--ort-lib", ortLib, "--cuda-lib-dir", libDir,
			"-o", filepath.Join(t.TempDir(), out), img}, extra...)
	}
	r := runCLI(t, time.Minute, nil, args("auto", "--device", "auto", "--log-level", "info")...)
	if r.Code != 0 {
		t.Fatalf("--device auto: %s", r)
	}
	var gpuLines []string
	for _, l := range lines(r.Stderr) {
		if strings.Contains(l, "GPU") {
			gpuLines = append(gpuLines, l)
		}
	}
	want := "GPU unavailable: libcudnn.so.9 not found (looked in " + libDir + ", "
	if len(gpuLines) != 1 || !strings.Contains(gpuLines[0], want) || !strings.Contains(gpuLines[0], "; running on the CPU") {
		t.Errorf("--device auto: GPU lines %q, want one containing %q", gpuLines, want)
	}

	r = runCLI(t, time.Minute, nil, args("cuda", "--device", "cuda")...)
	if r.Code != 4 || len(lines(r.Stderr)) != 1 || !strings.Contains(r.Stderr, "--device cuda: no usable GPU: libcudnn.so.9 not found (looked in "+libDir) {
		t.Errorf("--device cuda: %s; want exit 4 and one line naming libcudnn.so.9", r)
	}
	r = runCLI(t, time.Minute, nil, args("fallback", "--device", "cuda:0", "--allow-cpu-fallback")...)
	if r.Code != 0 || !strings.Contains(r.Stderr, "warning: --device cuda:0: libcudnn.so.9 not found") {
		t.Errorf("--device cuda:0 --allow-cpu-fallback: %s", r)
	}
}

// make gpu-check on a machine where featurefs cannot use a GPU (here: an
// ONNX Runtime directory without the GPU providers, so that the test holds
// on a GPU host too) exits 1 with one line saying why, before doing
// anything else.
func TestGPUCheckWithoutGPU(t *testing.T) {
	ortDir := t.TempDir()
	ortLib := filepath.Join(ortDir, "libonnxruntime.so.1")
	copyFile(t, testenv.ORTLib(t), ortLib)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(testenv.RepoRoot(t), "scripts", "gpu-check.sh"))
	cmd.Env = append(cliEnv(t), "FEATUREFS_BIN="+featurefsBin(t), "FEATUREFS_ORT_LIB="+ortLib, "GPU_CHECK_REHEARSAL=0")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("gpu-check: %v, want exit 1\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	got := lines(stderr.String())
	if len(got) != 1 || !strings.HasPrefix(got[0], "gpu-check: no usable GPU: ") || !strings.HasSuffix(got[0], "(featurefs doctor says more)") {
		t.Errorf("gpu-check stderr %q, want one line \"gpu-check: no usable GPU: ...\"", got)
	}
	if stdout.Len() != 0 {
		t.Errorf("gpu-check printed a report without a GPU: %q", stdout.String())
	}
}

// make gpu-check's decode step (issue 38) rehearsed on the CPU
// (GPU_CHECK_REHEARSAL=1 GPU_CHECK_STEPS=decode: featurefs extract --decode
// cpu standing in for --decode gpu, torchvision on the CPU), so that the
// first GPU session's call runs it as it is here: the JPEG kinds are made
// (restart-marker files by scripts/jpeg_kinds.py's encoder, which its
// self-test checks), every layer's features are compared with torchvision's
// PIL pipeline and, CPU decode being bit-exact with PIL, hold the bar for
// --decode auto; the report says loudly that it is a rehearsal.
func TestGPUCheckDecodeRehearsal(t *testing.T) {
	repo := testenv.RepoRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	self := exec.CommandContext(ctx, "/usr/bin/python3", filepath.Join(repo, "scripts", "jpeg_kinds.py"), "--self-test")
	if out, err := self.CombinedOutput(); err != nil {
		t.Fatalf("jpeg_kinds.py --self-test: %v\n%s", err, out)
	}
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(repo, "scripts", "gpu-check.sh"))
	cmd.Env = append(cliEnv(t), "FEATUREFS_BIN="+featurefsBin(t), "GPU_CHECK_REHEARSAL=1", "GPU_CHECK_STEPS=decode",
		"GPU_CHECK_RESULTS=")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("gpu-check rehearsal of the decode step: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	report, log := stdout.String(), stderr.String()
	if !strings.Contains(log, "gpu-check: REHEARSAL (GPU_CHECK_REHEARSAL=1)") ||
		!strings.Contains(report, "**REHEARSAL ON A MACHINE WITHOUT A GPU (GPU_CHECK_REHEARSAL=1): NOT GPU FIGURES.**") {
		t.Errorf("the rehearsal does not say so:\nstdout:\n%s\nstderr:\n%s", report, log)
	}
	// the decode set: every kind, restart markers in the restart kind
	var set struct {
		Kinds          map[string]int `json:"kinds"`
		RestartMarkers int            `json:"restart_markers"`
	}
	for _, l := range lines(log) {
		if s, ok := strings.CutPrefix(l, "gpu-check: decode set: "); ok {
			if err := json.Unmarshal([]byte(s), &set); err != nil {
				t.Fatalf("decode set line %q: %v", l, err)
			}
		}
	}
	for _, k := range []string{"420", "422", "444", "gray", "restart", "progressive", "cmyk"} {
		if set.Kinds[k] == 0 {
			t.Errorf("decode set: no %s JPEG (kinds %v)", k, set.Kinds)
		}
	}
	if set.RestartMarkers == 0 {
		t.Errorf("decode set: the restart kind holds no RST marker")
	}
	// each layer compared on every image and holding the bar; every kind reported
	for _, l := range []string{"layer12", "layer18", "layer19"} {
		row := ""
		for _, r := range lines(report) {
			if strings.HasPrefix(r, "| "+l+" | ") {
				row = r
			}
		}
		if !strings.HasPrefix(row, "| "+l+" | 22 | 1.000000 | ") || !strings.HasSuffix(row, "| 0 | holds |") {
			t.Errorf("%s: row %q, want 22 images, mean cosine 1.000000, none missing, the bar held", l, row)
		}
	}
	for _, k := range []string{"| restart: ", "| progressive: ", "| cmyk: ", "| gray: ", "| 422: ", "| 444: ", "| 420: ", "| gen: ",
		"| restart | 3 | 0 | 0.00% |", "**Verdict for `--decode auto` on this GPU type: the bar holds",
		"### Decode throughput: not run (GPU_CHECK_STEPS)"} {
		if !strings.Contains(report, k) {
			t.Errorf("report lacks %q:\n%s", k, report)
		}
	}
	// the GPU/CPU decode counts, or the line saying no GPU decoder ran (a
	// rehearsal decodes with --decode cpu)
	if !strings.Contains(report, "Decoded on the GPU vs the CPU by the extractor: **no count of images decoded on the GPU: no GPU decoder ran") &&
		!strings.Contains(report, "Decoded on the GPU vs the CPU by the extractor (from its logs): ") {
		t.Errorf("report has neither the decode counts nor their TODO line:\n%s", report)
	}
}
