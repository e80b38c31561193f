package extractor

import (
	"context"
	"errors"
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
// and --device cuda:0 both end up on the CPU with one clear log line.
func TestDeviceFallsBackToCPUWithOneLogLine(t *testing.T) {
	lib := testenv.ORTLib(t)
	for _, tc := range []struct{ device, nvml string }{
		{"auto", ""},
		{"cuda:0", ""},
		{"auto", "/nonexistent/libnvidia-ml.so.1"},
		{"cuda:0", "/nonexistent/libnvidia-ml.so.1"},
		{"cuda", "/nonexistent/libnvidia-ml.so.1"},
	} {
		h := &recordHandler{}
		cfg := DefaultConfig()
		cfg.ORTLib, cfg.Device, cfg.NVMLLib, cfg.Logger = lib, tc.device, tc.nvml, slog.New(h)
		svc, err := New(cfg, nil)
		if err != nil {
			t.Fatalf("device %s: %v", tc.device, err)
		}
		if got := svc.Device(); got != "cpu" {
			t.Errorf("device %s (nvml %q): Device() = %q on a machine without a usable GPU", tc.device, tc.nvml, got)
		}
		if got := svc.Stats().Device; got != "cpu" {
			t.Errorf("Stats().Device = %q", got)
		}
		lines := h.lines(slog.LevelInfo)
		if len(lines) != 1 || !strings.Contains(lines[0], "CPU") || !strings.Contains(lines[0], "device="+tc.device) {
			t.Errorf("device %s (nvml %q): log lines %q, want exactly one saying it runs on the CPU", tc.device, tc.nvml, lines)
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

// With NVML listing a GPU but ONNX Runtime lacking the CUDA provider (the
// CPU build installed here), the choice is the CPU, in one line.
func TestMissingCUDAProviderFallsBack(t *testing.T) {
	if err := initORT(testenv.ORTLib(t)); err != nil {
		t.Fatal(err)
	}
	gpus := func() ([]gpuInfo, error) {
		return []gpuInfo{{Index: 0, Name: "fake", Free: 1 << 30}, {Index: 1, Name: "fake", Free: 8 << 30}}, nil
	}
	for _, trt := range []bool{false, true} {
		h := &recordHandler{}
		d, err := chooseDevice("auto", trt, gpus, ortCUDAProbe, slog.New(h))
		if err != nil {
			t.Fatal(err)
		}
		lines := h.lines(slog.LevelInfo)
		if d.gpu || d.String() != "cpu" || len(lines) != 1 || !strings.Contains(lines[0], "CUDA provider") {
			t.Errorf("tensorrt=%v: chose %s, logs %q; want the CPU and one line about the CUDA provider", trt, d, lines)
		}
	}
}

func TestDeviceChoice(t *testing.T) {
	gpus := func() ([]gpuInfo, error) {
		return []gpuInfo{{Index: 0, Free: 2 << 30}, {Index: 1, Free: 9 << 30}, {Index: 2, Free: 4 << 30}}, nil
	}
	ok := func(int, bool) error { return nil }
	quiet := slog.New(&recordHandler{})
	for spec, want := range map[string]string{"auto": "cuda:1", "cuda": "cuda:1", "cuda:2": "cuda:2", "CUDA:0": "cuda:0", "cpu": "cpu", "": "cuda:1"} {
		d, err := chooseDevice(spec, false, gpus, ok, quiet)
		if err != nil || d.String() != want {
			t.Errorf("%q: %v, %v; want %s", spec, d, err, want)
		}
	}
	for _, spec := range []string{"cuda:7", "tpu", "cuda:x", "cuda:-1"} {
		if _, err := chooseDevice(spec, false, gpus, ok, quiet); err == nil {
			t.Errorf("%q: no error", spec)
		}
	}
	none := func() ([]gpuInfo, error) { return nil, nil }
	if d, err := chooseDevice("auto", false, none, ok, quiet); err != nil || d.gpu {
		t.Errorf("no GPUs: %v %v", d, err)
	}
	broken := func() ([]gpuInfo, error) { return nil, errors.New("nvml init: driver not loaded") }
	if d, err := chooseDevice("cuda:0", false, broken, ok, quiet); err != nil || d.gpu {
		t.Errorf("NVML error: %v %v", d, err)
	}
}

func TestGPUBatchSizeFollowsFreeMemory(t *testing.T) {
	per := int64(20 << 20) // 20 MiB of activations per sample
	small := gpuBatchSize(1<<30, 100<<20, per)
	large := gpuBatchSize(40<<30, 100<<20, per)
	if small < 1 || large <= small || large > 256 {
		t.Errorf("batch sizes %d (1 GiB free) and %d (40 GiB free)", small, large)
	}
	if int64(small)*per > (1<<30)/2 {
		t.Errorf("batch %d of %d bytes each exceeds half of 1 GiB", small, per)
	}
	if b := gpuBatchSize(100<<20, 100<<20, per); b != 1 {
		t.Errorf("almost no memory: batch %d, want 1", b)
	}
}
