package remote

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/extractor/spec"
	"github.com/featurefs/featurefs/extractor/split"
)

// An auto mount that reads corrects its cost model by the CPU both sides
// spent per sample: the server reports its CPU time and samples served,
// and the plan in use gets factors measured (not 1) within the bounds.
// The server here is this process (calibrateSelf), so the factors are
// not the sides' own: the two-host test bed (test/, TestSplitBench)
// measures those.
func TestSplitCalibratesByTheCPUMeasured(t *testing.T) {
	bed := newSplitBed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	auto, _ := spec.ParseSplitPolicy("auto")
	x, err := bed.c.Split(ctx, SplitConfig{Policy: auto, Local: bed.svc, ProfileDir: t.TempDir(), ProbeBytes: 256 << 10, CalibrateEvery: 20 * time.Millisecond, calibrateSelf: true})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	const freeze = 8
	p := x.Planner("resnet18")
	// Until a calibration kept the plan in use (one that moved it
	// measured another split).
	reads, switches, since := 0, 0, 0
	for {
		st := p.Stats()
		if st.Switches != switches {
			switches, since = st.Switches, st.Calibrations
		}
		if st.Calibrations > since {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no calibration after %d reads: %+v", reads, p.Stats())
		}
		k := bed.keys[reads%len(bed.keys)]
		if _, err := x.Extract(ctx, api.Request{Model: "resnet18", Layer: freeze, Key: k}); err != nil {
			t.Fatal(err)
		}
		reads++
	}
	st := p.Stats()
	if len(st.Plans) != 1 {
		t.Fatalf("plans %+v", st.Plans)
	}
	ps := st.Plans[0]
	if ps.Calibrations < 1 || ps.ServerFactor < 0.25 || ps.ServerFactor > 8 || ps.ClientFactor < 0.25 || ps.ClientFactor > 8 {
		t.Errorf("after %d reads: plan %+v", reads, ps)
	}
	// The plan was measured on both sides where it computes on both.
	if ps.Split != spec.SplitRaw && ps.Split != freeze && (ps.ServerFactor == 1 || ps.ClientFactor == 1) {
		t.Errorf("split %s after %d reads: factors %g, %g; want both measured", ps.SplitLayer, reads, ps.ServerFactor, ps.ClientFactor)
	}
	if ss := bed.srv.Stats(); ss.Items+ss.Objects < int64(calMinSamples) {
		t.Errorf("server stats %+v", ss)
	}
	// A mount in the server's own process is not calibrated by default.
	x.calSelf = false
	if _, err := x.calSnapshot(ctx); !errors.Is(err, errServerIsSelf) {
		t.Errorf("a snapshot of a server in this process: %v, want %v", err, errServerIsSelf)
	}
	t.Logf("%d reads; plan %+v", reads, ps)
}

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
