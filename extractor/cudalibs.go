package extractor

// CUDA libraries without LD_LIBRARY_PATH. ONNX Runtime's CUDA provider
// (libonnxruntime_providers_cuda.so, built for CUDA 13 and cuDNN 9) needs
// the CUDA runtime, cuBLAS, cuRAND and cuDNN at run time; GPU hosts keep
// them in different places: the loader's paths, /usr/local/cuda*/lib64, and
// the nvidia/*/lib folders of Python environments (PyTorch's CUDA wheels:
// nvidia/cu13/lib, nvidia/cudnn/lib, ...). findCUDALibs looks in all of
// them (plus --cuda-lib-dir / FEATUREFS_CUDA_LIB_DIR, first), and
// loadCUDALibs dlopens what it found, RTLD_GLOBAL, before the provider is
// appended: the provider's own dependencies and dlopen calls by soname then
// find them loaded. Every search is bounded: a fixed list of places, globs
// one or two levels deep, at most maxSitePackages Python environments.

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
)

// cudaLib is one library the GPU path needs.
type cudaLib struct {
	// soname is the file name looked for, e.g. libcudnn.so.9.
	soname string
	// required: without it the CUDA provider cannot run. Optional ones are
	// loaded when found (cuDNN's runtime-compiled engines need nvrtc; FFT
	// operators need cuFFT).
	required bool
	// tensorRT: needed only for the TensorRT provider.
	tensorRT bool
	// noLoad: found but not loaded here (NVML: go-nvml loads it by path;
	// nvJPEG: nvjpeg.go loads it by path, for --decode gpu only).
	noLoad bool
	// what the library is, for doctor.
	what string
}

// cudaLibs are the libraries, in load order (a library after those it
// links against: cuBLAS after cuBLASLt; cuDNN last).
var cudaLibs = []cudaLib{
	{soname: nvmlSoname, required: true, noLoad: true, what: "NVML, from the NVIDIA driver (lists the GPUs)"},
	{soname: "libcuda.so.1", required: true, what: "CUDA driver"},
	{soname: cudartSoname, required: true, what: "CUDA 13 runtime"},
	{soname: "libcublasLt.so.13", required: true, what: "cuBLASLt"},
	{soname: "libcublas.so.13", required: true, what: "cuBLAS"},
	{soname: "libcurand.so.10", required: true, what: "cuRAND"},
	{soname: "libcufft.so.12", what: "cuFFT (FFT operators only)"},
	{soname: "libnvrtc.so.13", what: "NVRTC (cuDNN runtime-compiled engines)"},
	{soname: nvjpegSoname, noLoad: true, what: "nvJPEG (--decode gpu)"},
	{soname: "libcudnn.so.9", required: true, what: "cuDNN 9"},
	{soname: "libnvinfer.so.10", tensorRT: true, what: "TensorRT 10"},
	{soname: "libnvonnxparser.so.10", tensorRT: true, what: "TensorRT ONNX parser"},
}

// nvmlSoname is the NVIDIA driver's management library.
const nvmlSoname = "libnvidia-ml.so.1"

// nvjpegSoname and cudartSoname are the libraries --decode gpu loads
// (nvjpeg.go). PyTorch's CUDA 13 wheels keep both in nvidia/cu13/lib.
const (
	nvjpegSoname = "libnvjpeg.so.13"
	cudartSoname = "libcudart.so.13"
)

// cudnnSubLibs are cuDNN 9's sub-libraries, which libcudnn.so.9 dlopens by
// name on first use. Those next to the libcudnn.so.9 found are loaded with
// it, so that a cuDNN outside the loader's paths works too.
var cudnnSubLibs = []string{
	"libcudnn_graph.so.9",
	"libcudnn_engines_precompiled.so.9",
	"libcudnn_engines_runtime_compiled.so.9",
	"libcudnn_heuristic.so.9",
	"libcudnn_ops.so.9",
	"libcudnn_cnn.so.9",
	"libcudnn_adv.so.9",
}

// maxSitePackages bounds the Python environments searched.
const maxSitePackages = 64

// cudaSearch is where findCUDALibs looks. root prefixes every absolute
// path ("" on a real system; tests use a fake tree).
type cudaSearch struct {
	root string
	// extra are --cuda-lib-dir / FEATUREFS_CUDA_LIB_DIR directories,
	// searched first.
	extra []string
	// env reads the environment (LD_LIBRARY_PATH, PATH, HOME,
	// VIRTUAL_ENV, CONDA_PREFIX).
	env func(string) string
}

