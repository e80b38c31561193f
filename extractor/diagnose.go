package extractor

// Diagnose: what `featurefs doctor` reports. The ONNX Runtime library and
// its providers, the GPUs NVML sees, each CUDA library found or missing,
// nvJPEG's version (--decode gpu),
// and what --device auto chooses, by running the same choice a mount runs
// (which loads the CUDA libraries and runs a probe session on each GPU),
// with each GPU marked used or not and why.

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
)

// DiagnoseConfig names what Diagnose looks at.
type DiagnoseConfig struct {
	// ORTLib is the ONNX Runtime core library (default DefaultORTLib()).
	ORTLib string
	// CUDALibDir lists directories searched first for the CUDA libraries
	// (Config.CUDALibDir).
	CUDALibDir string
	// NVMLLib is the NVML library (default: found as Config.NVMLLib is).
	NVMLLib string
}

// GPU is one GPU as NVML reports it.
type GPU struct {
	// Index is the CUDA device number (cuda:N).
	Index int `json:"index"`
	// Name is the model, e.g. "NVIDIA H100 80GB HBM3".
	Name string `json:"name"`
	// TotalBytes and FreeBytes are its memory.
	TotalBytes uint64 `json:"total_bytes"`
	FreeBytes  uint64 `json:"free_bytes"`
	// Capability is the CUDA compute capability, e.g. "9.0".
	Capability string `json:"capability"`
	// Used says whether --device auto runs on this GPU; NotUsed why not
	// (this GPU's own reason, or why no GPU is used).
	Used    bool   `json:"used"`
	NotUsed string `json:"not_used,omitempty"`
}

// Diagnosis is Diagnose's report.
type Diagnosis struct {
	// ORT is the ONNX Runtime library; ORTError says why it cannot be used
	// ("" when it can).
	ORT      ORTLibInfo `json:"ort"`
	ORTError string     `json:"ort_error,omitempty"`
	// Driver and CUDA are the NVIDIA driver's version and the newest CUDA
	// it supports; GPUs are the GPUs; NVMLError says why NVML could not be
	// asked ("" when it could).
	Driver    string `json:"driver,omitempty"`
	CUDA      string `json:"cuda,omitempty"`
	GPUs      []GPU  `json:"gpus"`
	NVMLError string `json:"nvml_error,omitempty"`
	// CUDALibs is each CUDA library, found (Path) or not; SearchDirs the
	// directories searched, in order.
	CUDALibs   []CUDALibStatus `json:"cuda_libs"`
	SearchDirs []string        `json:"search_dirs"`
	// Auto is what --device auto chooses ("cpu", "cuda:N" or, with
	// several GPUs, "cuda:N,M,..."), and AutoWhy why, in one line.
	Auto    string `json:"auto"`
	AutoWhy string `json:"auto_why"`
	// NVJPEG is nvJPEG, which --decode gpu decodes with.
	NVJPEG NVJPEGStatus `json:"nvjpeg"`
	// DecodeAuto is where --decode auto decodes JPEGs ("cpu" or "gpu")
	// and DecodeAutoWhy why, in one line.
	DecodeAuto    string `json:"decode_auto"`
	DecodeAutoWhy string `json:"decode_auto_why"`
}

// NVJPEGStatus is nvJPEG (--decode gpu) as doctor finds it.
type NVJPEGStatus struct {
	// Path and CUDARTPath are where libnvjpeg.so.13 and the CUDA runtime
	// it runs on were found ("" when not).
	Path       string `json:"path"`
	CUDARTPath string `json:"cudart_path"`
	// Version is nvJPEG's own (nvjpegGetProperty, no GPU needed), e.g.
	// "13.0.1", when the library loads.
	Version string `json:"version,omitempty"`
	// Missing names what is missing and where it was looked for; Error
	// says why the library found cannot be loaded.
	Missing string `json:"missing,omitempty"`
	Error   string `json:"error,omitempty"`
}

// diagnoseNVJPEG finds nvJPEG in r and, when found, loads it and reads
// its version.
func diagnoseNVJPEG(r cudaLibReport) NVJPEGStatus {
	var st NVJPEGStatus
	st.Path, st.CUDARTPath, st.Missing = r.nvjpeg()
	if st.Missing != "" {
		return st
	}
	v, err := probeNVJPEG(st.Path, st.CUDARTPath)
	if err != nil {
		st.Error = err.Error()
		return st
	}
	st.Version = v
	return st
}

