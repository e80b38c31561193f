package extractor

// GPU batch sizing: from free GPU memory (NVML) and the memory one sample
// takes. The graph gives an estimate (Model.actBytes: every tensor up to
// the layer, an upper bound); on the GPU the memory is also measured, by
// running batches of 1 and of probeBatch zero images and reading how much
// free memory each took (ONNX Runtime's CUDA arena grows by what is asked,
// kSameAsRequested, and keeps it). The measured figure is used when the
// measurement worked, the estimate otherwise; both are logged.
//
// On an H100 (`make gpu-check`, docs/bench/gpu.md) the graph's estimate
// was 4x the measured figure for ResNet-50 layer12 (94 MB vs 23 MB per
// sample): the estimate is an upper bound, the measurement what sizes the
// batch. In CI the measurement runs against fakes (gpubatch_test.go).

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// maxGPUBatch is the largest batch size chosen on a GPU.
const maxGPUBatch = 256

// gpuInflight is how many batches run at once on a GPU (scheduler loops).
const gpuInflight = 3

// gpuMemShare is the part of the free GPU memory the batches may take; the
// rest is headroom for cuDNN workspaces, other sessions and other
// processes.
const gpuMemShare = 0.5

// probeBatch is the second batch size of the memory measurement.
const probeBatch = 8

// gpuBatchSize sizes a GPU batch from free memory: half of what is free after
// the weights, divided by the per-sample activation memory, rounded down to a
// power of two in [1, maxGPUBatch].
func gpuBatchSize(free uint64, weightBytes, perSample int64) int {
	if perSample <= 0 {
		return 1
	}
	avail := int64(float64(free)*gpuMemShare) - 2*weightBytes
	return pow2Floor(avail / perSample)
}

// pow2Floor is the largest power of two <= n, within [1, maxGPUBatch].
func pow2Floor(n int64) int {
	b := 1
	for b*2 <= int(min(n, maxGPUBatch)) {
		b *= 2
	}
	return b
}

// gpuSampleMemory measures the GPU memory one sample of layer l takes: it
// runs a batch of 1 (session creation and weights, workspaces) and then a
// batch of probe zero images through r, reading free memory (free) after
// each. It returns the bytes per sample and the free memory left after the
// second run; an error when free memory did not drop (the arena already
// had room: nothing learned) or a run failed.
func gpuSampleMemory(ctx context.Context, r runner, m *model, l Layer, probe int, free func() (uint64, error)) (perSample int64, left uint64, err error) {
	g := segment{m: m, l: l}
	ie, oe := m.InputElements(), int(l.Elements())
	in := make([]float32, probe*ie)
	out := make([]float32, probe*oe)
	if err := r.run(ctx, g, 1, in[:ie], out[:oe]); err != nil {
		return 0, 0, err
	}
	f1, err := free()
	if err != nil {
		return 0, 0, err
	}
	if err := r.run(ctx, g, probe, in, out); err != nil {
		return 0, 0, err
	}
	f2, err := free()
	if err != nil {
		return 0, 0, err
	}
	if f2 >= f1 {
		return 0, f2, fmt.Errorf("free GPU memory did not drop from batch 1 to %d (%d then %d bytes)", probe, f1, f2)
	}
	return int64(f1-f2) / int64(probe-1), f2, nil
}

// chooseGPUBatch picks the batch size of layer l of m on a GPU: the
// measured per-sample memory (or the graph's estimate when the measurement
// fails) against gpuMemShare of the free memory, shared by inflight batches
// at once. estimateFree is the free memory NVML reported when the device
// was chosen.
func chooseGPUBatch(ctx context.Context, r runner, m *model, l Layer, estimateFree uint64, inflight int, free func() (uint64, error), log *slog.Logger) int {
	t := time.Now()
	inflight = max(inflight, 1)
	est := m.actBytes[l.Index]
	estBatch := gpuBatchSize(estimateFree/uint64(inflight), m.weight, est)
	attrs := []any{"model", m.Name, "layer", l.Name, "inflight", inflight, "free_bytes", estimateFree,
		"estimated_bytes_per_sample", est, "estimated_batch", estBatch}
	per, left, err := gpuSampleMemory(ctx, r, m, l, probeBatch, free)
	if err != nil {
		log.Info("batch size from GPU memory (estimated; the measurement failed)", append(attrs, "batch", estBatch, "err", err)...)
		return estBatch
	}
	// The arena already holds probeBatch samples' worth; each of the
	// inflight batches needs batch*per.
	avail := int64(float64(left)*gpuMemShare) + int64(probeBatch)*per
	b := pow2Floor(avail / int64(inflight) / max(per, 1))
	log.Info("batch size from GPU memory", append(attrs, "measured_bytes_per_sample", per, "free_bytes_after_probe", left,
		"batch", b, "took", time.Since(t).Round(time.Millisecond))...)
	return b
}