// defaultCUDASearch is the search of this process: extra directories from
// dirs (colon-separated lists) and FEATUREFS_CUDA_LIB_DIR.
func defaultCUDASearch(dirs string) cudaSearch {
	var extra []string
	for _, list := range []string{dirs, os.Getenv("FEATUREFS_CUDA_LIB_DIR")} {
		for d := range strings.SplitSeq(list, ":") {
			if d = strings.TrimSpace(d); d != "" {
				extra = append(extra, d)
			}
		}
	}
	return cudaSearch{extra: extra, env: os.Getenv}
}

// dirs returns the directories to search, in order, without duplicates:
// the extra ones; LD_LIBRARY_PATH; the loader's configuration
// (/etc/ld.so.conf and what it includes) and default directories;
// /usr/local/cuda*/lib64 (newest first); driver directories of containers
// and WSL; then the nvidia/*/lib, tensorrt_libs and torch/lib folders of
// Python environments' site-packages.
func (s cudaSearch) dirs() []string {
	var out []string
	seen := map[string]bool{}
	add := func(d string) {
		if d == "" || !filepath.IsAbs(d) {
			return
		}
		d = filepath.Clean(d)
		st, err := os.Stat(s.path(d))
		if err != nil || !st.IsDir() {
			return
		}
		// /lib is /usr/lib on merged-/usr systems: one search each.
		key := d
		if real, err := filepath.EvalSymlinks(s.path(d)); err == nil {
			key = real
		}
		if seen[key] {
			return
		}
		seen[key] = true
		out = append(out, d)
	}
	for _, d := range s.extra {
		add(d)
	}
	for d := range strings.SplitSeq(s.getenv("LD_LIBRARY_PATH"), ":") {
		add(d)
	}
	for _, d := range s.ldConfDirs("/etc/ld.so.conf", 0) {
		add(d)
	}
	for _, d := range []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"} {
		add(d)
	}
	cudas := s.glob("/usr/local/cuda-*")
	sort.Sort(sort.Reverse(versionOrder(cudas)))
	for _, c := range append([]string{"/usr/local/cuda"}, cudas...) {
		add(c + "/lib64")
		add(c + "/targets/x86_64-linux/lib")
	}
	for _, d := range []string{"/usr/local/nvidia/lib64", "/usr/local/nvidia/lib", "/usr/lib/wsl/lib"} {
		add(d)
	}
	for _, sp := range s.sitePackages() {
		for _, d := range s.glob(sp + "/nvidia/*/lib") {
			add(d)
		}
		add(sp + "/tensorrt_libs")
		add(sp + "/torch/lib")
	}
	return out
}

func (s cudaSearch) getenv(k string) string {
	if s.env == nil {
		return ""
	}
	return s.env(k)
}

// path maps an absolute path of the searched system to this process's view.
func (s cudaSearch) path(p string) string {
	if s.root == "" {
		return p
	}
	return filepath.Join(s.root, p)
}

// glob is filepath.Glob on the searched system, returning its paths.
func (s cudaSearch) glob(pattern string) []string {
	m, _ := filepath.Glob(s.path(pattern))
	out := make([]string, 0, len(m))
	for _, p := range m {
		if s.root != "" {
			p = "/" + strings.TrimPrefix(strings.TrimPrefix(p, s.root), "/")
		}
		out = append(out, p)
	}
	return out
}

// ldConfDirs reads an ld.so.conf file: one directory per line, comments,
// and include lines with globs (at most 4 levels of includes).
func (s cudaSearch) ldConfDirs(file string, depth int) []string {
	if depth > 4 {
		return nil
	}
	b, err := os.ReadFile(s.path(file))
	if err != nil {
		return nil
	}
	var out []string
	for line := range strings.SplitSeq(string(b), "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(line, "include"); ok && (rest == "" || rest[0] == ' ' || rest[0] == '\t') {
			pat := strings.TrimSpace(rest)
			if !filepath.IsAbs(pat) {
				pat = filepath.Join(filepath.Dir(file), pat)
			}
			inc := s.glob(pat)
			sort.Strings(inc)
			for _, f := range inc {
				out = append(out, s.ldConfDirs(f, depth+1)...)
			}
			continue
		}
		if line != "" {
			out = append(out, line)
		}
	}
	return out
}

