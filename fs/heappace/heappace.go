// Package heappace keeps Go's collector from doubling a mount's large,
// long-lived heap (issue 39), and hands an idle mount's free heap back
// (idle.go: ReleaseWhenIdle).
//
// With GOGC=100 the collector lets the heap grow to twice what was live
// after the last collection before it collects again. A mount's live heap
// is mostly its metadata budget's listings (--metadata-cache-size, 256 MiB
// by default), which live until evicted: a mount with a full budget was
// measured at 271 MiB live and 613 MiB resident after a DatasetFolder scan
// of 10,000,000 entries, and at 356 MiB live and 771 MiB resident after
// two epochs (docs/records/scale.md). The garbage the collector let pile up
// beside them was larger than anything the mount keeps.
//
// So the pacer sets Go's GC percentage after every collection from the
// heap that collection found live: the heap may grow by
// max(MinHeadroom, live/HeadroomDivisor) before the next one, i.e. GOGC=100
// for a small heap (a mount that has read little) and a fixed share of a
// large one. The listings are pointer-free byte blobs (namespace/packed.go),
// which the collector marks without scanning, so the extra collections cost
// little CPU (docs/records/scale.md measures it).
//
// It runs in the finalizer goroutine, once per collection: no goroutine of
// its own. GOGC set in the environment turns it off (the user's choice
// stands); a soft memory limit (GOMEMLIMIT, --memory-limit) works beside it,
// the collector running at whichever goal comes first.
package heappace

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
)

// Defaults: the heap grows by at least MinHeadroom, and by a
// HeadroomDivisor-th of the live heap when that is more.
const (
	MinHeadroom     = 32 << 20
	HeadroomDivisor = 8
	// maxPercent is GOGC's default, never exceeded; minPercent keeps a
	// heap of many GiB from collecting continuously.
	maxPercent = 100
	minPercent = 5
)

// Pacer sets Go's GC percentage after each collection (see the package
// comment). Start it with Start; Stop restores the percentage it found.
type Pacer struct {
	minHeadroom int64
	divisor     int64
	old         int        // the percentage before Start
	mu          sync.Mutex // orders adjust's setting after Stop's restoring
	stopped     atomic.Bool
	percent     atomic.Int32 // the percentage set last
	adjusts     atomic.Int64 // collections seen
}

// Start starts a pacer with the default headroom, unless GOGC is set in
// the environment (getenv("GOGC") != ""): then it returns nil.
func Start(getenv func(string) string) *Pacer {
	if getenv("GOGC") != "" {
		return nil
	}
	return start(MinHeadroom, HeadroomDivisor)
}

func start(minHeadroom, divisor int64) *Pacer {
	p := &Pacer{minHeadroom: minHeadroom, divisor: divisor}
	p.old = debug.SetGCPercent(maxPercent)
	p.percent.Store(maxPercent)
	p.arm()
	return p
}

// sentinel is what the pacer's finalizer is set on: large enough not to
// be a tiny allocation (whose finalizers may never run), unreachable as
// soon as it is made, so its finalizer runs after the next collection.
type sentinel struct {
	p   *Pacer
	pad [4]uintptr
}

func (p *Pacer) arm() {
	s := &sentinel{p: p}
	runtime.SetFinalizer(s, func(s *sentinel) {
		if s.p.stopped.Load() {
			return
		}
		s.p.adjust()
		s.p.arm()
	})
}

// pacedMetrics are the runtime/metrics samples adjust reads.
var pacedMetrics = []string{"/gc/heap/live:bytes", "/gc/scan/stack:bytes", "/gc/scan/globals:bytes"}

// adjust sets the percentage for the heap the last collection found live.
func (p *Pacer) adjust() {
	s := make([]metrics.Sample, len(pacedMetrics))
	for i, n := range pacedMetrics {
		s[i].Name = n
	}
	metrics.Read(s)
	var live, roots int64
	for i, x := range s {
		if x.Value.Kind() != metrics.KindUint64 {
			continue
		}
		if i == 0 {
			live = int64(x.Value.Uint64())
		} else {
			roots += int64(x.Value.Uint64())
		}
	}
	p.adjusts.Add(1)
	pc := Percent(live, roots, p.minHeadroom, p.divisor)
	p.mu.Lock()
	defer p.mu.Unlock()
	if int32(pc) != p.percent.Load() && !p.stopped.Load() {
		debug.SetGCPercent(pc)
		p.percent.Store(int32(pc))
	}
}

// Percent is the GC percentage that lets a heap of live bytes (and roots
// bytes of stacks and globals, which Go's goal counts too) grow by
// max(minHeadroom, live/divisor) before the next collection, within
// [minPercent, 100].
func Percent(live, roots, minHeadroom, divisor int64) int {
	base := live + roots
	if base <= 0 {
		return maxPercent
	}
	head := max(minHeadroom, live/divisor)
	pc := (100*head + base - 1) / base
	return int(min(maxPercent, max(minPercent, pc)))
}

// Percent returns the GC percentage the pacer set last (100 before the
// first collection).
func (p *Pacer) Percent() int {
	if p == nil {
		return 0
	}
	return int(p.percent.Load())
}

// Stop stops the pacer and restores the percentage Start found.
func (p *Pacer) Stop() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.stopped.Swap(true) {
		debug.SetGCPercent(p.old)
	}
}
