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
		p.ObserveSamples(4, p.Split(4), 8, 8*1000)
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

// feed delivers n samples of freeze 5 at split at one per perSample
// seconds on p's clock.
func feed(p *Planner, now *time.Time, split, n int, perSample float64) {
	for range n {
		*now = now.Add(time.Duration(perSample * float64(time.Second)))
		p.ObserveSamples(5, split, 1, 1000)
	}
}

// The throughput feedback: a split whose server stage is its slowest and
// that delivers well under its prediction while the pipeline is full moves
// the server's estimate by what it measured, and the plan follows; an idle
// pipeline, a split delivering near its prediction, samples of an earlier
// plan and fixed policies change nothing, and corrections stop at
// maxCorrections.
func TestPlannerCorrectsTheServerFromThroughput(t *testing.T) {
	const bw = 1e4 * 1e6 / 8
	open := func(policy string) (*Planner, *time.Time) {
		t.Helper()
		// A server twice as fast as the mount, on another host: at freeze
		// 5 the split at layer3 is server-bound (12.5 ms a sample) and
		// the best.
		cm, err := NewCostModel(synthProfile("a", "cpu", 2), synthProfile("b", "cpu", 1))
		if err != nil {
			t.Fatal(err)
		}
		pol, _ := spec.ParseSplitPolicy(policy)
		p, err := NewPlanner(cm, pol, bw)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Unix(1000, 0)
		p.now = func() time.Time { return now }
		return p, &now
	}
	p, now := open("auto")
	k, _, _ := p.Candidates(5)
	if k.Split != 3 || !(k.ServerSeconds > k.ClientSeconds && k.ServerSeconds > k.WireSeconds) || math.Abs(k.ServerSeconds-0.0125) > 1e-9 {
		t.Fatalf("the synthetic plan: %+v, want layer3 server-bound at 12.5 ms", k)
	}
	// 30 ms a sample with nothing else in flight: the trainer is slow,
	// not the split.
	feed(p, now, 3, 200, 0.030)
	if s := p.Split(5); s != 3 || p.Stats().Corrections != 0 {
		t.Fatalf("an idle pipeline corrected the plan: split %d, %+v", s, p.Stats())
	}
	var ends []func()
	for range 8 { // two server batches in flight
		ends = append(ends, p.Track())
	}
	// Within 15% of the prediction, and samples of another split.
	feed(p, now, 3, 200, 0.014)
	feed(p, now, 4, 200, 0.100)
	if s := p.Split(5); s != 3 || p.Stats().Corrections != 0 {
		t.Fatalf("a split near its prediction (or another split's samples) corrected the plan: split %d, %+v", s, p.Stats())
	}
	// 30 ms a sample, the pipeline full: the server takes 17.5 ms more
	// than its profile; layer1 (server 22 ms, mount 21 ms) is now best.
	feed(p, now, 3, feedbackWarm+feedbackSamples, 0.030)
	st := p.Stats()
	if s := p.Split(5); s != 1 || st.Corrections != 1 || math.Abs(st.ServerSampleSeconds-0.0175) > 1e-6 {
		t.Fatalf("after layer3 delivered 33/s against 80 predicted: split %d, %+v", s, st)
	}
	if k, cands, _ := p.Candidates(5); math.Abs(k.ServerSeconds-0.022) > 1e-6 || cands[0].Split != spec.SplitRaw || cands[0].ServerSeconds > 1e-6 {
		t.Errorf("after the correction: chosen %+v, raw %+v (raw's server does no decode or compute)", k, cands[0])
	}
	// The new split delivers what it now predicts: no more corrections.
	feed(p, now, 1, 500, 0.022)
	if s := p.Split(5); s != 1 || p.Stats().Corrections != 1 {
		t.Fatalf("a split delivering its prediction re-planned: split %d, %+v", s, p.Stats())
	}
	for _, end := range ends {
		end()
	}
	if n := p.inflight.Load(); n != 0 {
		t.Errorf("%d reads in flight after every end", n)
	}
	// On a 10 Mbit/s link (raw 90 ms a sample) layer5 is best, server-bound
	// at 15 ms: a pipeline that keeps delivering 20% under every new
	// prediction is corrected maxCorrections times, then no more.
	p, now = open("auto")
	if !p.ObserveTransfer(1<<20, xfer(1<<20, 10*1e6/8)) {
		t.Fatal("no re-plan at 10 Mbit/s")
	}
	for range 8 {
		defer p.Track()()
	}
	for range 6 {
		k, _, _ := p.Candidates(5)
		if k.Split != 5 {
			t.Fatalf("at 10 Mbit/s: %+v, want layer5", k)
		}
		feed(p, now, 5, 200, k.SecondsPerSample/0.8)
	}
	if c := p.Stats().Corrections; c != maxCorrections {
		t.Errorf("%d corrections, want %d", c, maxCorrections)
	}
	// A fixed split is never moved.
	f, now := open("layer3")
	for range 8 {
		defer f.Track()()
	}
	feed(f, now, 3, 500, 0.030)
	if s := f.Split(5); s != 3 || f.Stats().Corrections != 0 {
		t.Errorf("--split layer3 moved to %d after a slow run (%+v)", s, f.Stats())
	}
}