// sitePackages returns the site-packages (and Debian dist-packages)
// directories of the Python environments this host is likely to use, at
// most maxSitePackages: those of the pythons on PATH (derived from the
// prefix of their bin directory, without running them), VIRTUAL_ENV and
// CONDA_PREFIX, the user's ~/.local, the system's /usr/lib/python3*,
// /usr/local/lib/python3*, and common environment places (~/.venv,
// ~/venv, ~/.virtualenvs/*, conda installations and their envs).
func (s cudaSearch) sitePackages() []string {
	var prefixes []string
	for d := range strings.SplitSeq(s.getenv("PATH"), ":") {
		if !filepath.IsAbs(d) || filepath.Base(d) != "bin" {
			continue
		}
		if len(s.glob(d+"/python3*")) > 0 {
			prefixes = append(prefixes, filepath.Dir(d))
		}
	}
	for _, k := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
		prefixes = append(prefixes, s.getenv(k))
	}
	home := s.getenv("HOME")
	if home != "" {
		prefixes = append(prefixes, home+"/.local", home+"/.venv", home+"/venv")
		prefixes = append(prefixes, s.glob(home+"/.virtualenvs/*")...)
	}
	var condas []string
	for _, c := range []string{"/opt/conda", "/opt/miniconda3", "/opt/anaconda3"} {
		condas = append(condas, c)
	}
	if home != "" {
		for _, c := range []string{"miniconda3", "anaconda3", "miniforge3", "mambaforge"} {
			condas = append(condas, home+"/"+c)
		}
	}
	for _, c := range condas {
		prefixes = append(prefixes, c)
		prefixes = append(prefixes, s.glob(c+"/envs/*")...)
	}
	prefixes = append(prefixes, "/usr", "/usr/local")

	var out []string
	seen := map[string]bool{}
	for _, p := range prefixes {
		if p == "" || !filepath.IsAbs(p) {
			continue
		}
		var cands []string
		for _, pat := range []string{"/lib/python3*/site-packages", "/lib/python3*/dist-packages", "/lib/python3/dist-packages", "/local/lib/python3*/dist-packages"} {
			cands = append(cands, s.glob(p+pat)...)
		}
		sort.Sort(sort.Reverse(versionOrder(cands)))
		for _, c := range cands {
			if seen[c] {
				continue
			}
			seen[c] = true
			out = append(out, c)
			if len(out) >= maxSitePackages {
				return out
			}
		}
	}
	return out
}

// versionOrder sorts paths by the numbers in them (cuda-12.9 < cuda-13.0,
// python3.9 < python3.12), then by name.
type versionOrder []string

func (v versionOrder) Len() int      { return len(v) }
func (v versionOrder) Swap(i, j int) { v[i], v[j] = v[j], v[i] }
func (v versionOrder) Less(i, j int) bool {
	a, b := numbers(v[i]), numbers(v[j])
	if c := slices.Compare(a, b); c != 0 {
		return c < 0
	}
	return v[i] < v[j]
}

// numbers returns the decimal numbers in s, in order.
func numbers(s string) []int {
	var out []int
	n, in := 0, false
	for _, r := range s {
		if r >= '0' && r <= '9' {
			n, in = n*10+int(r-'0'), true
			continue
		}
		if in {
			out = append(out, n)
		}
		n, in = 0, false
	}
	if in {
		out = append(out, n)
	}
	return out
}

// CUDALibStatus is one library as findCUDALibs found it.
type CUDALibStatus struct {
	// Name is the file name looked for, e.g. libcudnn.so.9.
	Name string `json:"name"`
	// What says what it is, e.g. "cuDNN 9".
	What string `json:"what"`
	// Required: the CUDA provider cannot run without it.
	Required bool `json:"required"`
	// TensorRT: needed only for --tensorrt.
	TensorRT bool `json:"tensorrt"`
	// Path is where it was found; empty when missing.
	Path string `json:"path"`
}

// cudaLibReport is the outcome of a search.
type cudaLibReport struct {
	libs []CUDALibStatus
	dirs []string // the directories searched, in order
	// cudnnSubs are the cuDNN sub-libraries next to libcudnn.so.9.
	cudnnSubs []string
}

// find looks for every library in s's directories: the first directory
// holding a file of that name wins.
func (s cudaSearch) find() cudaLibReport {
	r := cudaLibReport{dirs: s.dirs()}
	for _, l := range cudaLibs {
		st := CUDALibStatus{Name: l.soname, What: l.what, Required: l.required, TensorRT: l.tensorRT}
		for _, d := range r.dirs {
			p := filepath.Join(d, l.soname)
			if fi, err := os.Stat(s.path(p)); err == nil && !fi.IsDir() {
				st.Path = p
				break
			}
		}
		if l.soname == "libcudnn.so.9" && st.Path != "" {
			for _, sub := range cudnnSubLibs {
				p := filepath.Join(filepath.Dir(st.Path), sub)
				if _, err := os.Stat(s.path(p)); err == nil {
					r.cudnnSubs = append(r.cudnnSubs, p)
				}
			}
		}
		r.libs = append(r.libs, st)
	}
	return r
}