// Diagnose inspects this machine. It never fails: what cannot be had is
// reported in the Diagnosis.
func Diagnose(c DiagnoseConfig) Diagnosis {
	if c.ORTLib == "" {
		c.ORTLib = DefaultORTLib()
	}
	var d Diagnosis
	info, err := ProbeORTLib(c.ORTLib)
	d.ORT = info
	switch {
	case err != nil:
		d.ORTError = err.Error()
	case !info.APIOK:
		d.ORTError = errORTTooOld(info).Error()
	}

	search := defaultCUDASearch(c.CUDALibDir)
	nv, err := queryNVML(resolveNVML(c.NVMLLib, search))
	if err != nil {
		d.NVMLError = err.Error()
	}
	d.Driver, d.CUDA = nv.Driver, nv.CUDA
	d.GPUs = []GPU{}
	for _, g := range nv.GPUs {
		gp := GPU{Index: g.Index, Name: g.Name, TotalBytes: g.Total, FreeBytes: g.Free}
		if g.Major > 0 {
			gp.Capability = fmt.Sprintf("%d.%d", g.Major, g.Minor)
		}
		d.GPUs = append(d.GPUs, gp)
	}

	r := search.find()
	d.CUDALibs, d.SearchDirs = r.libs, r.dirs
	if d.SearchDirs == nil {
		d.SearchDirs = []string{}
	}
	d.NVJPEG = diagnoseNVJPEG(r)

	d.Auto = "cpu"
	d.DecodeAuto, d.DecodeAutoWhy = "cpu", "nothing runs: the ONNX Runtime library cannot be used"
	if d.ORTError != "" {
		d.AutoWhy = "nothing runs: the ONNX Runtime library cannot be used"
		markGPUs(d.GPUs, devicePick{}, d.AutoWhy)
		return d
	}
	if err := initORT(c.ORTLib); err != nil {
		d.ORTError = err.Error()
		d.AutoWhy = "nothing runs: the ONNX Runtime library cannot be used"
		markGPUs(d.GPUs, devicePick{}, d.AutoWhy)
		return d
	}
	rec := &lastMessage{}
	pick, _, err := chooseDevice("auto", false, false, FP32, ortGPUEnv(c.ORTLib, c.NVMLLib, search), slog.New(rec))
	switch {
	case err != nil:
		d.AutoWhy = err.Error()
	case pick.gpu():
		d.Auto = pick.String()
		d.AutoWhy = "a probe session ran on " + probedNames(pick)
	default:
		d.AutoWhy = rec.msg()
	}
	markGPUs(d.GPUs, pick, d.AutoWhy)
	d.DecodeAuto, d.DecodeAutoWhy = decodeAuto(pick, d.NVJPEG)
	return d
}

// decodeAuto is where --decode auto decodes with the device pick and
// nvJPEG as found, and why (resolveDecode's choice, without opening the
// decoder).
func decodeAuto(pick devicePick, nv NVJPEGStatus) (string, string) {
	switch {
	case !pick.gpu():
		return "cpu", "inference runs on the CPU (--device auto)"
	case nv.Missing != "":
		return "cpu", nv.Missing
	case nv.Error != "":
		return "cpu", nv.Error
	case !gpuDecodeFidelity[pick.devs[0].name]:
		return "cpu", noFidelity(pick.devs[0].name)
	}
	return "gpu", fmt.Sprintf("nvJPEG %s on %s, whose decode fidelity passed", nv.Version, pick.devs[0].name)
}

// probedNames names the GPUs of pick: "NAME", or "each of cuda:0 (NAME),
// cuda:1 (NAME)".
func probedNames(pick devicePick) string {
	if len(pick.devs) == 1 {
		return pick.devs[0].name
	}
	var gs []gpuInfo
	for _, d := range pick.devs {
		gs = append(gs, gpuInfo{Index: d.index, Name: d.name})
	}
	return "each of " + gpuNames(gs)
}

// markGPUs sets each GPU's Used and NotUsed from pick; a GPU with no
// reason of its own takes why (no GPU is used: the reason for all).
func markGPUs(gpus []GPU, pick devicePick, why string) {
	for i := range gpus {
		g := &gpus[i]
		for _, d := range pick.devs {
			if d.gpu && d.index == g.Index {
				g.Used = true
			}
		}
		if g.Used {
			continue
		}
		g.NotUsed = pick.notUsed[g.Index]
		if g.NotUsed == "" {
			g.NotUsed = why
		}
	}
}

// lastMessage is a slog handler that keeps the last message logged.
type lastMessage struct {
	mu sync.Mutex
	m  string
}

func (h *lastMessage) Enabled(context.Context, slog.Level) bool { return true }
func (h *lastMessage) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.m = r.Message
	h.mu.Unlock()
	return nil
}
func (h *lastMessage) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *lastMessage) WithGroup(string) slog.Handler      { return h }

func (h *lastMessage) msg() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.m
}
