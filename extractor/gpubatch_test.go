package extractor

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
)

// fakeGPU is GPU memory as ONNX Runtime's CUDA arena uses it
// (kSameAsRequested): a run of n samples needs base + n*per bytes; the
// arena grows to the largest need so far and never shrinks.
type fakeGPU struct {
	mu        sync.Mutex
	total     uint64
	base, per uint64
	arena     uint64
	runs      []int
}

func (g *fakeGPU) run(_ context.Context, sg segment, n int, in, out []float32) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(in) != n*sg.inputElems() || len(out) != n*int(sg.l.Elements()) {
		return errors.New("buffers do not match n")
	}
	g.arena = max(g.arena, g.base+uint64(n)*g.per)
	g.runs = append(g.runs, n)
	return nil
}

func (g *fakeGPU) free() (uint64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.total - g.arena, nil
}

func TestGPUSampleMemoryMeasured(t *testing.T) {
	m := testModel()
	m.actBytes = []int64{100 << 20} // the graph's (pessimistic) estimate
	g := &fakeGPU{total: 80 << 30, base: 900 << 20, per: 12 << 20}
	per, left, err := gpuSampleMemory(context.Background(), g, m, m.Layers[0], probeBatch, g.free)
	if err != nil {
		t.Fatal(err)
	}
	if per != 12<<20 || left != g.total-(900<<20)-probeBatch*(12<<20) {
		t.Errorf("measured %d bytes per sample, %d left; want %d and %d", per, left, 12<<20, g.total-(900<<20)-probeBatch*(12<<20))
	}
	if len(g.runs) != 2 || g.runs[0] != 1 || g.runs[1] != probeBatch {
		t.Errorf("runs %v, want 1 then %d", g.runs, probeBatch)
	}

	// The choice: gpuMemShare of what is left, over 3 batches in flight,
	// at the measured 12 MiB, not the estimated 100 MiB.
	h := &recordHandler{}
	g = &fakeGPU{total: 80 << 30, base: 900 << 20, per: 12 << 20}
	b := chooseGPUBatch(context.Background(), g, m, m.Layers[0], 80<<30, 3, g.free, slog.New(h))
	leftF := float64(80<<30 - 900<<20 - probeBatch*12<<20)
	want := pow2Floor(int64((leftF*gpuMemShare + probeBatch*float64(12<<20)) / 3 / float64(12<<20)))
	if b != want || b < 256 {
		t.Errorf("batch %d on 80 GiB at 12 MiB a sample, 3 in flight; want %d (the cap)", b, want)
	}
	small := &fakeGPU{total: 8 << 30, base: 900 << 20, per: 12 << 20}
	bs := chooseGPUBatch(context.Background(), small, m, m.Layers[0], 8<<30, 3, small.free, slog.New(h))
	avail := float64(8<<30-900<<20-probeBatch*12<<20)*gpuMemShare + probeBatch*float64(12<<20)
	if want := pow2Floor(int64(avail / 3 / float64(12<<20))); bs != want || want >= maxGPUBatch || float64(3*bs*(12<<20)) > avail {
		t.Errorf("batch %d on 8 GiB, want %d: the largest power of two whose 3 batches fit in the share", bs, want)
	}
	lines := h.lines(slog.LevelInfo)
	if len(lines) != 2 || !strings.Contains(lines[0], "measured_bytes_per_sample=12582912") || !strings.Contains(lines[0], "estimated_bytes_per_sample=104857600") {
		t.Errorf("log %q: want the measured and the estimated bytes per sample", lines)
	}
}

// When free memory does not drop (another process freed some, the arena
// had room), nothing is learned: the estimate sizes the batch, and the log
// says so.
func TestGPUBatchFallsBackToEstimate(t *testing.T) {
	m := testModel()
	m.actBytes = []int64{100 << 20}
	m.weight = 100 << 20
	g := &fakeGPU{total: 16 << 30, base: 1 << 30, per: 0}
	h := &recordHandler{}
	b := chooseGPUBatch(context.Background(), g, m, m.Layers[0], 16<<30, 1, g.free, slog.New(h))
	if want := gpuBatchSize(16<<30, m.weight, 100<<20); b != want {
		t.Errorf("batch %d, want the estimate's %d", b, want)
	}
	lines := h.lines(slog.LevelInfo)
	if len(lines) != 1 || !strings.Contains(lines[0], "estimated; the measurement failed") || !strings.Contains(lines[0], "did not drop") {
		t.Errorf("log %q", lines)
	}
	// A failing run: the estimate too, and the log says why.
	bad := func(context.Context, segment, int, []float32, []float32) error {
		return errors.New("cuda error 2")
	}
	h = &recordHandler{}
	b = chooseGPUBatch(context.Background(), runnerFunc(bad), m, m.Layers[0], 16<<30, 2, g.free, slog.New(h))
	if want := gpuBatchSize(8<<30, m.weight, 100<<20); b != want {
		t.Errorf("failing runs, 2 in flight: batch %d, want the estimate's %d", b, want)
	}
	if lines := h.lines(slog.LevelInfo); len(lines) != 1 || !strings.Contains(lines[0], "cuda error 2") {
		t.Errorf("log %q", lines)
	}
}

// runnerFunc adapts a function to runner.
type runnerFunc func(ctx context.Context, g segment, n int, in, out []float32) error

func (f runnerFunc) run(ctx context.Context, g segment, n int, in, out []float32) error {
	return f(ctx, g, n, in, out)
}

func TestGPUBatchSizeFollowsFreeMemory(t *testing.T) {
	per := int64(20 << 20) // 20 MiB of activations per sample
	small := gpuBatchSize(1<<30, 100<<20, per)
	large := gpuBatchSize(40<<30, 100<<20, per)
	if small < 1 || large <= small || large > maxGPUBatch {
		t.Errorf("batch sizes %d (1 GiB free) and %d (40 GiB free)", small, large)
	}
	if int64(small)*per > (1<<30)/2 {
		t.Errorf("batch %d of %d bytes each exceeds half of 1 GiB", small, per)
	}
	if b := gpuBatchSize(100<<20, 100<<20, per); b != 1 {
		t.Errorf("almost no memory: batch %d, want 1", b)
	}
	for n, want := range map[int64]int{-5: 1, 0: 1, 1: 1, 3: 2, 64: 64, 100: 64, math.MaxInt32: maxGPUBatch} {
		if got := pow2Floor(n); got != want {
			t.Errorf("pow2Floor(%d) = %d, want %d", n, got, want)
		}
	}
}