// path returns where the library named soname was found, or "".
func (r cudaLibReport) path(soname string) string {
	for _, l := range r.libs {
		if l.Name == soname {
			return l.Path
		}
	}
	return ""
}

// nvjpeg returns where libnvjpeg.so.13 and libcudart.so.13 were found, or
// in missing one line naming the first of them not found and where it was
// looked for ("" when both were found).
func (r cudaLibReport) nvjpeg() (nvjpegPath, cudartPath, missing string) {
	nvjpegPath, cudartPath = r.path(nvjpegSoname), r.path(cudartSoname)
	switch {
	case nvjpegPath == "":
		missing = r.notFound(nvjpegSoname)
	case cudartPath == "":
		missing = r.notFound(cudartSoname)
	}
	return nvjpegPath, cudartPath, missing
}

// findNVJPEG finds nvJPEG and the CUDA runtime it runs on, as the CUDA
// provider's libraries are found (--cuda-lib-dir, the loader's paths,
// /usr/local/cuda*, the nvidia/*/lib folders of Python environments):
// their paths for openNVJPEG, or in missing one line naming what is
// missing and where it was looked for ("" when both were found).
func findNVJPEG(s cudaSearch) (nvjpegPath, cudartPath, missing string) {
	return s.find().nvjpeg()
}

// missing returns the first library that is required (or needed for
// TensorRT, when tensorRT) and was not found, or "".
func (r cudaLibReport) missing(tensorRT bool) string {
	for i, l := range r.libs {
		if cudaLibs[i].noLoad {
			continue // NVML, loaded from the loader's paths when not found here
		}
		if l.Path == "" && (l.Required || (tensorRT && l.TensorRT)) {
			return l.Name
		}
	}
	return ""
}

// maxDirsShown bounds the directories a one-line message lists.
const maxDirsShown = 12

// notFound is the reason for a missing library, in one line: the name and
// where it was looked for.
func (r cudaLibReport) notFound(name string) string {
	dirs := r.dirs
	more := ""
	if len(dirs) > maxDirsShown {
		more = fmt.Sprintf(" and %d more: featurefs doctor lists them", len(dirs)-maxDirsShown)
		dirs = dirs[:maxDirsShown]
	}
	where := strings.Join(dirs, ", ")
	if where == "" {
		where = "no directory"
	}
	return fmt.Sprintf("%s not found (looked in %s%s; --cuda-lib-dir or FEATUREFS_CUDA_LIB_DIR adds a directory)", name, where, more)
}

// cudaLoader loads the CUDA libraries once per process. A library loaded
// stays loaded (dlopen cannot be undone safely), so the first successful
// load of each is kept and later calls only load what is still missing.
type cudaLoader struct {
	mu     sync.Mutex
	loaded map[string]string // GUARDED_BY(mu): soname -> path
}

var cudaLoad = cudaLoader{loaded: map[string]string{}}

// loadCUDALibs finds the libraries with s and dlopens them in order: the
// required ones (and TensorRT's when tensorRT), then the optional ones
// found. It returns the one-line reason the GPU cannot be used: a required
// library missing (notFound) or failing to load. With tensorRT, a missing
// TensorRT library is returned as trtMissing instead, CUDA alone still
// being usable.
func loadCUDALibs(s cudaSearch, tensorRT bool, open func(string) error) (trtMissing string, err error) {
	r := s.find()
	if name := r.missing(false); name != "" {
		return "", fmt.Errorf("%s", r.notFound(name))
	}
	if tensorRT {
		if name := r.missing(true); name != "" {
			trtMissing = r.notFound(name)
		}
	}
	cudaLoad.mu.Lock()
	defer cudaLoad.mu.Unlock()
	load := func(name, path string, required bool) error {
		if _, ok := cudaLoad.loaded[name]; ok {
			return nil
		}
		if err := open(path); err != nil {
			if required {
				return fmt.Errorf("cannot load %s: %v", path, err)
			}
			return nil
		}
		cudaLoad.loaded[name] = path
		return nil
	}
	for i, l := range r.libs {
		if l.Path == "" || cudaLibs[i].noLoad || (l.TensorRT && (!tensorRT || trtMissing != "")) {
			continue
		}
		required := l.Required || l.TensorRT
		if err := load(l.Name, l.Path, required); err != nil {
			if l.TensorRT {
				trtMissing = err.Error()
				continue
			}
			return trtMissing, err
		}
		if l.Name == "libcudnn.so.9" {
			for _, sub := range r.cudnnSubs {
				if err := load(filepath.Base(sub), sub, false); err != nil {
					return trtMissing, err
				}
			}
		}
	}
	return trtMissing, nil
}
