package extractor

// Device choice: --device auto|cpu|cuda[:N]. NVML lists the GPUs; the CUDA
// libraries are found and loaded without LD_LIBRARY_PATH (cudalibs.go);
// ONNX Runtime's CUDA provider, next to the core library, runs on the
// chosen GPU once a probe session has run on it. Where any of it is
// missing, auto runs on the CPU and says so in one log line naming what is
// missing ("GPU unavailable: libcudnn.so.9 not found (looked in ...);
// running on the CPU"); an explicit cuda, cuda:N or TensorRT fails
// (ErrNoDevice) unless Config.AllowCPUFallback. TensorRT asked for on a
// usable GPU without TensorRT's libraries runs on CUDA, in one WARN line.

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	ort "github.com/yalue/onnxruntime_go"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/featurefs/featurefs/extractor/spec"
)

// gpuInfo describes one GPU as NVML reports it.
type gpuInfo struct {
	Index       int
	Name        string
	Free, Total uint64
	// Major and Minor are the CUDA compute capability (9.0: Hopper).
	Major, Minor int
}

// nvmlInfo is what NVML says about the machine.
type nvmlInfo struct {
	Driver string // driver version, e.g. 580.65.06
	CUDA   string // the newest CUDA the driver supports, e.g. 13.0
	GPUs   []gpuInfo
}

// gpuLister lists the machine's GPUs.
type gpuLister func() ([]gpuInfo, error)

// queryNVML asks NVML (from lib; "" = libnvidia-ml.so.1) for the driver
// and the GPUs.
func queryNVML(lib string) (nvmlInfo, error) {
	var opts []nvml.LibraryOption
	if lib != "" {
		opts = append(opts, nvml.WithLibraryPath(lib))
	}
	l := nvml.New(opts...)
	if r := l.Init(); r != nvml.SUCCESS {
		return nvmlInfo{}, fmt.Errorf("nvml init: %s", nvmlErr(l, r))
	}
	defer l.Shutdown()
	var info nvmlInfo
	if v, r := l.SystemGetDriverVersion(); r == nvml.SUCCESS {
		info.Driver = v
	}
	if v, r := l.SystemGetCudaDriverVersion(); r == nvml.SUCCESS {
		info.CUDA = fmt.Sprintf("%d.%d", v/1000, v%1000/10)
	}
	n, r := l.DeviceGetCount()
	if r != nvml.SUCCESS {
		return info, fmt.Errorf("nvml device count: %s", nvmlErr(l, r))
	}
	for i := 0; i < n; i++ {
		d, r := l.DeviceGetHandleByIndex(i)
		if r != nvml.SUCCESS {
			return info, fmt.Errorf("nvml device %d: %s", i, nvmlErr(l, r))
		}
		mem, r := d.GetMemoryInfo()
		if r != nvml.SUCCESS {
			return info, fmt.Errorf("nvml device %d memory: %s", i, nvmlErr(l, r))
		}
		name, _ := d.GetName()
		major, minor, _ := d.GetCudaComputeCapability()
		info.GPUs = append(info.GPUs, gpuInfo{Index: i, Name: name, Free: mem.Free, Total: mem.Total, Major: major, Minor: minor})
	}
	return info, nil
}

// nvmlGPUs returns a gpuLister using NVML from lib ("" = libnvidia-ml.so.1).
func nvmlGPUs(lib string) gpuLister {
	return func() ([]gpuInfo, error) {
		info, err := queryNVML(lib)
		return info.GPUs, err
	}
}

// nvmlFree returns a function reading the free memory of GPU index, for
// the batch size measurement.
func nvmlFree(lib string, index int) func() (uint64, error) {
	return func() (uint64, error) {
		gpus, err := nvmlGPUs(lib)()
		if err != nil {
			return 0, err
		}
		for _, g := range gpus {
			if g.Index == index {
				return g.Free, nil
			}
		}
		return 0, fmt.Errorf("nvml: no GPU %d", index)
	}
}

func nvmlErr(l nvml.Interface, r nvml.Return) string {
	if r == nvml.ERROR_LIBRARY_NOT_FOUND {
		return "NVML library (libnvidia-ml.so.1) not found"
	}
	return l.ErrorString(r)
}

// Precision is the arithmetic the GPU runs in (--precision; spec.Precision).
type Precision = spec.Precision

const (
	// FP32 is full float32 (TF32 off): the CPU's results within rounding.
	FP32 = spec.FP32
	// TF32 lets cuDNN and cuBLAS use TF32 tensor cores.
	TF32 = spec.TF32
	// FP16 lets TensorRT build FP16 engines; only with TensorRT.
	FP16 = spec.FP16
)

