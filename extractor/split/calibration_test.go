package split

import (
	"math"
	"testing"

	"github.com/featurefs/featurefs/extractor/spec"
)

// calPlanner is an auto planner over two CPU hosts of equal speed at
// bandwidth bw, and its plan for freeze layer 4.
func calPlanner(t *testing.T, serverDevice, policy string, bw float64) (*Planner, Candidate) {
	t.Helper()
	cm, err := NewCostModel(synthProfile("a", serverDevice, 1), synthProfile("b", "cpu", 1))
	if err != nil {
		t.Fatal(err)
	}
	pol, err := spec.ParseSplitPolicy(policy)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPlanner(cm, pol, bw)
	if err != nil {
		t.Fatal(err)
	}
	chosen, _, err := p.Candidates(4)
	if err != nil {
		t.Fatal(err)
	}
	return p, chosen
}

// The CPU a side measured per sample scales its stage, for the candidate
// measured and every computing one, and moves an auto plan to the best
// candidate as calibrated; a measurement of a plan no longer in use, or
// of a GPU side, changes nothing.
func TestObserveCPUCalibratesAndMovesThePlan(t *testing.T) {
	const bw = 100e6 / 8
	p, chosen := calPlanner(t, "cpu", "auto", bw)
	if chosen.Split == spec.SplitRaw || chosen.ServerFactor != 1 || chosen.ClientFactor != 1 {
		t.Fatalf("the uncalibrated plan: %+v; want a layer, factors 1", chosen)
	}
	key := CalKey{Freeze: 4, Split: chosen.Split, Compressed: chosen.Compressed}
	if p.ObserveCPU(CalKey{Freeze: 4, Split: spec.SplitRaw}, 1, 1) {
		t.Error("a measurement of a plan not in use moved the plan")
	}
	if st := p.Stats(); st.Calibrations != 0 {
		t.Errorf("a measurement of a plan not in use counted: %+v", st)
	}

	// The server measured 3x its estimate, the mount 1.5x.
	switched := p.ObserveCPU(key, 3*chosen.ServerSeconds, 1.5*chosen.ClientSeconds)
	now, cands, err := p.Candidates(4)
	if err != nil {
		t.Fatal(err)
	}
	var measured Candidate
	for _, k := range cands {
		sf, cf := 3.0, 1.5
		if k.Split == spec.SplitRaw {
			sf = 1 // the server computes nothing: not scaled by a computing stage's factor
		}
		if k.Split == 4 {
			cf = 1 // the mount computes nothing
		}
		if math.Abs(k.ServerFactor-sf) > 1e-9 || math.Abs(k.ClientFactor-cf) > 1e-9 {
			t.Errorf("candidate %s: factors %g, %g; want %g, %g", spec.SplitName(k.Split), k.ServerFactor, k.ClientFactor, sf, cf)
		}
		if k.Split == chosen.Split && k.Compressed == chosen.Compressed {
			measured = k
		}
	}
	if math.Abs(measured.ServerSeconds-3*chosen.ServerSeconds) > 1e-12 || math.Abs(measured.ClientSeconds-1.5*chosen.ClientSeconds) > 1e-12 {
		t.Errorf("the measured candidate's stages %g, %g; want the measured %g, %g", measured.ServerSeconds, measured.ClientSeconds, 3*chosen.ServerSeconds, 1.5*chosen.ClientSeconds)
	}
	best := bruteBest(cands)
	if want := best.SecondsPerSample < calSwitchGain*measured.SecondsPerSample; switched != want || (want && now.Split != best.Split) {
		t.Fatalf("switched %v to %s; the best calibrated is %s at %g s against the measured plan's %g", switched, spec.SplitName(now.Split), spec.SplitName(best.Split), best.SecondsPerSample, measured.SecondsPerSample)
	}
	if !switched {
		t.Fatal("the test's numbers should move the plan: pick others")
	}
	st := p.Stats()
	if st.Calibrations != 1 || st.Switches != 1 || len(st.Plans) != 1 || st.Plans[0].Calibrations != 1 {
		t.Errorf("stats after one calibration that moved the plan: %+v", st)
	}

	// A second measurement of the same candidate is averaged in.
	p2, c2 := calPlanner(t, "cpu", "layer2", bw)
	k2 := CalKey{Freeze: 4, Split: 2, Compressed: c2.Compressed}
	if p2.ObserveCPU(k2, 2*c2.ServerSeconds, 0) {
		t.Error("a fixed split moved")
	}
	if p2.ObserveCPU(k2, 4*c2.ServerSeconds, 0) {
		t.Error("a fixed split moved")
	}
	if now, _, _ := p2.Candidates(4); now.Split != 2 || math.Abs(now.ServerFactor-3) > 1e-9 || now.ClientFactor != 1 {
		t.Errorf("after 2x then 4x: %+v; want split 2, server factor 3 (their mean), client 1 (not measured)", now)
	}

	// A GPU server's CPU is not its stage's time.
	pg, cg := calPlanner(t, "cuda:0", "auto", bw)
	pg.ObserveCPU(CalKey{Freeze: 4, Split: cg.Split, Compressed: cg.Compressed}, 10*cg.ServerSeconds+1, 0)
	if now, _, _ := pg.Candidates(4); now.ServerFactor != 1 {
		t.Errorf("a GPU server calibrated: %+v", now)
	}
}

