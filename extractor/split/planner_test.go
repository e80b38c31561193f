package split

import (
	"math"
	"testing"
	"time"

	"github.com/featurefs/featurefs/extractor/spec"
)

// xfer is how long n bytes take at rate bytes/s.
func xfer(n int64, rate float64) time.Duration {
	return time.Duration(float64(n) / rate * float64(time.Second))
}

func TestPlannerReplansOnBandwidthChange(t *testing.T) {
	cm, err := NewCostModel(synthProfile("a", "cuda:0", 10), synthProfile("b", "cpu", 1))
	if err != nil {
		t.Fatal(err)
	}
	const mbit = 1e6 / 8
	auto, _ := spec.ParseSplitPolicy("auto")
	p, err := NewPlanner(cm, auto, 1*mbit)
	if err != nil {
		t.Fatal(err)
	}
	ref := func(bw float64) int {
		best, _, err := cm.Choose(4, bw)
		if err != nil {
			t.Fatal(err)
		}
		return best.Split
	}
	if got, want := p.Split(4), ref(1*mbit); got != want {
		t.Fatalf("split %d, want %d", got, want)
	}
	if chosen, cands, err := p.Candidates(4); err != nil || chosen.Split != ref(1*mbit) || len(cands) != 6 || cands[0].Split != spec.SplitRaw {
		t.Errorf("Candidates(4): %+v, %d candidates, %v; want the chosen split %d of raw, 0..4", chosen, len(cands), err, ref(1*mbit))
	}
	// Small transfers and changes under 2x do not re-plan.
	if p.ObserveTransfer(1000, time.Millisecond) {
		t.Error("a 1 KB transfer re-planned")
	}
	if p.ObserveTransfer(1<<20, xfer(1<<20, 1.5*mbit)) {
		t.Error("a 1.5x faster transfer re-planned")
	}
	// The link gets 10000x faster: the estimate crosses 2x and the plan
	// follows the cost model at the new bandwidth.
	replanned := false
	for range 20 {
		if p.ObserveTransfer(100<<20, xfer(100<<20, 1e4*mbit)) {
			replanned = true
		}
	}
	st := p.Stats()
	if !replanned || st.Replans < 1 {
		t.Fatalf("no re-plan after a 10000x faster link: %+v", st)
	}
	if got, want := p.Split(4), ref(st.PlannedBandwidthBps); got != want || got == ref(1*mbit) {
		t.Errorf("after re-planning at %g B/s: split %d, want %d (and not the slow link's %d)", st.PlannedBandwidthBps, got, want, ref(1*mbit))
	}

	// Measured throughput and bytes per sample.
	now := time.Unix(1000, 0)
	p.now = func() time.Time { return now }
	for range 10 {
		p.ObserveSamples(4, p.Split(4), false, 8, 8*1000)
		now = now.Add(100 * time.Millisecond)
	}
	st = p.Stats()
	if len(st.Plans) != 1 || st.Plans[0].Freeze != 4 {
		t.Fatalf("plans %+v", st.Plans)
	}
	ps := st.Plans[0]
	// 9 intervals of 100 ms delivered 9*8 samples: 80/s.
	if math.Abs(ps.MeasuredPerSec-80) > 1e-6 || ps.MeasuredWireBytes != 1000 || ps.Samples != 80 || ps.PredictedPerSec <= 0 || ps.SplitLayer != spec.SplitName(ps.Split) {
		t.Errorf("plan stats %+v", ps)
	}

	// Fixed policies clamp to the freeze layer; none is the freeze layer.
	for s, want := range map[string]int{"raw": spec.SplitRaw, "layer2": 2, "layer5": 4, "none": 4} {
		pol, _ := spec.ParseSplitPolicy(s)
		fp, _ := NewPlanner(cm, pol, 1*mbit)
		if got := fp.Split(4); got != want {
			t.Errorf("--split %s, freeze 4: %d, want %d", s, got, want)
		}
	}
}

// A probe more than 2x off the estimate replaces it: after the link drops
// 40x, the first probe at the new rate re-plans at that rate (averaging in
// halves took 5 probes, 100 s at the default period), and one within 2x
// is averaged in.
func TestPlannerFollowsALinkChangeAtOnce(t *testing.T) {
	cm, err := NewCostModel(synthProfile("a", "cpu", 4), synthProfile("b", "cpu", 1))
	if err != nil {
		t.Fatal(err)
	}
	const mbit = 1e6 / 8
	auto, _ := spec.ParseSplitPolicy("auto")
	p, err := NewPlanner(cm, auto, 1000*mbit)
	if err != nil {
		t.Fatal(err)
	}
	if !p.ObserveTransfer(1<<20, xfer(1<<20, 25*mbit)) {
		t.Fatal("a probe 40x slower than the plan's bandwidth did not re-plan")
	}
	st := p.Stats()
	if math.Abs(st.PlannedBandwidthBps-25*mbit) > 0.01*25*mbit || st.Replans != 1 {
		t.Errorf("after one probe at 25 Mbit/s: planned at %g Mbit/s, %d replans", st.PlannedBandwidthBps/mbit, st.Replans)
	}
	if p.ObserveTransfer(1<<20, xfer(1<<20, 40*mbit)) {
		t.Error("a probe 1.6x the estimate re-planned")
	}
	if bw := p.Stats().BandwidthBps / mbit; math.Abs(bw-32.5) > 0.1 {
		t.Errorf("a probe within 2x averaged to %g Mbit/s, want 32.5", bw)
	}
}