// cudaProbe reports whether ONNX Runtime can run on GPU index (with
// TensorRT when asked) in precision p.
type cudaProbe func(index int, tensorRT bool, p Precision) error

// ortCUDAProbe runs a one-convolution model on GPU index through ONNX
// Runtime's CUDA (and TensorRT) provider, with the CPU provider barred from
// taking any node: the provider libraries, the CUDA libraries they load,
// the driver, cuDNN and a kernel for this GPU all have to work.
func ortCUDAProbe(index int, tensorRT bool, p Precision) error {
	o, err := ort.NewSessionOptions()
	if err != nil {
		return err
	}
	defer o.Destroy()
	if err := appendGPUProviders(o, sessionConfig{gpu: true, gpuIndex: index, tensorRT: tensorRT, precision: p}); err != nil {
		return err
	}
	if err := o.AddSessionConfigEntry("session.disable_cpu_ep_fallback", "1"); err != nil {
		return err
	}
	s, err := ort.NewDynamicAdvancedSessionWithONNXData(probeModel(), []string{"x"}, []string{"y"}, o)
	if err != nil {
		return fmt.Errorf("probe session: %w", err)
	}
	defer s.Destroy()
	in := []float32{1, 2, 3, 4}
	out := make([]float32, 4)
	it, err := ort.NewTensor(ort.NewShape(1, 1, 2, 2), in)
	if err != nil {
		return err
	}
	defer it.Destroy()
	ot, err := ort.NewTensor(ort.NewShape(1, 1, 2, 2), out)
	if err != nil {
		return err
	}
	defer ot.Destroy()
	if err := s.Run([]ort.Value{it}, []ort.Value{ot}); err != nil {
		return fmt.Errorf("probe run: %w", err)
	}
	for i := range in {
		if out[i] != 2*in[i] {
			return fmt.Errorf("probe run: the GPU computed %v for 2 x %v", out, in)
		}
	}
	return nil
}

// probeModel is an ONNX model (opset 17) of one 1x1 convolution with
// weight 2: y = Conv(x[1,1,2,2], w[1,1,1,1]).
func probeModel() []byte {
	str := func(b []byte, f protowire.Number, s string) []byte {
		return protowire.AppendString(protowire.AppendTag(b, f, protowire.BytesType), s)
	}
	msg := func(b []byte, f protowire.Number, m []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(b, f, protowire.BytesType), m)
	}
	varint := func(b []byte, f protowire.Number, v uint64) []byte {
		return protowire.AppendVarint(protowire.AppendTag(b, f, protowire.VarintType), v)
	}
	valueInfo := func(name string) []byte {
		var shape []byte
		for _, d := range []uint64{1, 1, 2, 2} {
			shape = msg(shape, 1, varint(nil, 1, d)) // dim { dim_value }
		}
		tt := varint(nil, 1, 1) // elem_type FLOAT
		tt = msg(tt, 2, shape)  // shape
		typ := msg(nil, 1, tt)  // TypeProto.tensor_type
		return msg(str(nil, 1, name), 2, typ)
	}
	node := str(nil, 1, "x")
	node = str(node, 1, "w")
	node = str(node, 2, "y")
	node = str(node, 4, "Conv")
	w := []byte{0, 0, 0, 0x40} // float32 2.0, little endian
	init := varint(nil, 1, 1)  // dims
	init = varint(init, 1, 1)
	init = varint(init, 1, 1)
	init = varint(init, 1, 1)
	init = varint(init, 2, 1) // data_type FLOAT
	init = str(init, 8, "w")
	init = msg(init, 9, w) // raw_data
	g := msg(nil, 1, node)
	g = str(g, 2, "featurefs-gpu-probe")
	g = msg(g, 5, init)
	g = msg(g, 11, valueInfo("x"))
	g = msg(g, 12, valueInfo("y"))
	m := varint(nil, 1, 8) // ir_version
	m = msg(m, 7, g)
	return msg(m, 8, varint(str(nil, 1, ""), 2, 17)) // opset_import { domain "" version 17 }
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

// gpuEnv is what chooseDevice needs from the machine; tests fake each part.
type gpuEnv struct {
	// list lists the GPUs (NVML).
	list gpuLister
	// libs finds and loads the CUDA libraries and checks that the provider
	// libraries are next to ONNX Runtime. err: why CUDA cannot run.
	// trtMissing: why TensorRT cannot, when tensorRT (CUDA still can).
	libs func(tensorRT bool) (trtMissing string, err error)
	// probe runs a probe session on a GPU.
	probe cudaProbe
}

