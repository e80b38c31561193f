package extractor

// Device choice: --device auto|cpu|cuda[:N]. NVML lists the GPUs; ONNX
// Runtime's CUDA provider runs on the chosen one. Where either is missing
// the service runs on the CPU and says so in one log line.

import (
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

// chooseDevice resolves spec. auto and cuda pick the GPU with the most free
// memory (cuda:N picks N); when NVML or the CUDA provider is missing the
// result is the CPU, logged in exactly one line.
func chooseDevice(spec string, tensorRT bool, list gpuLister, probe cudaProbe, log *slog.Logger) (deviceChoice, error) {
	kind, index, err := parseDevice(spec)
	if err != nil {
		return deviceChoice{}, err
	}
	if kind == "cpu" {
		return deviceChoice{}, nil
	}
	fallback := func(reason string, err error) (deviceChoice, error) {
		log.Warn("GPU unavailable, running on the CPU", "device", spec, "reason", reason, "err", err)
		return deviceChoice{}, nil
	}
	gpus, err := list()
	if err != nil {
		return fallback("no NVML", err)
	}
	if len(gpus) == 0 {
		return fallback("no GPU", fmt.Errorf("NVML lists no GPU"))
	}
	var pick *gpuInfo
	if index >= 0 {
		for i := range gpus {
			if gpus[i].Index == index {
				pick = &gpus[i]
			}
		}
		if pick == nil {
			return deviceChoice{}, fmt.Errorf("device %q: the machine has %d GPU(s)", spec, len(gpus))
		}
	} else {
		for i := range gpus {
			if pick == nil || gpus[i].Free > pick.Free {
				pick = &gpus[i]
			}
		}
	}
	if err := probe(pick.Index, tensorRT); err != nil {
		return fallback("no CUDA provider in ONNX Runtime", err)
	}
	d := deviceChoice{gpu: true, index: pick.Index, name: pick.Name, free: pick.Free, tensorRT: tensorRT}
	log.Info("running on GPU", "device", d.String(), "gpu", pick.Name, "free_bytes", pick.Free, "tensorrt", tensorRT)
	return d, nil
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
