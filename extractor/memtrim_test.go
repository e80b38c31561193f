package extractor

import (
	"testing"
	"time"
)

// TestBusyTrimOnGrowth: past busyTrimFree the heaps are trimmed when
// their free chunks grew since the last trim, or busyTrimAge after it;
// not at every check, as glibc still counts a trimmed chunk as free (a
// trim every 250 ms faulted a busy server's activations back in).
func TestBusyTrimOnGrowth(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name           string
		free, lastFree int64
		since          time.Duration
		want           bool
	}{
		{"under the bound", busyTrimFree - 1, 0, time.Hour, false},
		{"first time past it", busyTrimFree + 1, 0, 0, true},
		{"no growth since the last trim", 300 * mib, 300 * mib, time.Second, false},
		{"less growth than busyTrimGrowth", 300 * mib, 300*mib - busyTrimGrowth, time.Second, false},
		{"grown by more", 300 * mib, 300*mib - busyTrimGrowth - 1, time.Second, true},
		{"less free than then", 200 * mib, 300 * mib, time.Second, false},
		{"busyTrimAge since", 300 * mib, 300 * mib, busyTrimAge, true},
	} {
		if got := shouldBusyTrim(c.free, c.lastFree, c.since); got != c.want {
			t.Errorf("%s: free %d, %d at the last trim %v ago: trim %v, want %v", c.name, c.free, c.lastFree, c.since, got, c.want)
		}
	}
}
