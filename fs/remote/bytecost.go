package remote

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/featurefs/featurefs/fs/figures"
)

// processCPU returns the CPU time this process has used (user and system,
// all threads): the figures' getrusage reading.
func processCPU() time.Duration {
	return time.Duration(figures.ProcessCPUSeconds() * float64(time.Second))
}

// The CPU a side spends per byte moved over the link (HTTP and the
// kernel's network stack), measured while a bandwidth probe passes: the
// split cost model adds it to each side's stage (split.Profile
// ByteSeconds).

// minByteCostBytes is the smallest probe whose CPU per byte is taken: a
// smaller one is mostly the request's fixed cost.
const minByteCostBytes = 256 << 10

// byteCost keeps the smallest CPU per byte seen over probes: other work
// running meanwhile only adds to a probe's CPU time, so the least is the
// nearest to the transfer's own cost. Its zero value has seen none.
type byteCost struct{ bits atomic.Uint64 }

// observe records a probe of n bytes that took cpu.
func (b *byteCost) observe(n int64, cpu time.Duration) {
	if n < minByteCostBytes || cpu <= 0 {
		return
	}
	v := cpu.Seconds() / float64(n)
	for {
		old := b.bits.Load()
		if old != 0 && math.Float64frombits(old) <= v {
			return
		}
		if b.bits.CompareAndSwap(old, math.Float64bits(v)) {
			return
		}
	}
}

// seconds returns the CPU seconds per byte, 0 if none was measured.
func (b *byteCost) seconds() float64 { return math.Float64frombits(b.bits.Load()) }