// resolveNVML returns the NVML library to load: lib when set, else the
// libnvidia-ml.so.1 search finds (a container's /usr/local/nvidia/lib64 need
// not be in the loader's paths), else "" (the loader's paths).
func resolveNVML(lib string, search cudaSearch) string {
	if lib != "" {
		return lib
	}
	return search.find().path(nvmlSoname)
}

// ortGPUEnv is the real machine: NVML from nvmlLib (resolveNVML), the CUDA
// libraries found by search, the providers next to the ONNX Runtime library
// ortLib.
func ortGPUEnv(ortLib, nvmlLib string, search cudaSearch) gpuEnv {
	return gpuEnv{
		list: func() ([]gpuInfo, error) { return nvmlGPUs(resolveNVML(nvmlLib, search))() },
		libs: func(tensorRT bool) (string, error) {
			if !providerPresent(ortLib, "libonnxruntime_providers_cuda.so") {
				return "", fmt.Errorf("libonnxruntime_providers_cuda.so not found next to %s (the CPU build of ONNX Runtime; scripts/install-deps.sh --gpu installs the GPU providers)", ortLib)
			}
			// NVML numbers GPUs in PCI bus order; CUDA, by default, fastest
			// first. Make CUDA's numbering NVML's before CUDA starts, so that
			// cuda:N is one GPU to both.
			if os.Getenv("CUDA_DEVICE_ORDER") == "" {
				os.Setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
			}
			trt, err := loadCUDALibs(search, tensorRT, dlopenGlobal)
			if err == nil && tensorRT && trt == "" && !providerPresent(ortLib, "libonnxruntime_providers_tensorrt.so") {
				trt = fmt.Sprintf("libonnxruntime_providers_tensorrt.so not found next to %s", ortLib)
			}
			return trt, err
		},
		probe: ortCUDAProbe,
	}
}

// chooseDevice resolves spec. auto and cuda pick the GPU with the most free
// memory (cuda:N picks N). When no GPU can be had (no NVML, no GPU, no such
// index, a CUDA library or the CUDA provider missing, the probe session
// failing):
//   - auto (without TensorRT) runs on the CPU and says so in one INFO line,
//     "GPU unavailable: WHY; running on the CPU";
//   - an explicit request (cuda, cuda:N or tensorRT) is an error matching
//     ErrNoDevice, unless allowFallback, in which case it runs on the CPU,
//     says so in one WARN line and returns the reason as fallback.
//
// TensorRT asked for on a GPU where only CUDA works runs on CUDA, with one
// WARN line "TensorRT unavailable: WHY; running on CUDA".
func chooseDevice(spec string, tensorRT, allowFallback bool, p Precision, env gpuEnv, log *slog.Logger) (d deviceChoice, fallback string, err error) {
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
			log.Info("GPU unavailable: "+why+"; running on the CPU", "device", spec)
			return deviceChoice{}, "", nil
		case allowFallback:
			msg := fmt.Sprintf("device %s: %s; running on the CPU", asked, why)
			log.Warn("asked-for GPU unavailable, running on the CPU", "device", spec, "tensorrt", tensorRT, "reason", why)
			return deviceChoice{}, msg, nil
		}
		return deviceChoice{}, "", fmt.Errorf("device %s: %w: %s", asked, ErrNoDevice, why)
	}
	gpus, err := env.list()
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
	trtMissing, err := env.libs(tensorRT)
	if err != nil {
		return unavailable(err.Error())
	}
	useTRT := tensorRT && trtMissing == ""
	if err := env.probe(pick.Index, useTRT, p); err != nil {
		if !useTRT {
			return unavailable(fmt.Sprintf("this ONNX Runtime has no usable CUDA provider on cuda:%d (%v)", pick.Index, err))
		}
		// TensorRT failed: CUDA alone may still work.
		if err2 := env.probe(pick.Index, false, p); err2 != nil {
			return unavailable(fmt.Sprintf("this ONNX Runtime has no usable TensorRT or CUDA provider on cuda:%d (%v)", pick.Index, err2))
		}
		useTRT, trtMissing = false, err.Error()
	}
	if tensorRT && !useTRT {
		on := "CUDA"
		if p == FP16 {
			on = "CUDA in fp32 (--precision fp16 needs TensorRT)"
		}
		log.Warn("TensorRT unavailable: "+trtMissing+"; running on "+on, "device", "cuda:"+strconv.Itoa(pick.Index))
	}
	d = deviceChoice{gpu: true, index: pick.Index, name: pick.Name, free: pick.Free, tensorRT: useTRT}
	log.Info("running on GPU", "device", d.String(), "gpu", pick.Name, "free_bytes", pick.Free, "tensorrt", useTRT, "precision", string(p))
	return d, "", nil
}
