package extractor

// #include <malloc.h>
import "C"

import "runtime/debug"

// Activation buffers (ONNX Runtime runs CPU sessions without its arena,
// ort.go) come from the C heap and are reused run after run: what one Run
// frees serves the next without page faults, and without the munmap whose
// TLB shootdown interrupts the decode workers on the other cores (with a
// 1 MiB mmap threshold every Run of ResNet-50 to layer12 mapped and
// unmapped about 7 MB: 1,765 page faults and 5 ms of system time per
// image). Fixed values, so glibc does not move them: buffers over
// mmapThreshold (a large batch's activations) are still mapped and
// unmapped; up to trimThreshold of free memory stays at the top of a
// heap while batches run; and the scheduler trims the heaps once it has
// had no work for a second (schedConfig.idle), so an idle mount holds
// what its sessions hold, not the last batch's activations.
const (
	mmapThreshold = 32 << 20
	trimThreshold = 256 << 20
)

func init() {
	C.mallopt(C.M_MMAP_THRESHOLD, mmapThreshold)
	C.mallopt(C.M_TRIM_THRESHOLD, trimThreshold)
}

// releaseMemory hands freed memory back to the operating system: Go's heap
// (model bytes, pruned copies) and the C heap ONNX Runtime allocated for
// sessions that were destroyed. Loading a model whose shapes the graph's
// own inference cannot give builds and drops a session with every tensor as
// an output (model.go, ortShapes); without this, a mount kept ~450 MiB of
// that garbage resident for its whole life.
func releaseMemory() {
	debug.FreeOSMemory()
	trimCHeap()
}

// cHeap returns the C heap's bytes in use (small blocks and mmapped
// ones) and free (held by malloc, not returned), over every arena.
func cHeap() (inUse, free int64) {
	m := C.mallinfo2()
	return int64(m.uordblks) + int64(m.hblkhd), int64(m.fordblks)
}

// trimCHeap returns the C heap's free pages to the operating system, after a
// session (its weights and arena) was destroyed and when the scheduler has
// been idle.
func trimCHeap() { C.malloc_trim(0) }
