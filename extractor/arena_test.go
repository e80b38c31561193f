package extractor

import (
	"context"
	"slices"
	"testing"
)

// TestBatchesDoNotFaultTheirBuffersIn: once a CPU session has run a batch,
// the next batches of that size reuse its buffers (ONNX Runtime's arena,
// ort.go) instead of faulting them in from the kernel again. Without the
// arena, glibc handed ResNet-50's 28 MB buffer back after every batch at
// batch 4 on some heap layouts: 7,057 pages a batch (docs/records/memory.md,
// "ONNX Runtime's arena").
func TestBatchesDoNotFaultTheirBuffersIn(t *testing.T) {
	svc := newResNetService(t, nil)
	m := svc.reg.Load().models["resnet50"]
	// The scheduler runs full batches and partial ones.
	const layer = 12
	sizes := []int{4, 1, 4, 2, 4, 3}
	in := make([]float32, 4*m.InputElements())
	out := make([]float32, 4*int(m.Layers[layer].Elements()))
	run := func(n int) {
		t.Helper()
		if err := svc.RunBatch(context.Background(), "resnet50", layer, n, in[:n*m.InputElements()], out[:n*int(m.Layers[layer].Elements())]); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range sizes {
		run(n)
	}
	var faults []int64
	for range 4 {
		for _, n := range sizes {
			f0 := minorFaults()
			run(n)
			faults = append(faults, minorFaults()-f0)
		}
	}
	slices.Sort(faults)
	t.Logf("page faults per batch of 1-4 (ResNet-50 to layer12), sorted: %v", faults)
	// Go's heap and other goroutines fault now and then: one batch may;
	// a batch that faulted its activations in takes thousands of pages.
	if f := faults[len(faults)-2]; f > 256 {
		t.Errorf("%d batches of %d faulted more than 256 pages (sorted: %v): the batches fault their buffers in", len(faults)-slices.IndexFunc(faults, func(v int64) bool { return v > 256 }), len(faults), faults)
	}
}
