package extractor

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fakeTree makes files (paths relative to root, "/"-separated) under root;
// a path ending in "/" is a directory.
func fakeTree(t *testing.T, root string, paths ...string) {
	t.Helper()
	for _, p := range paths {
		full := filepath.Join(root, filepath.FromSlash(p))
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte("fake "+p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// gpuHost is a fake GPU host: the driver in the loader's paths (through
// ld.so.conf.d), CUDA 12.9 and 13.0 toolkits, and a virtualenv on PATH whose
// PyTorch CUDA wheels hold CUDA 13 (nvidia/cu13/lib) and cuDNN
// (nvidia/cudnn/lib), as pip installs them.
func gpuHost(t *testing.T) (root string, env map[string]string) {
	root = t.TempDir()
	sp := "home/u/venv/lib/python3.12/site-packages"
	fakeTree(t, root,
		"etc/ld.so.conf",
		"etc/ld.so.conf.d/nvidia.conf",
		"usr/lib/nvidia/libcuda.so.1",
		"usr/lib/nvidia/libnvidia-ml.so.1",
		"usr/local/cuda-12.9/lib64/libcudart.so.12",
		"usr/local/cuda-12.9/lib64/libcudnn.so.9",
		"usr/local/cuda-13.0/lib64/libnvrtc.so.13",
		"home/u/venv/bin/python3.12",
		sp+"/nvidia/cu13/lib/libcudart.so.13",
		sp+"/nvidia/cu13/lib/libcublas.so.13",
		sp+"/nvidia/cu13/lib/libcublasLt.so.13",
		sp+"/nvidia/cu13/lib/libcurand.so.10",
		sp+"/nvidia/cu13/lib/libcufft.so.12",
		sp+"/nvidia/cudnn/lib/libcudnn.so.9",
		sp+"/nvidia/cudnn/lib/libcudnn_graph.so.9",
		sp+"/nvidia/cudnn/lib/libcudnn_cnn.so.9",
		"usr/lib/x86_64-linux-gnu/",
	)
	write := func(p, s string) {
		if err := os.WriteFile(filepath.Join(root, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("etc/ld.so.conf", "# comment\ninclude /etc/ld.so.conf.d/*.conf\n")
	write("etc/ld.so.conf.d/nvidia.conf", "/usr/lib/nvidia # the driver\n")
	return root, map[string]string{"PATH": "/home/u/venv/bin:/usr/bin", "HOME": "/home/u"}
}

func (s cudaSearch) withEnv(env map[string]string) cudaSearch {
	s.env = func(k string) string { return env[k] }
	return s
}

func TestCUDALibsFoundWithoutLDLibraryPath(t *testing.T) {
	root, env := gpuHost(t)
	sp := "/home/u/venv/lib/python3.12/site-packages"
	r := cudaSearch{root: root}.withEnv(env).find()
	want := map[string]string{
		"libnvidia-ml.so.1":     "/usr/lib/nvidia/libnvidia-ml.so.1",
		"libcuda.so.1":          "/usr/lib/nvidia/libcuda.so.1",
		"libcudart.so.13":       sp + "/nvidia/cu13/lib/libcudart.so.13", // not cuda-12.9's .so.12
		"libcublasLt.so.13":     sp + "/nvidia/cu13/lib/libcublasLt.so.13",
		"libcublas.so.13":       sp + "/nvidia/cu13/lib/libcublas.so.13",
		"libcurand.so.10":       sp + "/nvidia/cu13/lib/libcurand.so.10",
		"libcufft.so.12":        sp + "/nvidia/cu13/lib/libcufft.so.12",
		"libnvrtc.so.13":        "/usr/local/cuda-13.0/lib64/libnvrtc.so.13",
		"libnvjpeg.so.13":       "",                                         // optional (--decode gpu): not in this tree
		"libcudnn.so.9":         "/usr/local/cuda-12.9/lib64/libcudnn.so.9", // /usr/local/cuda* comes before Python environments
		"libnvinfer.so.10":      "",
		"libnvonnxparser.so.10": "",
	}
	for _, l := range r.libs {
		if got := l.Path; got != want[l.Name] {
			t.Errorf("%s: found at %q, want %q", l.Name, got, want[l.Name])
		}
	}
	if len(r.libs) != len(want) {
		t.Errorf("%d libraries reported, want %d", len(r.libs), len(want))
	}
	if m := r.missing(false); m != "" {
		t.Errorf("missing(false) = %q with every CUDA library there", m)
	}
	if m := r.missing(true); m != "libnvinfer.so.10" {
		t.Errorf("missing(true) = %q, want libnvinfer.so.10", m)
	}
	// The order: the loader's configuration, then CUDA toolkits newest
	// first, then site-packages.
	idx := func(d string) int { return slices.Index(r.dirs, d) }
	if !(idx("/usr/lib/nvidia") >= 0 && idx("/usr/lib/nvidia") < idx("/usr/local/cuda-13.0/lib64") &&
		idx("/usr/local/cuda-13.0/lib64") < idx("/usr/local/cuda-12.9/lib64") &&
		idx("/usr/local/cuda-12.9/lib64") < idx(sp+"/nvidia/cu13/lib")) {
		t.Errorf("search order %q", r.dirs)
	}

	// --cuda-lib-dir comes first, then LD_LIBRARY_PATH: the user's cuDNN
	// wins over the toolkit's, and the wheels' over it when named.
	fakeTree(t, root, "opt/mycudnn/libcudnn.so.9", "opt/mycudnn/libcudnn_ops.so.9")
	env["LD_LIBRARY_PATH"] = sp + "/nvidia/cudnn/lib"
	r = cudaSearch{root: root}.withEnv(env).find()
	if got := r.path("libcudnn.so.9"); got != sp+"/nvidia/cudnn/lib/libcudnn.so.9" {
		t.Errorf("with LD_LIBRARY_PATH: libcudnn.so.9 at %q", got)
	}
	if !slices.Equal(r.cudnnSubs, []string{sp + "/nvidia/cudnn/lib/libcudnn_graph.so.9", sp + "/nvidia/cudnn/lib/libcudnn_cnn.so.9"}) {
		t.Errorf("cuDNN sub-libraries %q, want graph and cnn from the wheel", r.cudnnSubs)
	}
	r = cudaSearch{root: root, extra: []string{"/opt/mycudnn"}}.withEnv(env).find()
	if got := r.path("libcudnn.so.9"); got != "/opt/mycudnn/libcudnn.so.9" || r.dirs[0] != "/opt/mycudnn" {
		t.Errorf("with --cuda-lib-dir: libcudnn.so.9 at %q, dirs %q", got, r.dirs)
	}
	if !slices.Equal(r.cudnnSubs, []string{"/opt/mycudnn/libcudnn_ops.so.9"}) {
		t.Errorf("cuDNN sub-libraries %q, want those next to the libcudnn.so.9 found", r.cudnnSubs)
	}
}

func TestDefaultCUDASearchReadsFlagAndEnvironment(t *testing.T) {
	t.Setenv("FEATUREFS_CUDA_LIB_DIR", "/c:/d")
	s := defaultCUDASearch("/a: /b ")
	if !slices.Equal(s.extra, []string{"/a", "/b", "/c", "/d"}) {
		t.Errorf("extra dirs %q: want the flag's, then FEATUREFS_CUDA_LIB_DIR's", s.extra)
	}
}

// Every Python environment place is searched, boundedly: conda envs,
// ~/.virtualenvs, ~/.local, Debian's dist-packages; no more than
// maxSitePackages.
func TestSitePackagesBounded(t *testing.T) {
	root := t.TempDir()
	paths := []string{
		"opt/conda/lib/python3.11/site-packages/",
		"opt/conda/envs/torch/lib/python3.12/site-packages/",
		"home/u/.local/lib/python3.12/site-packages/",
		"usr/lib/python3/dist-packages/",
		"usr/local/lib/python3.11/dist-packages/",
		"usr/bin/python3",
	}
	for i := range maxSitePackages + 10 {
		paths = append(paths, fmt.Sprintf("home/u/.virtualenvs/e%03d/lib/python3.12/site-packages/", i))
	}
	fakeTree(t, root, paths...)
	s := cudaSearch{root: root}.withEnv(map[string]string{"PATH": "/usr/bin", "HOME": "/home/u"})
	sps := s.sitePackages()
	if len(sps) != maxSitePackages {
		t.Errorf("%d site-packages directories, want the bound %d", len(sps), maxSitePackages)
	}
	for _, want := range []string{"/usr/lib/python3/dist-packages", "/home/u/.local/lib/python3.12/site-packages"} {
		if !slices.Contains(sps, want) {
			t.Errorf("%s not searched: %q", want, sps[:5])
		}
	}
	few := cudaSearch{root: root}.withEnv(map[string]string{"PATH": "/usr/bin"}).sitePackages()
	for _, want := range []string{"/opt/conda/lib/python3.11/site-packages", "/opt/conda/envs/torch/lib/python3.12/site-packages", "/usr/local/lib/python3.11/dist-packages"} {
		if !slices.Contains(few, want) {
			t.Errorf("%s not searched: %q", want, few)
		}
	}
}

// The loader's configuration: comments, includes with globs (relative to
// the including file too), nested includes, no include loop.
func TestLDConfDirs(t *testing.T) {
	root := t.TempDir()
	fakeTree(t, root, "etc/ld.so.conf", "etc/ld.so.conf.d/a.conf", "etc/ld.so.conf.d/b.conf", "etc/more/c.conf", "etc/loop.conf")
	files := map[string]string{
		"etc/ld.so.conf":          "include /etc/ld.so.conf.d/*.conf\n/usr/local/lib\n",
		"etc/ld.so.conf.d/a.conf": "/opt/a/lib # trailing comment\n\n",
		"etc/ld.so.conf.d/b.conf": "include ../more/*.conf\n",
		"etc/more/c.conf":         "/opt/c/lib\ninclude /etc/loop.conf\n",
		"etc/loop.conf":           "include /etc/ld.so.conf\n",
	}
	for p, c := range files {
		if err := os.WriteFile(filepath.Join(root, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := cudaSearch{root: root}.ldConfDirs("/etc/ld.so.conf", 0)
	if len(got) < 3 || got[0] != "/opt/a/lib" || got[1] != "/opt/c/lib" || !slices.Contains(got, "/usr/local/lib") {
		t.Errorf("ld.so.conf directories %q", got)
	}
}

// A missing library is named in one line with where it was looked for.
func TestMissingCUDALibraryNamedWithDirs(t *testing.T) {
	root, env := gpuHost(t)
	sp := "/home/u/venv/lib/python3.12/site-packages"
	for _, p := range []string{"usr/local/cuda-12.9/lib64/libcudnn.so.9", sp[1:] + "/nvidia/cudnn/lib/libcudnn.so.9"} {
		if err := os.Remove(filepath.Join(root, p)); err != nil {
			t.Fatal(err)
		}
	}
	s := cudaSearch{root: root, extra: []string{"/nonexistent"}}.withEnv(env)
	var opened []string
	_, err := loadCUDALibs(s, false, func(p string) error { opened = append(opened, p); return nil })
	if err == nil {
		t.Fatal("loadCUDALibs succeeded without libcudnn.so.9")
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "libcudnn.so.9 not found (looked in /usr/lib/nvidia, ") || strings.Contains(msg, "\n") ||
		!strings.Contains(msg, sp+"/nvidia/cudnn/lib") || !strings.Contains(msg, "--cuda-lib-dir") {
		t.Errorf("error %q: want one line naming libcudnn.so.9 and the directories searched", msg)
	}
	if strings.Contains(msg, "/nonexistent") {
		t.Errorf("error %q lists a directory that does not exist", msg)
	}
	if len(opened) != 0 {
		t.Errorf("loaded %q although a required library is missing", opened)
	}

	// The same line through the device choice: auto says it in one INFO
	// line and runs on the CPU; cuda fails naming it.
	gpus := func() ([]gpuInfo, error) { return []gpuInfo{{Index: 0, Name: "fake", Free: 8 << 30}}, nil }
	probed := false
	env2 := gpuEnv{list: gpus, libs: func(trt bool) (string, error) { return loadCUDALibs(s, trt, func(string) error { return nil }) },
		probe: func(int, bool, Precision) error { probed = true; return nil }}
	h := &recordHandler{}
	d, _, err := chooseDevice("auto", false, false, FP32, env2, slog.New(h))
	lines := h.lines(slog.LevelInfo)
	if err != nil || d.gpu() || len(lines) != 1 || !strings.HasPrefix(lines[0], "GPU unavailable: libcudnn.so.9 not found (looked in /usr/lib/nvidia, ") ||
		!strings.Contains(lines[0], "; running on the CPU device=auto") {
		t.Errorf("auto: %v %v, log %q; want the CPU and one line \"GPU unavailable: libcudnn.so.9 not found (looked in ...); running on the CPU\"", d, err, lines)
	}
	_, _, err = chooseDevice("cuda", false, false, FP32, env2, slog.New(&recordHandler{}))
	if !errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), "libcudnn.so.9 not found (looked in ") {
		t.Errorf("cuda: %v, want ErrNoDevice naming libcudnn.so.9", err)
	}
	if probed {
		t.Error("the probe session ran although a CUDA library is missing")
	}
}

// Libraries load in dependency order (cuBLASLt before cuBLAS, cuDNN and its
// sub-libraries last), each once per process; optional ones that fail to
// load are skipped, required ones fail with the loader's reason; TensorRT's
// are loaded only when asked and, when missing, leave CUDA usable.
func TestLoadCUDALibsOrderOnceAndTensorRT(t *testing.T) {
	root, env := gpuHost(t)
	fakeTree(t, root, "usr/local/cuda-12.9/lib64/libcudnn_ops.so.9") // next to the libcudnn.so.9 found
	s := cudaSearch{root: root}.withEnv(env)
	forgetCUDALoads(t)

	// A required library the loader refuses: the reason, nothing recorded
	// past it.
	_, err := loadCUDALibs(s, false, func(p string) error {
		if strings.HasSuffix(p, "libcublas.so.13") {
			return errors.New("libcublasLt.so.13: cannot open shared object file")
		}
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "cannot load /home/u/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcublas.so.13: libcublasLt.so.13: cannot open") {
		t.Errorf("cuBLAS failing to load: %v", err)
	}

	var opened []string
	open := func(p string) error {
		opened = append(opened, filepath.Base(p))
		if strings.HasSuffix(p, "libnvrtc.so.13") {
			return errors.New("optional and broken")
		}
		return nil
	}
	trt, err := loadCUDALibs(s, true, open)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(trt, "libnvinfer.so.10 not found (looked in ") {
		t.Errorf("TensorRT missing: %q, want the libnvinfer.so.10 line", trt)
	}
	// libcuda and cuBLASLt were loaded by the failed call already: only the
	// rest now, each once.
	want := []string{"libcublas.so.13", "libcurand.so.10", "libcufft.so.12", "libnvrtc.so.13", "libcudnn.so.9", "libcudnn_ops.so.9"}
	if !slices.Equal(opened, want) {
		t.Errorf("loaded %q, want %q", opened, want)
	}
	all := []string{"libcuda.so.1", "libcudart.so.13", "libcublasLt.so.13", "libcublas.so.13", "libcurand.so.10", "libcufft.so.12", "libcudnn.so.9"}
	for _, n := range all {
		if _, ok := cudaLoad.loaded[n]; !ok {
			t.Errorf("%s not recorded as loaded", n)
		}
	}
	if _, ok := cudaLoad.loaded["libnvidia-ml.so.1"]; ok {
		t.Error("NVML loaded here; go-nvml loads it")
	}
	opened = nil
	if _, err := loadCUDALibs(s, false, open); err != nil || !slices.Equal(opened, []string{"libnvrtc.so.13"}) {
		t.Errorf("second load: %v, opened %q; want only the optional library that failed before", err, opened)
	}

	// TensorRT present: its libraries load after CUDA's.
	fakeTree(t, root, "home/u/venv/lib/python3.12/site-packages/tensorrt_libs/libnvinfer.so.10",
		"home/u/venv/lib/python3.12/site-packages/tensorrt_libs/libnvonnxparser.so.10")
	opened = nil
	trt, err = loadCUDALibs(s, true, open)
	if err != nil || trt != "" || !slices.Equal(opened, []string{"libnvrtc.so.13", "libnvinfer.so.10", "libnvonnxparser.so.10"}) {
		t.Errorf("with TensorRT: %v, %q, opened %q", err, trt, opened)
	}
}

// TensorRT asked for on a usable GPU without TensorRT runs on CUDA, saying
// so in one WARN line; it is not a CPU fallback.
func TestTensorRTFallsBackToCUDA(t *testing.T) {
	gpus := func() ([]gpuInfo, error) { return []gpuInfo{{Index: 0, Name: "fake", Free: 8 << 30}}, nil }
	var probes []bool
	probe := func(_ int, trt bool, _ Precision) error { probes = append(probes, trt); return nil }
	env := gpuEnv{list: gpus, probe: probe,
		libs: func(bool) (string, error) { return "libnvinfer.so.10 not found (looked in /x)", nil }}
	h := &recordHandler{}
	d, note, err := chooseDevice("cuda", true, false, FP32, env, slog.New(h))
	warn := h.lines(slog.LevelWarn)
	if err != nil || !d.gpu() || d.devs[0].tensorRT || note != "" || len(warn) != 1 ||
		!strings.HasPrefix(warn[0], "TensorRT unavailable: libnvinfer.so.10 not found (looked in /x); running on CUDA") {
		t.Errorf("chose %+v, note %q, err %v, warnings %q; want CUDA with one WARN line naming libnvinfer.so.10", d, note, err, warn)
	}
	if !slices.Equal(probes, []bool{false}) {
		t.Errorf("probes %v, want one CUDA probe", probes)
	}
	h = &recordHandler{}
	if _, _, err := chooseDevice("cuda", true, false, FP16, env, slog.New(h)); err != nil ||
		len(h.lines(slog.LevelWarn)) != 1 || !strings.Contains(h.lines(slog.LevelWarn)[0], "running on CUDA in fp32 (--precision fp16 needs TensorRT)") {
		t.Errorf("fp16 without TensorRT: %v, warnings %q; want CUDA in fp32 said in the line", err, h.lines(slog.LevelWarn))
	}

	// TensorRT's libraries there but its provider failing: CUDA, one line.
	probes = nil
	env.libs = func(bool) (string, error) { return "", nil }
	env.probe = func(i int, trt bool, p Precision) error {
		probes = append(probes, trt)
		if trt {
			return errors.New("tensorrt provider: bad engine")
		}
		return nil
	}
	h = &recordHandler{}
	d, _, err = chooseDevice("auto", true, false, FP32, env, slog.New(h))
	warn = h.lines(slog.LevelWarn)
	if err != nil || !d.gpu() || d.devs[0].tensorRT || len(warn) != 1 || !strings.Contains(warn[0], "bad engine; running on CUDA") ||
		!slices.Equal(probes, []bool{true, false}) {
		t.Errorf("TensorRT provider failing: %+v %v, warnings %q, probes %v", d, err, warn, probes)
	}
}

func TestVersionOrder(t *testing.T) {
	got := []string{"/usr/local/cuda-12.9", "/usr/local/cuda-13.0", "/usr/local/cuda-12.10", "/usr/local/cuda-9.2"}
	slices.SortFunc(got, func(a, b string) int {
		v := versionOrder{a, b}
		switch {
		case v.Less(0, 1):
			return -1
		case v.Less(1, 0):
			return 1
		}
		return 0
	})
	want := []string{"/usr/local/cuda-9.2", "/usr/local/cuda-12.9", "/usr/local/cuda-12.10", "/usr/local/cuda-13.0"}
	if !slices.Equal(got, want) {
		t.Errorf("%q, want %q", got, want)
	}
}

// nvJPEG is found where PyTorch's CUDA 13 wheels keep it (nvidia/cu13/lib),
// in a CUDA toolkit, or in --cuda-lib-dir, first; missing, it is named in
// one line with where it was looked for, and so is the CUDA runtime it
// needs. loadCUDALibs does not load it (nvjpeg.go does, for --decode gpu).
func TestFindNVJPEG(t *testing.T) {
	root, env := gpuHost(t)
	sp := "/home/u/venv/lib/python3.12/site-packages"
	s := cudaSearch{root: root}.withEnv(env)
	nv, rt, missing := findNVJPEG(s)
	if nv != "" || rt != sp+"/nvidia/cu13/lib/libcudart.so.13" || !strings.HasPrefix(missing, "libnvjpeg.so.13 not found (looked in /usr/lib/nvidia, ") ||
		!strings.Contains(missing, sp+"/nvidia/cu13/lib") || !strings.Contains(missing, "--cuda-lib-dir") || strings.Contains(missing, "\n") {
		t.Errorf("without nvJPEG: %q %q, missing %q", nv, rt, missing)
	}

	fakeTree(t, root, sp[1:]+"/nvidia/cu13/lib/libnvjpeg.so.13")
	nv, rt, missing = findNVJPEG(s)
	if nv != sp+"/nvidia/cu13/lib/libnvjpeg.so.13" || rt != sp+"/nvidia/cu13/lib/libcudart.so.13" || missing != "" {
		t.Errorf("from the wheel: %q %q, missing %q", nv, rt, missing)
	}
	fakeTree(t, root, "usr/local/cuda-13.0/lib64/libnvjpeg.so.13", "opt/mine/libnvjpeg.so.13")
	if nv, _, _ = findNVJPEG(s); nv != "/usr/local/cuda-13.0/lib64/libnvjpeg.so.13" {
		t.Errorf("with a CUDA 13 toolkit: %q, want the toolkit's (it comes before Python environments)", nv)
	}
	if nv, _, _ = findNVJPEG(cudaSearch{root: root, extra: []string{"/opt/mine"}}.withEnv(env)); nv != "/opt/mine/libnvjpeg.so.13" {
		t.Errorf("with --cuda-lib-dir: %q", nv)
	}

	// The runtime missing: named.
	if err := os.Remove(filepath.Join(root, sp[1:]+"/nvidia/cu13/lib/libcudart.so.13")); err != nil {
		t.Fatal(err)
	}
	if _, rt, missing = findNVJPEG(s); rt != "" || !strings.HasPrefix(missing, "libcudart.so.13 not found (looked in ") {
		t.Errorf("without the CUDA runtime: %q, missing %q", rt, missing)
	}

	// Found, but not loaded with the CUDA provider's libraries.
	fakeTree(t, root, sp[1:]+"/nvidia/cu13/lib/libcudart.so.13")
	forgetCUDALoads(t)
	var opened []string
	if _, err := loadCUDALibs(s, false, func(p string) error { opened = append(opened, filepath.Base(p)); return nil }); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(opened, "libnvjpeg.so.13") || !slices.Contains(opened, "libcudart.so.13") {
		t.Errorf("loadCUDALibs opened %q: want the runtime, not nvJPEG", opened)
	}
}

// forgetCUDALoads empties the record of the CUDA libraries loaded for the
// test, and puts it back when the test ends.
func forgetCUDALoads(t *testing.T) {
	cudaLoad.mu.Lock()
	saved := cudaLoad.loaded
	cudaLoad.loaded = map[string]string{}
	cudaLoad.mu.Unlock()
	t.Cleanup(func() {
		cudaLoad.mu.Lock()
		cudaLoad.loaded = saved
		cudaLoad.mu.Unlock()
	})
}
