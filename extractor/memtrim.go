package extractor

// #include <malloc.h>
import "C"

import "runtime/debug"

func init() {
	// A fixed mmap threshold: glibc otherwise raises it (up to 32 MiB) after
	// the first large free, and activation buffers then stay on the heap.
	C.mallopt(C.M_MMAP_THRESHOLD, 1<<20)
}

// releaseMemory hands freed memory back to the operating system: Go's heap
// (model bytes, pruned copies) and the C heap ONNX Runtime allocated for
// sessions that were destroyed. Loading a model builds and drops a session
// with every tensor as an output; without this, a mount kept ~450 MiB of
// that garbage resident for its whole life.
func releaseMemory() {
	debug.FreeOSMemory()
	trimCHeap()
}

// trimCHeap returns the C heap's free pages to the operating system, after a
// session (its weights and arena) was destroyed.
func trimCHeap() { C.malloc_trim(0) }
