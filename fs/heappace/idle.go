package heappace

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
// nothing read it (docs/records/scale.md). So once neither the kernel nor
// the pipeline has asked anything of the mount for idleRelease, after
// some work, the mount collects and returns every free page
// (debug.FreeOSMemory), once per idle period: a full collection of the
// live heap (the metadata budget's listings, at most its bound), paid
// when nothing else runs, and again while idle if the heap grows back
// (below). The extractor returns the C heap's free pages after one second
// without work (extractor/memtrim.go).

// Idle is when an idle mount releases: after Release without requests
// (after some work), and again while idle, at most once per Every, when
// Go's resident heap has grown by Regrowth since the last release. While
// the mount stays idle, the cache's background work goes on (persisting
// the access order, Badger's memtable flushes and compactions) and
// allocates: a mount measured after its first idle release grew from 234
// to 278 MiB over the next 3.5 minutes without a request.
type Idle struct {
	Release, Every time.Duration
	Regrowth       int64
}

// DefaultIdle is the mount's.
var DefaultIdle = Idle{Release: 2 * time.Second, Every: 10 * time.Second, Regrowth: 8 << 20}

// resident returns the Go heap's resident bytes: objects, the unused part
// of spans in use, and free pages not returned.
func resident() int64 {
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

// ReleaseWhenIdle returns the free memory (debug.FreeOSMemory, then
// released) whenever activity, a count that grows with every request the
// mount answers, has not moved for c.Release after it did, and again
// while idle as c says; it returns when done is closed. Its caller runs
// it in a goroutine it owns.
func ReleaseWhenIdle(done <-chan struct{}, c Idle, activity func() int64, released func()) {
	tick := time.NewTicker(c.Release / 4)
	defer tick.Stop()
	// From 0, not the activity when this starts: work done before it
	// first runs (a read right after the mount) is work too.
	var last int64
	busy, quiet := false, time.Now()
	var at time.Time // the last release of this idle period (zero: none yet)
	var base int64   // resident after it
	release := func(now time.Time) {
		debug.FreeOSMemory()
		released()
		at, base = now, resident()
	}
	for {
		select {
		case <-done:
			return
		case now := <-tick.C:
			a := activity()
			switch {
			case a != last:
				last, busy, quiet, at = a, true, now, time.Time{}
			case busy && now.Sub(quiet) >= c.Release:
				busy = false
				release(now)
			case !busy && !at.IsZero() && now.Sub(at) >= c.Every && resident() > base+c.Regrowth:
				release(now)
			}
		}
	}
}
