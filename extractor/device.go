package extractor

// Device choice: --device auto|cpu|cuda|cuda:N[,M,...]. NVML lists the
// GPUs; the CUDA libraries are found and loaded without LD_LIBRARY_PATH
// (cudalibs.go); ONNX Runtime's CUDA provider, next to the core library,
// runs on each chosen GPU once a probe session has run on it. auto and
// cuda use every usable GPU (the service runs one inference lane per GPU,
// service.go and batch.go), cuda:N,M the ones named. Where any of it is
// missing, auto runs on the CPU and says so in one log line naming what is
// missing ("GPU unavailable: libcudnn.so.9 not found (looked in ...);
// running on the CPU"); an explicit cuda, cuda:N or TensorRT fails
// (ErrNoDevice) unless Config.AllowCPUFallback. TensorRT asked for on a
// usable GPU without TensorRT's libraries runs on CUDA, in one WARN line.

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
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

// deviceChoice is one device inference runs on.
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

// devicePick is what chooseDevice chose: the devices inference runs on
// (the CPU alone, or one or more GPUs in index order; never empty) and,
// for each GPU considered and not used, why (for doctor and the log).
type devicePick struct {
	devs    []deviceChoice
	notUsed map[int]string
}

func cpuPick(notUsed map[int]string) devicePick {
	return devicePick{devs: []deviceChoice{{}}, notUsed: notUsed}
}

// gpu reports whether inference runs on GPUs.
func (p devicePick) gpu() bool { return len(p.devs) > 0 && p.devs[0].gpu }

// String is the devices as Device() reports them: "cpu", "cuda:N" or,
// with several GPUs, "cuda:N,M,...".
func (p devicePick) String() string {
	if !p.gpu() {
		return "cpu"
	}
	ix := make([]string, len(p.devs))
	for i, d := range p.devs {
		ix[i] = strconv.Itoa(d.index)
	}
	return "cuda:" + strings.Join(ix, ",")
}

// parseDevice parses auto|cpu|cuda|gpu|cuda:N[,M,...] (spec.ParseDevice;
// gpu is cuda). indices is nil for auto, cpu and cuda (every usable GPU);
// a repeated index is an error.
func parseDevice(s string) (kind string, indices []int, err error) {
	if strings.EqualFold(strings.TrimSpace(s), "gpu") {
		return "cuda", nil, nil
	}
	kind, indices, err = spec.ParseDevice(s)
	if err != nil {
		return "", nil, fmt.Errorf("device %q: %w", s, err)
	}
	return kind, indices, nil
}

// minGPUFree is the least free memory a GPU needs to be used by auto or
// cuda (every usable GPU) when another GPU has at least that much: below
// it, the first session may not fit beside what else runs there, and the
// batch would be small. A single GPU, or a GPU named by cuda:N, is used
// whatever its free memory.
const minGPUFree = 1 << 30

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

