package extractor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/featurefs/featurefs/test/testenv"
)

// recordHandler keeps every log record.
type recordHandler struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordHandler) WithGroup(string) slog.Handler      { return h }

// lines returns the records at level >= min as "msg k=v ..." strings.
func (h *recordHandler) lines(min slog.Level) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.recs {
		if r.Level < min {
			continue
		}
		var b strings.Builder
		b.WriteString(r.Message)
		r.Attrs(func(a slog.Attr) bool {
			b.WriteString(" " + a.Key + "=" + a.Value.String())
			return true
		})
		out = append(out, b.String())
	}
	return out
}

// On this GPU-less machine (no NVML, CPU-only ONNX Runtime), --device auto
// runs on the CPU with one INFO line and no warning.
func TestAutoDeviceFallsBackQuietly(t *testing.T) {
	lib := testenv.ORTLib(t)
	for _, nvml := range []string{"", "/nonexistent/libnvidia-ml.so.1"} {
		h := &recordHandler{}
		cfg := DefaultConfig()
		cfg.ORTLib, cfg.Device, cfg.NVMLLib, cfg.Logger = lib, "auto", nvml, slog.New(h)
		svc, err := New(cfg, nil)
		if err != nil {
			t.Fatalf("device auto (nvml %q): %v", nvml, err)
		}
		if got := svc.Device(); got != "cpu" {
			t.Errorf("device auto (nvml %q): Device() = %q on a machine without a usable GPU", nvml, got)
		}
		if got := svc.Stats().Device; got != "cpu" {
			t.Errorf("Stats().Device = %q", got)
		}
		if svc.Fallback() != "" {
			t.Errorf("device auto: Fallback() = %q, want none (auto asked for no GPU in particular)", svc.Fallback())
		}
		lines := h.lines(slog.LevelInfo)
		if len(lines) != 1 || !strings.Contains(lines[0], "CPU") || !strings.Contains(lines[0], "device=auto") {
			t.Errorf("device auto (nvml %q): log lines %q, want exactly one saying it runs on the CPU", nvml, lines)
		}
		if warn := h.lines(slog.LevelWarn); len(warn) != 0 {
			t.Errorf("device auto (nvml %q): warnings %q, want an INFO line only", nvml, warn)
		}
		svc.Close()
	}
	// --device cpu asks for nothing and says nothing.
	h := &recordHandler{}
	cfg := DefaultConfig()
	cfg.ORTLib, cfg.Device, cfg.Logger = lib, "cpu", slog.New(h)
	svc, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	if svc.Device() != "cpu" || len(h.lines(slog.LevelInfo)) != 0 {
		t.Errorf("--device cpu: %q, logs %q", svc.Device(), h.lines(slog.LevelInfo))
	}
}

// On this GPU-less machine an explicit GPU (cuda, cuda:N, TensorRT) fails
// with ErrNoDevice and a one-line message naming what is missing, logging
// nothing; with AllowCPUFallback it runs on the CPU with one WARN line and
// Fallback says why.
func TestExplicitDeviceWithoutGPU(t *testing.T) {
	lib := testenv.ORTLib(t)
	for _, tc := range []struct {
		device, nvml string
		tensorRT     bool
	}{
		{"cuda", "", false},
		{"cuda:0", "", false},
		{"cuda:3", "", false},
		{"cuda", "/nonexistent/libnvidia-ml.so.1", false},
		{"auto", "/nonexistent/libnvidia-ml.so.1", true},
		{"cuda:0", "", true},
	} {
		name := fmt.Sprintf("device %s tensorrt=%v nvml %q", tc.device, tc.tensorRT, tc.nvml)
		h := &recordHandler{}
		cfg := DefaultConfig()
		cfg.ORTLib, cfg.Device, cfg.TensorRT, cfg.NVMLLib, cfg.Logger = lib, tc.device, tc.tensorRT, tc.nvml, slog.New(h)
		svc, err := New(cfg, nil)
		if err == nil {
			svc.Close()
			t.Errorf("%s: New ran on %s, want ErrNoDevice", name, svc.Device())
			continue
		}
		if !errors.Is(err, ErrNoDevice) || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), tc.device) {
			t.Errorf("%s: error %q, want one line matching ErrNoDevice naming the device", name, err)
		}
		if lines := h.lines(slog.LevelDebug); len(lines) != 0 {
			t.Errorf("%s: logged %q while failing; the error is the one line", name, lines)
		}

		h = &recordHandler{}
		cfg.AllowCPUFallback, cfg.Logger = true, slog.New(h)
		svc, err = New(cfg, nil)
		if err != nil {
			t.Errorf("%s with AllowCPUFallback: %v", name, err)
			continue
		}
		if svc.Device() != "cpu" || svc.Fallback() == "" || strings.Contains(svc.Fallback(), "\n") || !strings.Contains(svc.Fallback(), "CPU") {
			t.Errorf("%s with AllowCPUFallback: device %s, Fallback() %q; want the CPU and one line saying why", name, svc.Device(), svc.Fallback())
		}
		if warn := h.lines(slog.LevelWarn); len(warn) != 1 {
			t.Errorf("%s with AllowCPUFallback: warnings %q, want one", name, warn)
		}
		svc.Close()
	}
}

