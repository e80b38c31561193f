package heappace

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		live, roots int64
		want        int
	}{
		{0, 0, 100},
		{20 * mib, 1 * mib, 100},          // a small heap: GOGC's default
		{64 * mib, 0, 50},                 // 32 MiB of 64
		{271 * mib, 1 * mib, 13},          // a full 256 MiB budget: 34 MiB
		{2048 * mib, 0, 13},               // live/8
		{64 << 30, 128 << 30, minPercent}, // never below the floor
		{256 * mib, 256 * mib, 7},         // roots count in the base
	} {
		if got := Percent(tc.live, tc.roots, MinHeadroom, HeadroomDivisor); got != tc.want {
			t.Errorf("Percent(%d MiB live, %d MiB roots) = %d, want %d", tc.live/mib, tc.roots/mib, got, tc.want)
		}
	}
}

func heapGoal() int64 {
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// waitPercent collects until the pacer has set a percentage for which ok
// holds (its finalizer runs after a collection), or fails.
func waitPercent(t *testing.T, p *Pacer, ok func(int) bool) int {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
		if pc := p.Percent(); ok(pc) {
			return pc
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pacer's percentage is %d after 5 s of collections (%d seen)", p.Percent(), p.adjusts.Load())
		}
	}
}

// TestPacerFollowsTheLiveHeap: with 512 MiB live, the next collection's
// goal is the live heap plus an eighth (not twice it, GOGC=100's); once it
// is garbage, GOGC is 100 again; Stop restores the percentage it found.
func TestPacerFollowsTheLiveHeap(t *testing.T) {
	before := debug.SetGCPercent(77)
	defer debug.SetGCPercent(before)
	p := start(MinHeadroom, HeadroomDivisor)
	live := make([]byte, 512<<20) // pointer-free, like the listings
	pc := waitPercent(t, p, func(pc int) bool { return pc < 100 })
	if pc < 10 || pc > 15 {
		t.Errorf("GC percent %d with 512 MiB live, want about 12.5", pc)
	}
	if g := heapGoal(); g > int64(len(live))*5/4 {
		t.Errorf("heap goal %d MiB with %d MiB live: the pacer should hold it near live + an eighth", g>>20, len(live)>>20)
	}
	runtime.KeepAlive(live)
	live = nil
	waitPercent(t, p, func(pc int) bool { return pc == 100 })
	p.Stop()
	if got := debug.SetGCPercent(77); got != 77 {
		t.Errorf("after Stop the GC percent is %d, want the 77 it found", got)
	}
	n := p.adjusts.Load()
	runtime.GC()
	runtime.GC()
	time.Sleep(20 * time.Millisecond)
	if p.adjusts.Load() > n+1 {
		t.Errorf("the pacer adjusted %d times after Stop", p.adjusts.Load()-n)
	}
}

func TestStartLeavesGOGCAlone(t *testing.T) {
	if p := Start(func(k string) string {
		if k == "GOGC" {
			return "50"
		}
		return ""
	}); p != nil {
		p.Stop()
		t.Fatal("Start paced the collector with GOGC set in the environment")
	}
}
