package extractor

// #include <malloc.h>
import "C"

import (
	"fmt"
	"os"
	"runtime/debug"
	"sync"
	"time"
)

// CPU sessions keep their activation buffers in ONNX Runtime's arena
// (ort.go): glibc handed freed buffers back to the kernel on its own, and
// every batch faulted them in again. What still comes from the C heap (a
// session's weights, its arena's regions, other allocations) is reused
// where it can be: what one Run frees serves the next without page
// faults, and without the munmap whose
// TLB shootdown interrupts the decode workers on the other cores (with a
// 1 MiB mmap threshold every Run of ResNet-50 to layer12 mapped and
// unmapped about 7 MB: 1,765 page faults and 5 ms of system time per
// image). Fixed values, so glibc does not move them: buffers over
// mmapThreshold (a large batch's activations) are still mapped and
// unmapped; up to trimThreshold of free memory stays at the top of a
// heap while batches run; and the scheduler trims the heaps once it has
// had no work for a second (schedConfig.idle), so an idle mount holds
// what its sessions hold, not the last batch's activations.
// trimThreshold is 32 MiB, not more: glibc's other arenas grow in heaps of
// at most 64 MiB, and a heap's top is handed back only once it reaches
// trimThreshold, so at 64 MiB or more they never were.
//
// arenaMax bounds glibc's arenas. By default glibc makes up to 8 per core,
// one for each thread that meets a locked one: the decode workers, ONNX
// Runtime's threads and Go's cgo threads each freed buffers into arenas of
// their own, which no other thread reused, and each arena kept up to
// trimThreshold. Measured at 06087ba (1M entries, defaults, prefetch
// busy): 374 MiB of free chunks, 7 MiB in use; MALLOC_ARENA_MAX=2, 34
// MiB. Two arenas on a 2-core host cost no measurable extraction speed
// (docs/records/memory.md).
//
// busyTrimFree is what free chunks the C heap may hold while the mount
// works: an inference loop past it after a batch trims the heaps, at most
// once every busyTrimEvery (trimBusy), so a busy mount (prefetch of a whole
// tree) holds its activations, not every arena's high-water mark; the idle
// trim alone never ran while prefetch kept the scheduler busy. It trims
// when the free chunks grew by busyTrimGrowth since the last trim (the
// heaps took new memory), or busyTrimAge after it: glibc counts a trimmed
// chunk as free still, so past busyTrimFree a check of the count alone
// trimmed every 250 ms for the whole life of a process whose heaps had
// once grown (a server that had opened a model's prefix sessions), and
// every batch faulted its activations back in: a featurefs serve at half
// a core sending MobileNetV3-Large's layer1 spent 13% of its CPU in page
// faults under ONNX Runtime and delivered 58-69 samples/s; trimming on
// growth, 68-89, and a mount's peaks no higher (docs/records/memory.md). Measured at
// ebd50b2 (1M entries, defaults, prefetch busy, 2 epochs; the C heap's
// resident pages less its bytes in use, max of a 1 s trace, 3 rounds):
// every 1 s with a 256 MiB trimThreshold, 405, 57 and 99 MiB (the first
// second of work touched hundreds of MiB before a trim); 32 MiB alone, 140,
// 79, 141; every 250 ms alone, 60, 62, 33; both, 11, 5 and 35 MiB, and
// ResNet-50 to layer12 at batch 4 as fast (2 cores, 18 interleaved runs:
// 23.8 vs 23.6 images/s, 80.9 vs 81.5 ms of CPU per image).
const (
	mmapThreshold  = 32 << 20
	trimThreshold  = 32 << 20
	arenaMax       = 2
	busyTrimFree   = 64 << 20
	busyTrimEvery  = 250 * time.Millisecond
	busyTrimGrowth = 16 << 20
	busyTrimAge    = 5 * time.Second
)

func init() {
	C.mallopt(C.M_MMAP_THRESHOLD, mmapThreshold)
	C.mallopt(C.M_TRIM_THRESHOLD, trimThreshold)
	C.mallopt(C.M_ARENA_MAX, arenaMax)
}

// busyTrim rate-limits trimBusy.
var busyTrim struct {
	sync.Mutex
	last    time.Time // GUARDED_BY(busyTrim): the last check
	trimmed time.Time // GUARDED_BY(busyTrim): the last trim
	free    int64     // GUARDED_BY(busyTrim): the free chunks then
	count   int64     // GUARDED_BY(busyTrim)
}

// trimBusy is called by the inference loops after every batch
// (schedConfig.afterBatch): it trims the C heap when its free chunks exceed
// busyTrimFree, at most once every busyTrimEvery. glibc counts a trimmed
// chunk as free still (its pages are handed back, not the chunk), so past
// the bound this trims every busyTrimEvery while batches run: malloc_trim
// of a few hundred MiB of heap takes about a millisecond, and the pages a
// next batch touches again fault back in.
func trimBusy() {
	busyTrim.Lock()
	defer busyTrim.Unlock()
	if time.Since(busyTrim.last) < busyTrimEvery {
		return
	}
	now := time.Now()
	busyTrim.last = now
	_, free := cHeap()
	if shouldBusyTrim(free, busyTrim.free, now.Sub(busyTrim.trimmed)) {
		trimCHeap()
		busyTrim.count++
		busyTrim.trimmed, busyTrim.free = now, free
	}
}

// shouldBusyTrim says whether a heap with free bytes in free chunks is
// trimmed, lastFree having been free at the last trim, since ago.
func shouldBusyTrim(free, lastFree int64, since time.Duration) bool {
	return free > busyTrimFree && (free > lastFree+busyTrimGrowth || since >= busyTrimAge)
}

// busyTrims returns how many times trimBusy trimmed.
func busyTrims() int64 {
	busyTrim.Lock()
	defer busyTrim.Unlock()
	return busyTrim.count
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

// rssBytes returns the process's resident set (statm), 0 when unknown.
func rssBytes() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	var size, res int64
	if _, err := fmt.Sscan(string(b), &size, &res); err != nil {
		return 0
	}
	return res * int64(os.Getpagesize())
}
