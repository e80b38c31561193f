package fs

import (
	"runtime/debug"
	"time"
)

// An idle mount hands back what its last burst of work took (issue 39:
// "idle means flat"). Go's collector keeps the heap it grew to in a burst
// (about twice the live heap, GOGC=100) and returns free pages to the
// operating system only gradually: a mount measured after a DatasetFolder
// scan of 1,000,000 entries and two epochs held 102 MiB of free heap, and
// its resident set still moved by tens of MiB over the next minutes while
// nothing read it (docs/bench/scale.md). So once neither the kernel nor
// the pipeline has asked anything of the mount for idleRelease, after
// some work, the tree collects and returns every free page
// (debug.FreeOSMemory), once per idle period: a full collection of the
// live heap (the metadata budget's listings, at most its bound), paid
// when nothing else runs. The extractor returns the C heap's free pages
// after one second without work (extractor/memtrim.go).

// idleRelease is how long the mount stays without requests before it
// hands its free memory back.
const idleRelease = 2 * time.Second

// activity is a count that grows with every request the tree answers and
// every call the pipeline makes.
func (f *FS) activity() int64 {
	c := &f.stats
	return c.lookups.Load() + c.reads.Load() + c.opens.Load() + f.p.Activity()
}

// startIdleRelease starts the goroutine, the tree's owner's, that returns
// the free memory once the mount has been idle for idleRelease after some
// work.
func (f *FS) startIdleRelease() {
	done := f.owner.Context().Done()
	f.owner.Go(func() {
		tick := time.NewTicker(idleRelease / 4)
		defer tick.Stop()
		last, busy, quiet := f.activity(), false, time.Now()
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				a := f.activity()
				switch {
				case a != last:
					last, busy, quiet = a, true, now
				case busy && now.Sub(quiet) >= idleRelease:
					busy = false
					debug.FreeOSMemory()
					f.stats.memoryReleases.Add(1)
				}
			}
		}
	})
}