// With NVML listing a GPU but ONNX Runtime lacking the CUDA provider (the
// CPU build installed here), auto chooses the CPU in one INFO line; asking
// for TensorRT is explicit and fails naming the provider.
func TestMissingCUDAProviderFallsBack(t *testing.T) {
	if err := initORT(testenv.ORTLib(t)); err != nil {
		t.Fatal(err)
	}
	gpus := func() ([]gpuInfo, error) {
		return []gpuInfo{{Index: 0, Name: "fake", Free: 1 << 30}, {Index: 1, Name: "fake", Free: 8 << 30}}, nil
	}
	// The CUDA libraries count as found and loaded: the provider is what
	// is missing here.
	env := gpuEnv{list: gpus, libs: func(bool) (string, error) { return "", nil }, probe: ortCUDAProbe}
	h := &recordHandler{}
	d, note, err := chooseDevice("auto", false, false, FP32, env, slog.New(h))
	if err != nil {
		t.Fatal(err)
	}
	lines := h.lines(slog.LevelInfo)
	if d.gpu() || d.String() != "cpu" || note != "" || len(lines) != 1 || !strings.Contains(lines[0], "CUDA provider") || len(h.lines(slog.LevelWarn)) != 0 {
		t.Errorf("auto: chose %s (%q), logs %q; want the CPU and one INFO line about the CUDA provider", d, note, lines)
	}
	for _, spec := range []string{"auto", "cuda:1"} {
		_, _, err = chooseDevice(spec, spec == "auto", false, FP32, env, slog.New(&recordHandler{}))
		if !errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), "CUDA provider") {
			t.Errorf("%s (tensorrt=%v): %v, want ErrNoDevice naming the CUDA provider", spec, spec == "auto", err)
		}
	}
}

func TestDeviceChoice(t *testing.T) {
	gpus := func() ([]gpuInfo, error) {
		return []gpuInfo{{Index: 0, Free: 2 << 30}, {Index: 1, Free: 9 << 30}, {Index: 2, Free: 4 << 30}}, nil
	}
	ok := func(int, bool, Precision) error { return nil }
	libsOK := func(bool) (string, error) { return "", nil }
	env := func(list gpuLister) gpuEnv { return gpuEnv{list: list, libs: libsOK, probe: ok} }
	quiet := slog.New(&recordHandler{})
	// auto and cuda use every usable GPU; cuda:N the one named.
	for spec, want := range map[string]string{"auto": "cuda:0,1,2", "cuda": "cuda:0,1,2", "cuda:2": "cuda:2", "CUDA:0": "cuda:0", "cpu": "cpu", "": "cuda:0,1,2"} {
		d, _, err := chooseDevice(spec, false, false, FP32, env(gpus), quiet)
		if err != nil || d.String() != want {
			t.Errorf("%q: %v, %v; want %s", spec, d, err, want)
		}
	}
	for _, spec := range []string{"cuda:7", "tpu", "cuda:x", "cuda:-1"} {
		if _, _, err := chooseDevice(spec, false, false, FP32, env(gpus), quiet); err == nil {
			t.Errorf("%q: no error", spec)
		}
	}
	none := func() ([]gpuInfo, error) { return nil, nil }
	if d, _, err := chooseDevice("auto", false, false, FP32, env(none), quiet); err != nil || d.gpu() {
		t.Errorf("no GPUs: %v %v", d, err)
	}
	broken := func() ([]gpuInfo, error) { return nil, errors.New("nvml init: driver not loaded") }
	if d, _, err := chooseDevice("auto", false, false, FP32, env(broken), quiet); err != nil || d.gpu() {
		t.Errorf("NVML error, auto: %v %v", d, err)
	}
	if _, _, err := chooseDevice("cuda:0", false, false, FP32, env(broken), quiet); !errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), "driver not loaded") {
		t.Errorf("NVML error, cuda:0: %v, want ErrNoDevice with NVML's reason", err)
	}
	if d, note, err := chooseDevice("cuda:7", false, true, FP32, env(gpus), quiet); err != nil || d.gpu() || !strings.Contains(note, "3 GPU(s)") {
		t.Errorf("cuda:7 of 3 with fallback: %v %q %v, want the CPU and a note naming the 3 GPUs", d, note, err)
	}
}