// chooseDevice resolves spec. auto and cuda use every usable GPU:
// each GPU NVML lists, the one with the most free memory first, that has
// minGPUFree free (unless none has) and on which the probe session runs;
// cuda:N,M,... uses exactly the GPUs named. When no GPU can be had (no
// NVML, no GPU, no such index, a CUDA library or the CUDA provider
// missing, the probe session failing on every GPU, or on one named):
//   - auto (without TensorRT) runs on the CPU and says so in one INFO line,
//     "GPU unavailable: WHY; running on the CPU";
//   - an explicit request (cuda, cuda:N or tensorRT) is an error matching
//     ErrNoDevice, unless allowFallback, in which case it runs on the CPU,
//     says so in one WARN line and returns the reason as fallback.
//
// Each GPU used is logged in one INFO line "running on GPU", each left
// out in one INFO line "GPU left out" saying why (only when another is
// used). TensorRT asked for where only CUDA works (decided on the first
// GPU probed) runs on CUDA, with one WARN line "TensorRT unavailable: WHY;
// running on CUDA".
func chooseDevice(spec string, tensorRT, allowFallback bool, p Precision, env gpuEnv, log *slog.Logger) (pick devicePick, fallback string, err error) {
	kind, indices, err := parseDevice(spec)
	if err != nil {
		return devicePick{}, "", err
	}
	if kind == "cpu" {
		return cpuPick(nil), "", nil
	}
	explicit := kind == "cuda" || tensorRT
	asked := spec
	if tensorRT {
		asked += " with TensorRT"
	}
	notUsed := map[int]string{}
	unavailable := func(why string) (devicePick, string, error) {
		switch {
		case !explicit:
			log.Info("GPU unavailable: "+why+"; running on the CPU", "device", spec)
			return cpuPick(notUsed), "", nil
		case allowFallback:
			msg := fmt.Sprintf("device %s: %s; running on the CPU", asked, why)
			log.Warn("asked-for GPU unavailable, running on the CPU", "device", spec, "tensorrt", tensorRT, "reason", why)
			return cpuPick(notUsed), msg, nil
		}
		return cpuPick(notUsed), "", fmt.Errorf("device %s: %w: %s", asked, ErrNoDevice, why)
	}
	gpus, err := env.list()
	if err != nil {
		return unavailable(err.Error())
	}
	if len(gpus) == 0 {
		return unavailable("NVML lists no GPU")
	}
	// cands: the GPUs to probe, in the order probed.
	var cands []gpuInfo
	if indices != nil {
		for _, ix := range indices {
			i := slices.IndexFunc(gpus, func(g gpuInfo) bool { return g.Index == ix })
			if i < 0 {
				return unavailable(fmt.Sprintf("no cuda:%d: the machine has %d GPU(s): %s", ix, len(gpus), gpuNames(gpus)))
			}
			cands = append(cands, gpus[i])
		}
		for _, g := range gpus {
			if !slices.Contains(indices, g.Index) {
				notUsed[g.Index] = "not asked for (--device " + spec + ")"
			}
		}
	} else {
		cands = slices.Clone(gpus)
		slices.SortStableFunc(cands, func(a, b gpuInfo) int { return cmp.Compare(b.Free, a.Free) })
		if len(cands) > 1 && cands[0].Free >= minGPUFree {
			roomy := cands[:0]
			for _, g := range cands {
				if g.Free < minGPUFree {
					notUsed[g.Index] = fmt.Sprintf("%d MiB free, under the %d MiB a GPU needs beside others", g.Free>>20, minGPUFree>>20)
					continue
				}
				roomy = append(roomy, g)
			}
			cands = roomy
		}
	}
	trtMissing, err := env.libs(tensorRT)
	if err != nil {
		for _, g := range cands {
			notUsed[g.Index] = err.Error()
		}
		return unavailable(err.Error())
	}
	useTRT := tensorRT && trtMissing == ""
	decided := false // useTRT holds for every GPU once one probe ran
	var chosen []deviceChoice
	firstWhy := ""
	for _, g := range cands {
		trt := useTRT
		var why string
		if err := env.probe(g.Index, trt, p); err != nil {
			switch {
			case !trt:
				why = fmt.Sprintf("this ONNX Runtime has no usable CUDA provider on cuda:%d (%v)", g.Index, err)
			case decided:
				why = fmt.Sprintf("this ONNX Runtime has no usable TensorRT provider on cuda:%d (%v)", g.Index, err)
			default:
				// TensorRT failed: CUDA alone may still work.
				if err2 := env.probe(g.Index, false, p); err2 != nil {
					why = fmt.Sprintf("this ONNX Runtime has no usable TensorRT or CUDA provider on cuda:%d (%v)", g.Index, err2)
				} else {
					trt, trtMissing = false, err.Error()
				}
			}
		}
		if why != "" {
			notUsed[g.Index] = why
			if firstWhy == "" {
				firstWhy = why
			}
			if indices != nil {
				// Every GPU named must run.
				return unavailable(why)
			}
			continue
		}
		useTRT, decided = trt, true
		chosen = append(chosen, deviceChoice{gpu: true, index: g.Index, name: g.Name, free: g.Free, tensorRT: trt})
	}
	if len(chosen) == 0 {
		return unavailable(firstWhy)
	}
	if tensorRT && !useTRT {
		on := "CUDA"
		if p == FP16 {
			on = "CUDA in fp32 (--precision fp16 needs TensorRT)"
		}
		log.Warn("TensorRT unavailable: "+trtMissing+"; running on "+on, "device", chosen[0].String())
	}
	slices.SortFunc(chosen, func(a, b deviceChoice) int { return cmp.Compare(a.index, b.index) })
	for _, d := range chosen {
		log.Info("running on GPU", "device", d.String(), "gpu", d.name, "free_bytes", d.free, "tensorrt", d.tensorRT, "precision", string(p))
	}
	for _, g := range gpus {
		if why, ok := notUsed[g.Index]; ok && indices == nil {
			log.Info("GPU left out", "device", "cuda:"+strconv.Itoa(g.Index), "gpu", g.Name, "reason", why)
		}
	}
	return devicePick{devs: chosen, notUsed: notUsed}, "", nil
}

// gpuNames lists gpus as "cuda:0 (NAME), cuda:1 (NAME)".
func gpuNames(gpus []gpuInfo) string {
	var b strings.Builder
	for i, g := range gpus {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "cuda:%d", g.Index)
		if g.Name != "" {
			fmt.Fprintf(&b, " (%s)", g.Name)
		}
	}
	return b.String()
}
