package leakcheck

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// PeakHeap runs f while sampling the heap in use (runtime.MemStats
// HeapInuse) every interval, and returns the heap in use before f (after
// a collection) and the most seen while f ran (at least base): a test's
// bound on what f holds at once.
func PeakHeap(every time.Duration, f func()) (base, peak uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base = ms.HeapInuse
	var top atomic.Uint64
	top.Store(base)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > top.Load() {
				top.Store(ms.HeapInuse)
			}
			select {
			case <-done:
				return
			case <-time.After(every):
			}
		}
	})
	f()
	close(done)
	wg.Wait()
	return base, top.Load()
}
