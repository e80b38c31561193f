package features

import (
	"context"
	"testing"
)

// TestPrefetchByteBoundFollowsBatches: unset, prefetch's byte bound holds
// its in-flight bound of extractions (a GPU's 4 x 256 layer12 ones,
// about 1.5 MB each, where a fixed 256 MiB held fewer than one batch, as
// measured on an H100), at least 256 MiB and at most 2 GiB; set, it is
// what was set.
func TestPrefetchByteBoundFollowsBatches(t *testing.T) {
	const layer12 = 110_000 + 3*224*224*4 + 802_944 // object, decoded input, feature
	for _, c := range []struct {
		name     string
		inFlight int
		set      int64
		cost     int64
		want     int64
	}{
		{"GPU layer12", 1024, 0, layer12, 1024 * layer12},
		{"CPU layer12", 32, 0, layer12, defaultPrefetchBytes},
		{"huge features", 1024, 0, 8 << 20, maxAutoPrefetchBytes},
		{"set", 1024, 64 << 20, layer12, 64 << 20},
	} {
		p := &prefetcher{cfg: PrefetchConfig{MaxInFlight: c.inFlight, MaxBytes: c.set}}
		if got := p.maxBytes(p.maxInFlight(), c.cost); got != c.want {
			t.Errorf("%s: byte bound %d, want %d", c.name, got, c.want)
		}
		if got := p.maxBytes(p.maxInFlight(), c.cost); c.name == "GPU layer12" && got/c.cost < 256 {
			t.Errorf("%s: the bound holds %d extractions, less than a batch of 256", c.name, got/c.cost)
		}
	}
	b := newBudget(func() int { return 1024 }, (&prefetcher{cfg: PrefetchConfig{MaxInFlight: 1024}}).maxBytes)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // acquire then takes what fits and returns at once when nothing does
	for range 300 {
		if b.acquire(ctx, layer12) != nil {
			break
		}
	}
	if n, _, _, _, maxB := b.figures(); n < 256 || maxB != 1024*layer12 {
		t.Errorf("a budget of the GPU's bound took %d layer12 extractions (bound %d bytes), want at least a batch of 256", n, maxB)
	}
}
