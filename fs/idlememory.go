package fs

import (
	"runtime/debug"
	"runtime/metrics"
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
// when nothing else runs, and again while idle if the heap grows back
// (below). The extractor returns the C heap's free pages after one second
// without work (extractor/memtrim.go).

// idleRelease is how long the mount stays without requests before it
// hands its free memory back.
const idleRelease = 2 * time.Second

// While the mount stays idle, the cache's background work goes on
// (persisting the access order, Badger's memtable flushes and
// compactions) and allocates: a mount measured after its first idle
// release grew from 234 to 278 MiB over the next 3.5 minutes without a
// request. So an idle mount releases again when Go's resident heap has
// grown by idleRegrowth since the last release, at most once per
// idleReleaseEvery.
var (
	idleRegrowth     int64 = 8 << 20
	idleReleaseEvery       = 10 * time.Second // a variable for the tests
)

// goHeapResident returns the Go heap's resident bytes: objects, the
// unused part of spans in use, and free pages not returned.
func goHeapResident() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/unused:bytes"},
		{Name: "/memory/classes/heap/free:bytes"}}
	metrics.Read(s)
	var n int64
	for _, x := range s {
		if x.Value.Kind() == metrics.KindUint64 {
			n += int64(x.Value.Uint64())
		}
	}
	return n
}

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
	every, regrowth := idleReleaseEvery, idleRegrowth
	f.owner.Go(func() {
		tick := time.NewTicker(idleRelease / 4)
		defer tick.Stop()
		// From 0, not the activity when this goroutine starts: work done
		// before it first runs (a read right after the mount) is work too.
		var last int64
		busy, quiet := false, time.Now()
		var released time.Time // the last release of this idle period (zero: none yet)
		var base int64         // goHeapResident after it
		release := func(now time.Time) {
			debug.FreeOSMemory()
			f.stats.memoryReleases.Add(1)
			released, base = now, goHeapResident()
		}
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				a := f.activity()
				switch {
				case a != last:
					last, busy, quiet, released = a, true, now, time.Time{}
				case busy && now.Sub(quiet) >= idleRelease:
					busy = false
					release(now)
				case !busy && !released.IsZero() && now.Sub(released) >= every && goHeapResident() > base+regrowth:
					release(now)
				}
			}
		}
	})
}
