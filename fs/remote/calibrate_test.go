//go:build cgo

// This test runs the real extractor (ONNX Runtime, cgo), as split_test.go's.

package remote

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/extractor/spec"
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
	// A mount in the server's own process is not calibrated by default
	// (its calibration stopped first: it reads calSelf).
	x.Close()
	x.calSelf = false
	if _, err := x.calSnapshot(ctx); !errors.Is(err, errServerIsSelf) {
		t.Errorf("a snapshot of a server in this process: %v, want %v", err, errServerIsSelf)
	}
	t.Logf("%d reads; plan %+v", reads, ps)
}
