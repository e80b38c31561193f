package extractor

// Device choice: --device auto|cpu|cuda[:N]. NVML lists the GPUs; ONNX
// Runtime's CUDA provider runs on the chosen one. Where either is missing,
// auto runs on the CPU and says so in one log line; an explicit cuda,
// cuda:N or TensorRT fails (ErrNoDevice) unless Config.AllowCPUFallback.

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	ort "github.com/yalue/onnxruntime_go"
)

// gpuInfo describes one GPU as NVML reports it.
type gpuInfo struct {
	Index       int
	Name        string
	Free, Total uint64
}

// gpuLister lists the machine's GPUs.
type gpuLister func() ([]gpuInfo, error)

// nvmlGPUs returns a gpuLister using NVML from lib ("" = libnvidia-ml.so.1).
func nvmlGPUs(lib string) gpuLister {
	return func() ([]gpuInfo, error) {
		var opts []nvml.LibraryOption
		if lib != "" {
			opts = append(opts, nvml.WithLibraryPath(lib))
		}
		l := nvml.New(opts...)
		if r := l.Init(); r != nvml.SUCCESS {
			return nil, fmt.Errorf("nvml init: %s", nvmlErr(l, r))
		}
		defer l.Shutdown()
		n, r := l.DeviceGetCount()
		if r != nvml.SUCCESS {
			return nil, fmt.Errorf("nvml device count: %s", nvmlErr(l, r))
		}
		var gpus []gpuInfo
		for i := 0; i < n; i++ {
			d, r := l.DeviceGetHandleByIndex(i)
			if r != nvml.SUCCESS {
				return nil, fmt.Errorf("nvml device %d: %s", i, nvmlErr(l, r))
			}
			mem, r := d.GetMemoryInfo()
			if r != nvml.SUCCESS {
				return nil, fmt.Errorf("nvml device %d memory: %s", i, nvmlErr(l, r))
			}
			name, _ := d.GetName()
			gpus = append(gpus, gpuInfo{Index: i, Name: name, Free: mem.Free, Total: mem.Total})
		}
		return gpus, nil
	}
}

func nvmlErr(l nvml.Interface, r nvml.Return) string {
	if r == nvml.ERROR_LIBRARY_NOT_FOUND {
		return "NVML library (libnvidia-ml.so.1) not found"
	}
	return l.ErrorString(r)
}

// cudaProbe reports whether ONNX Runtime can run on GPU index (with
// TensorRT when asked).
type cudaProbe func(index int, tensorRT bool) error

// ortCUDAProbe checks that the loaded ONNX Runtime has the CUDA (and
// TensorRT) execution provider.
func ortCUDAProbe(index int, tensorRT bool) error {
	o, err := ort.NewSessionOptions()
	if err != nil {
		return err
	}
	defer o.Destroy()
	return appendGPUProviders(o, index, tensorRT)
}

// deviceChoice is where inference runs.
type deviceChoice struct {
	gpu      bool
	index    int
	name     string // GPU model name
	free     uint64 // free GPU memory at startup, bytes
	tensorRT bool
}

// String is the device as Device() reports it: "cpu" or "cuda:N".
func (d deviceChoice) String() string {
	if !d.gpu {
		return "cpu"
	}
	return "cuda:" + strconv.Itoa(d.index)
}

// parseDevice parses auto|cpu|cuda[:N]; index is -1 for "cuda" without N.
func parseDevice(s string) (kind string, index int, err error) {
	s = strings.ToLower(strings.TrimSpace(s))
	switch {
	case s == "" || s == "auto":
		return "auto", -1, nil
	case s == "cpu":
		return "cpu", -1, nil
	case s == "cuda" || s == "gpu":
		return "cuda", -1, nil
	case strings.HasPrefix(s, "cuda:"):
		n, err := strconv.Atoi(s[len("cuda:"):])
		if err != nil || n < 0 {
			return "", 0, fmt.Errorf("device %q: want auto, cpu, cuda or cuda:N", s)
		}
		return "cuda", n, nil
	}
	return "", 0, fmt.Errorf("device %q: want auto, cpu, cuda or cuda:N", s)
}

// ErrNoDevice is matched by New's error when an explicitly asked-for GPU
// (device cuda or cuda:N, or TensorRT) cannot be had and
// Config.AllowCPUFallback is off. The message names what is missing.
var ErrNoDevice = errors.New("no usable GPU")

// chooseDevice resolves spec. auto and cuda pick the GPU with the most free
// memory (cuda:N picks N). When no GPU can be had (no NVML, no GPU, no such
// index, no CUDA provider in ONNX Runtime):
//   - auto (without TensorRT) runs on the CPU and says so in one INFO line;
//   - an explicit request (cuda, cuda:N or tensorRT) is an error matching
//     ErrNoDevice, unless allowFallback, in which case it runs on the CPU,
//     says so in one WARN line and returns the reason as fallback.
func chooseDevice(spec string, tensorRT, allowFallback bool, list gpuLister, probe cudaProbe, log *slog.Logger) (d deviceChoice, fallback string, err error) {
	kind, index, err := parseDevice(spec)
	if err != nil {
		return deviceChoice{}, "", err
	}
	if kind == "cpu" {
		return deviceChoice{}, "", nil
	}
	explicit := kind == "cuda" || tensorRT
	asked := spec
	if tensorRT {
		asked += " with TensorRT"
	}
	unavailable := func(why string) (deviceChoice, string, error) {
		switch {
		case !explicit:
			log.Info("no usable GPU, running on the CPU", "device", spec, "reason", why)
			return deviceChoice{}, "", nil
		case allowFallback:
			msg := fmt.Sprintf("device %s: %s; running on the CPU", asked, why)
			log.Warn("asked-for GPU unavailable, running on the CPU", "device", spec, "tensorrt", tensorRT, "reason", why)
			return deviceChoice{}, msg, nil
		}
		return deviceChoice{}, "", fmt.Errorf("device %s: %w: %s", asked, ErrNoDevice, why)
	}
	gpus, err := list()
	if err != nil {
		return unavailable(err.Error())
	}
	if len(gpus) == 0 {
		return unavailable("NVML lists no GPU")
	}
	var pick *gpuInfo
	if index >= 0 {
		for i := range gpus {
			if gpus[i].Index == index {
				pick = &gpus[i]
			}
		}
		if pick == nil {
			return unavailable(fmt.Sprintf("the machine has %d GPU(s), numbered from 0", len(gpus)))
		}
	} else {
		for i := range gpus {
			if pick == nil || gpus[i].Free > pick.Free {
				pick = &gpus[i]
			}
		}
	}
	if err := probe(pick.Index, tensorRT); err != nil {
		what := "CUDA"
		if tensorRT {
			what = "TensorRT or CUDA"
		}
		return unavailable(fmt.Sprintf("this ONNX Runtime has no usable %s provider (%v)", what, err))
	}
	d = deviceChoice{gpu: true, index: pick.Index, name: pick.Name, free: pick.Free, tensorRT: tensorRT}
	log.Info("running on GPU", "device", d.String(), "gpu", pick.Name, "free_bytes", pick.Free, "tensorrt", tensorRT)
	return d, "", nil
}

// gpuBatchSize sizes a GPU batch from free memory: half of what is free after
// the weights, divided by the per-sample activation memory, rounded down to a
// power of two in [1, 256].
func gpuBatchSize(free uint64, weightBytes, perSample int64) int {
	if perSample <= 0 {
		return 1
	}
	avail := int64(free)/2 - 2*weightBytes
	n := avail / perSample
	b := 1
	for b*2 <= int(min(n, 256)) {
		b *= 2
	}
	return b
}