// A candidate within calSwitchGain of the plan in use does not take its
// place (measurements within their noise do not flip the plan); one
// faster by more does.
func TestObserveCPUKeepsAPlanWithinTheGain(t *testing.T) {
	const bw = 100e6 / 8
	within, beyond := 0, 0
	for f := 1.0; f <= 6; f += 0.02 {
		p, chosen := calPlanner(t, "cpu", "auto", bw)
		key := CalKey{Freeze: 4, Split: chosen.Split, Compressed: chosen.Compressed}
		switched := p.ObserveCPU(key, f*chosen.ServerSeconds, 0)
		_, cands, _ := p.Candidates(4)
		var cur Candidate
		for _, k := range cands {
			if k.Split == chosen.Split && k.Compressed == chosen.Compressed {
				cur = k
			}
		}
		best := bruteBest(cands)
		gain := best.SecondsPerSample / cur.SecondsPerSample
		if switched != (gain < calSwitchGain) {
			t.Errorf("server %gx: switched %v, the best calibrated %.3f of the plan in use", f, switched, gain)
		}
		switch {
		case gain < 1 && gain >= calSwitchGain:
			within++
		case gain < calSwitchGain:
			beyond++
		}
	}
	if within == 0 || beyond == 0 {
		t.Errorf("%d factors left a better candidate within the gain, %d beyond it: want both", within, beyond)
	}
}

// The plan in use is calibrated as it goes, compressed or plain, though
// the candidates list only the faster way of each layer: a compressed
// plan measured slower (its plain way now listed) keeps its own factor,
// not the estimate it had.
func TestObserveCPUCalibratesTheWayInUse(t *testing.T) {
	server, client := synthProfile("a", "cpu", 1), synthProfile("b", "cpu", 1)
	for _, p := range []*Profile{server, client} {
		for i := range p.Layers {
			p.Layers[i].WireRatio, p.Layers[i].EncodeSeconds, p.Layers[i].DecodeSeconds = 2, 0.001, 0.0005
		}
	}
	cm, err := NewCostModel(server, client)
	if err != nil {
		t.Fatal(err)
	}
	cm.Compressed = true
	fixed, _ := spec.ParseSplitPolicy("layer1")
	const bw = 100e6 / 8
	p, err := NewPlanner(cm, fixed, bw)
	if err != nil {
		t.Fatal(err)
	}
	chosen, _, _ := p.Candidates(4)
	if chosen.Split != 1 || !chosen.Compressed {
		t.Fatalf("plan %+v: want layer1 compressed (pick other numbers)", chosen)
	}
	key := CalKey{Freeze: 4, Split: 1, Compressed: true}
	p.ObserveCPU(key, 8*chosen.ServerSeconds, 0)
	now, cands, _ := p.Candidates(4)
	if !now.Compressed || now.Split != 1 || math.Abs(now.ServerFactor-8) > 1e-9 || math.Abs(now.ServerSeconds-8*chosen.ServerSeconds) > 1e-12 {
		t.Errorf("after measuring 8x: plan %+v; want layer1 compressed, server factor 8, %g s", now, 8*chosen.ServerSeconds)
	}
	for _, k := range cands {
		if k.Split == 1 && k.Compressed {
			t.Errorf("layer1 still listed compressed: %+v; the test wants its plain way faster now (pick other numbers)", k)
		}
	}
	if st := p.Stats(); len(st.Plans) != 1 || !st.Plans[0].Compressed || st.Plans[0].ServerFactor != now.ServerFactor {
		t.Errorf("stats %+v", st.Plans)
	}
}
