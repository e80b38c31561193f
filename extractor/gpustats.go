package extractor

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// GPUSampler reads one GPU's utilization and memory from NVML, for
// benchmarks (featurefs bench).
type GPUSampler struct {
	l nvml.Interface
	d nvml.Device
}

// NewGPUSampler opens NVML (from lib; "" = libnvidia-ml.so.1) for GPU
// index. Close releases it.
func NewGPUSampler(lib string, index int) (*GPUSampler, error) {
	var opts []nvml.LibraryOption
	if lib != "" {
		opts = append(opts, nvml.WithLibraryPath(lib))
	}
	l := nvml.New(opts...)
	if r := l.Init(); r != nvml.SUCCESS {
		return nil, fmt.Errorf("nvml init: %s", nvmlErr(l, r))
	}
	d, r := l.DeviceGetHandleByIndex(index)
	if r != nvml.SUCCESS {
		l.Shutdown()
		return nil, fmt.Errorf("nvml device %d: %s", index, nvmlErr(l, r))
	}
	return &GPUSampler{l: l, d: d}, nil
}

// Sample returns the percent of NVML's last sample period in which a
// kernel ran on the GPU, and the GPU's used memory in bytes.
func (g *GPUSampler) Sample() (util int, used uint64, err error) {
	u, r := g.d.GetUtilizationRates()
	if r != nvml.SUCCESS {
		return 0, 0, fmt.Errorf("nvml utilization: %s", nvmlErr(g.l, r))
	}
	m, r := g.d.GetMemoryInfo()
	if r != nvml.SUCCESS {
		return 0, 0, fmt.Errorf("nvml memory: %s", nvmlErr(g.l, r))
	}
	return int(u.Gpu), m.Used, nil
}

// Close shuts NVML down.
func (g *GPUSampler) Close() { g.l.Shutdown() }
