package remote

import (
	"testing"
	"time"

	"github.com/featurefs/featurefs/extractor/split"
)

// calWindow counts a window only where one freeze layer delivered every
// sample by its plan in use, after calFlushSamples, with no probe.
func TestCalWindow(t *testing.T) {
	k := split.CalKey{Freeze: 8, Split: 3}
	t0 := time.Unix(100, 0)
	snap := func(at time.Duration, srvN int64, probes int64, served ...split.Served) *calSnap {
		return &calSnap{at: t0.Add(at), serverCPU: 1, serverSamples: srvN, clientCPU: 1, probes: probes, served: map[string][]split.Served{"m": served}}
	}
	a := snap(0, 100, 2, split.Served{Key: k, Total: 100, Run: 40})
	for _, tc := range []struct {
		name        string
		a, b        *calSnap
		ok, ready   bool
		wantSamples int64
	}{
		{"ready", a, snap(time.Second, 120, 2, split.Served{Key: k, Total: 120, Run: 60}), true, true, 20},
		{"short", a, snap(500*time.Millisecond, 120, 2, split.Served{Key: k, Total: 120, Run: 60}), true, false, 20},
		{"few", a, snap(time.Second, 110, 2, split.Served{Key: k, Total: 110, Run: 50}), true, false, 10},
		{"idle", a, snap(time.Second, 100, 2, split.Served{Key: k, Total: 100, Run: 40}), false, false, 0},
		{"probe ran", a, snap(time.Second, 120, 4, split.Served{Key: k, Total: 120, Run: 60}), false, false, 0},
		{"probe running", snap(0, 100, 3, split.Served{Key: k, Total: 100, Run: 40}), snap(time.Second, 120, 3, split.Served{Key: k, Total: 120, Run: 60}), false, false, 0},
		{"plan changed", a, snap(time.Second, 120, 2, split.Served{Key: split.CalKey{Freeze: 8, Split: 5}, Total: 120, Run: 60}), false, false, 0},
		{"another split's samples", a, snap(time.Second, 120, 2, split.Served{Key: k, Total: 120, Run: 10}), false, false, 0},
		{"not flushed", snap(0, 100, 2, split.Served{Key: k, Total: 100, Run: calFlushSamples - 1}), snap(time.Second, 120, 2, split.Served{Key: k, Total: 120, Run: calFlushSamples + 19}), false, false, 0},
		{"two layers", snap(0, 100, 2, split.Served{Key: k, Total: 100, Run: 40}, split.Served{Key: split.CalKey{Freeze: 4, Split: 4}, Total: 10, Run: 10}),
			snap(time.Second, 130, 2, split.Served{Key: k, Total: 120, Run: 60}, split.Served{Key: split.CalKey{Freeze: 4, Split: 4}, Total: 20, Run: 20}), false, false, 0},
	} {
		w, ok := calWindow(tc.a, tc.b)
		if ok != tc.ok || w.ready != tc.ready || (ok && (w.samples != tc.wantSamples || w.key != k || w.model != "m")) {
			t.Errorf("%s: %+v, %v; want ok %v, ready %v, %d samples", tc.name, w, ok, tc.ok, tc.ready, tc.wantSamples)
		}
	}
}
