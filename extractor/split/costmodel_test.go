package split

import (
	"errors"
	"math"
	"testing"

	"github.com/featurefs/featurefs/extractor/spec"
)

// synthProfile makes a profile of a 6-layer model whose per-layer output
// bytes shrink from 1 MB to 4 KB, with segment times scaled by speed.
func synthProfile(host, device string, speed float64) *Profile {
	bytes := []int64{1 << 20, 512 << 10, 600 << 10, 64 << 10, 128 << 10, 4 << 10}
	secs := []float64{0.002, 0.004, 0.008, 0.008, 0.004, 0.001}
	p := &Profile{Schema: ProfileSchema, Model: "m", Digest: "d1", Device: device, Host: host, Batch: 4, DecodeSeconds: 0.003 / speed, WeightBytes: 50 << 20}
	cum := 0.0
	act := int64(150 << 10)
	for i := range bytes {
		s := secs[i] / speed
		cum += s
		act += bytes[i]
		p.Layers = append(p.Layers, LayerProfile{Index: i, Tensor: "t", Bytes: bytes[i], ActBytes: act, Seconds: s, CumSeconds: cum})
	}
	return p
}

// bruteBest is the reference: the feasible candidate of least time.
func bruteBest(cands []Candidate) Candidate {
	best := Candidate{SecondsPerSample: math.Inf(1)}
	for _, k := range cands {
		if k.Feasible && k.SecondsPerSample < best.SecondsPerSample {
			best = k
		}
	}
	return best
}

func TestCostModelChoosesFastestSplit(t *testing.T) {
	server := synthProfile("a", "cuda:0", 10) // a fast GPU server
	client := synthProfile("b", "cpu", 1)
	cm, err := NewCostModel(server, client)
	if err != nil {
		t.Fatal(err)
	}
	if cm.SharedCompute {
		t.Fatal("different hosts reported as sharing compute")
	}
	const mbit = 1e6 / 8
	for _, bw := range []float64{1 * mbit, 50 * mbit, 200 * mbit, 1000 * mbit, 1e6 * mbit} {
		for freeze := 0; freeze < 6; freeze++ {
			best, cands, err := cm.Choose(freeze, bw)
			if err != nil {
				t.Fatal(err)
			}
			if len(cands) != freeze+2 || cands[0].Split != spec.SplitRaw {
				t.Fatalf("freeze %d: candidates %v", freeze, cands)
			}
			ref := bruteBest(cands)
			if best.SecondsPerSample > ref.SecondsPerSample*1.01 {
				t.Errorf("bw %g freeze %d: chose %s (%g s), best is %s (%g s)", bw, freeze, spec.SplitName(best.Split), best.SecondsPerSample, spec.SplitName(ref.Split), ref.SecondsPerSample)
			}
			for _, k := range cands {
				want := max(k.ServerSeconds, k.WireSeconds, k.ClientSeconds)
				if math.Abs(k.SecondsPerSample-want) > 1e-12 || math.Abs(k.Throughput*k.SecondsPerSample-1) > 1e-9 {
					t.Errorf("candidate %+v: time is not the slowest stage", k)
				}
			}
		}
	}
	// A slow link: the layer with the fewest bytes up to the freeze layer.
	best, _, _ := cm.Choose(4, 1*mbit)
	if best.Split != 3 {
		t.Errorf("1 Mbit/s, freeze 4: chose %s, want layer3 (64 KB, the smallest)", spec.SplitName(best.Split))
	}
	// A fast link and a fast server: the server computes everything.
	best, _, _ = cm.Choose(4, 1e6*mbit)
	if best.Split != 4 {
		t.Errorf("unbounded link, GPU server: chose %s, want layer4", spec.SplitName(best.Split))
	}
	// A fast link and a slow server: ship the images.
	cm2, _ := NewCostModel(synthProfile("a", "cpu", 0.1), synthProfile("b", "cuda:0", 10))
	best, _, _ = cm2.Choose(4, 1e6*mbit)
	if best.Split != spec.SplitRaw {
		t.Errorf("unbounded link, slow server: chose %s, want raw", spec.SplitName(best.Split))
	}
}

func TestCostModelSharedCompute(t *testing.T) {
	cm, err := NewCostModel(synthProfile("h", "cpu", 1), synthProfile("h", "cpu", 1))
	if err != nil {
		t.Fatal(err)
	}
	if !cm.SharedCompute {
		t.Fatal("two CPU profiles of one host: want shared compute")
	}
	cands, err := cm.Candidates(5, 1e9)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range cands {
		if want := max(k.ServerSeconds+k.ClientSeconds, k.WireSeconds); math.Abs(k.SecondsPerSample-want) > 1e-12 {
			t.Errorf("%s: %g s, want compute summed: %g", spec.SplitName(k.Split), k.SecondsPerSample, want)
		}
	}
	// With compute summed and a fast link every split costs the same; the
	// tie goes to the fewest bytes.
	best, _, _ := cm.Choose(5, 1e12)
	if best.Split != 5 {
		t.Errorf("tie: chose %s, want layer5 (fewest bytes)", spec.SplitName(best.Split))
	}
}

func TestCostModelMemory(t *testing.T) {
	server, client := synthProfile("a", "cuda:0", 10), synthProfile("b", "cpu", 1)
	cm, _ := NewCostModel(server, client)
	// The server's memory holds the weights and a batch of activations up
	// to layer 1 only.
	cm.ServerMemory = server.WeightBytes + int64(cm.ServerBatch)*server.Layers[1].ActBytes
	best, cands, err := cm.Choose(5, 1e12)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range cands {
		if fits := k.Split <= 1; k.Feasible != fits {
			t.Errorf("%s feasible=%v, want %v", spec.SplitName(k.Split), k.Feasible, fits)
		}
	}
	if !best.Feasible || best.Split > 1 {
		t.Errorf("chose %s beyond the server's memory", spec.SplitName(best.Split))
	}
	// Nothing fits: the least overflow is chosen, not an error.
	cm.ServerMemory, cm.ClientMemory = 1, 1
	if _, _, err := cm.Choose(5, 1e6); err != nil {
		t.Errorf("nothing feasible: %v", err)
	}
}

func TestCostModelErrors(t *testing.T) {
	a := synthProfile("a", "cpu", 1)
	b := synthProfile("b", "cpu", 1)
	b.Digest = "other"
	if _, err := NewCostModel(a, b); !errors.Is(err, ErrNoProfile) {
		t.Errorf("different models: %v", err)
	}
	if _, err := NewCostModel(a, nil); !errors.Is(err, ErrNoProfile) {
		t.Errorf("nil profile: %v", err)
	}
	bad := synthProfile("b", "cpu", 1)
	bad.Layers[2].CumSeconds = 7
	if _, err := NewCostModel(a, bad); !errors.Is(err, ErrNoProfile) {
		t.Errorf("inconsistent profile: %v", err)
	}
	cm, _ := NewCostModel(a, synthProfile("b", "cpu", 1))
	for _, f := range []int{-1, 6} {
		if _, err := cm.Candidates(f, 1e6); !errors.Is(err, ErrUnknownLayer) {
			t.Errorf("freeze %d: %v", f, err)
		}
	}
	for _, bw := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		if _, err := cm.Candidates(3, bw); err == nil {
			t.Errorf("bandwidth %g accepted", bw)
		}
	}
}

// TestCostModelPricesCompressedBytes: with Compressed, a layer's bytes on
// the wire are divided by its measured WireRatio, so a layer that
// compresses well can win at a low bandwidth where it lost before; without
// Compressed, or with no ratio measured, nothing changes.
func TestCostModelPricesCompressedBytes(t *testing.T) {
	server := synthProfile("a", "cuda:0", 10)
	client := synthProfile("b", "cpu", 1)
	const mbit = 1e6 / 8
	cm, err := NewCostModel(server, client)
	if err != nil {
		t.Fatal(err)
	}
	cm.RawBytes = 200 << 10
	plain, _, err := cm.Choose(4, 20*mbit)
	if err != nil {
		t.Fatal(err)
	}
	// Layer 2 (600 KiB) compresses 20x: cheaper on the wire than any other.
	server.Layers[2].WireRatio = 20
	before, _ := cm.Candidates(4, 20*mbit)
	if before[2+1].WireBytes != float64(600<<10)+cm.OverheadBytes {
		t.Fatalf("without Compressed, layer 2 costs %.0f bytes, want its plain size", before[2+1].WireBytes)
	}
	cm.Compressed = true
	cands, err := cm.Candidates(4, 20*mbit)
	if err != nil {
		t.Fatal(err)
	}
	var l2 Candidate
	for _, k := range cands {
		if k.Split == 2 {
			l2 = k
		}
	}
	if want := float64(600<<10)/20 + cm.OverheadBytes; math.Abs(l2.WireBytes-want) > 1 {
		t.Fatalf("compressed layer 2 costs %.0f bytes, want %.0f", l2.WireBytes, want)
	}
	best, _, err := cm.Choose(4, 20*mbit)
	if err != nil {
		t.Fatal(err)
	}
	if best.SecondsPerSample > plain.SecondsPerSample {
		t.Fatalf("pricing compression made the best split slower: %.4f s vs %.4f s", best.SecondsPerSample, plain.SecondsPerSample)
	}
	if plain.Split == 2 || best.Split != 2 {
		t.Errorf("best split %d plain, %d compressed; want layer 2 to win once it compresses 20x", plain.Split, best.Split)
	}
}

// TestCostModelCountsTheCPUPerByte: each side's CPU per byte moved adds
// to its stage, as wall time under a quota.
func TestCostModelCountsTheCPUPerByte(t *testing.T) {
	s, c := synthProfile("a", "cpu", 1), synthProfile("b", "cpu", 1)
	cm, err := NewCostModel(s, c)
	if err != nil {
		t.Fatal(err)
	}
	bw := 125e6 // 1000 Mbit/s
	cands0, err := cm.Candidates(len(s.Layers)-1, bw)
	if err != nil {
		t.Fatal(err)
	}
	s2, c2 := *s, *c
	s2.ByteSeconds, c2.ByteSeconds = 10e-9, 5e-9
	s2.CPUQuota = 0.5
	cm2, err := NewCostModel(&s2, &c2)
	if err != nil {
		t.Fatal(err)
	}
	cands, _ := cm2.Candidates(len(s.Layers)-1, bw)
	for i, k := range cands {
		k0 := cands0[i]
		wantS := k0.ServerSeconds + k.WireBytes*20e-9 // 10 ns of CPU at half a core
		wantC := k0.ClientSeconds + k.WireBytes*5e-9
		if math.Abs(k.ServerSeconds-wantS) > 1e-12 || math.Abs(k.ClientSeconds-wantC) > 1e-12 {
			t.Errorf("split %d: server %g client %g s, want %g and %g", k.Split, k.ServerSeconds, k.ClientSeconds, wantS, wantC)
		}
	}
	if err := (&Profile{Layers: s.Layers, ByteSeconds: math.NaN()}).Validate(); err == nil {
		t.Error("a NaN CPU per byte validated")
	}
	if err := (&Profile{Layers: s.Layers, ByteSeconds: 1}).Validate(); err == nil {
		t.Error("a second per byte validated")
	}
}

// TestCostModelWeighsTheCodec: a layer is scored compressed and plain,
// with each side's copy and codec CPU (wall time under a quota): on a
// slow link compression wins (the wire is the slowest stage); on a fast
// one, where compressing makes the quota-bound server the slowest stage,
// the plain tensor wins. A split's copy counts on both sides, the whole
// layer's (split = freeze) on the server only.
func TestCostModelWeighsTheCodec(t *testing.T) {
	s, c := synthProfile("a", "cpu", 1), synthProfile("b", "cpu", 1)
	for i := range s.Layers {
		for _, p := range []*Profile{s, c} {
			l := &p.Layers[i]
			l.WireRatio, l.CopySeconds = 1.25, 1e-4
			l.EncodeSeconds, l.DecodeSeconds = 2e-3, 3e-4
		}
	}
	s.CPUQuota = 0.5
	cm, err := NewCostModel(s, c)
	if err != nil {
		t.Fatal(err)
	}
	cm.Compressed = true
	const freeze = 4
	layer := func(bw float64, split int) Candidate {
		cands, err := cm.Candidates(freeze, bw)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range cands {
			if k.Split == split {
				return k
			}
		}
		t.Fatalf("no candidate %d", split)
		return Candidate{}
	}
	slow, fast := layer(10e6/8, 0), layer(1000e6/8, 0) // layer 0: 1 MiB
	if !slow.Compressed || slow.WireBytes > float64(1<<20)/1.25+cm.OverheadBytes+1 {
		t.Errorf("at 10 Mbit/s layer 0 goes plain (%.0f bytes); want it compressed", slow.WireBytes)
	}
	if fast.Compressed || fast.WireBytes != float64(1<<20)+cm.OverheadBytes {
		t.Errorf("at 1000 Mbit/s layer 0 goes compressed (%.0f bytes); want it plain", fast.WireBytes)
	}
	// Plain at 1000 Mbit/s: the server's compute, its copy at half a core,
	// the bytes; the client's rest of the model and its copy.
	wantS := s.DecodeSeconds + s.Layers[0].CumSeconds + 2*1e-4
	wantC := c.Layers[freeze].CumSeconds - c.Layers[0].CumSeconds + 1e-4
	if math.Abs(fast.ServerSeconds-wantS) > 1e-12 || math.Abs(fast.ClientSeconds-wantC) > 1e-12 {
		t.Errorf("plain layer 0: server %g client %g s, want %g and %g", fast.ServerSeconds, fast.ClientSeconds, wantS, wantC)
	}
	// Compressed at 10 Mbit/s: and the codec on each side.
	if d := slow.ServerSeconds - (wantS + 2*2e-3); math.Abs(d) > 1e-12 {
		t.Errorf("compressed layer 0: server %g s, want %g", slow.ServerSeconds, wantS+2*2e-3)
	}
	if d := slow.ClientSeconds - (wantC + 3e-4); math.Abs(d) > 1e-12 {
		t.Errorf("compressed layer 0: client %g s, want %g", slow.ClientSeconds, wantC+3e-4)
	}
	if whole := layer(1000e6/8, freeze); whole.ClientSeconds != 0 {
		t.Errorf("split = freeze: the client's stage is %g s, want 0 (it receives the feature it serves)", whole.ClientSeconds)
	}
	for _, bad := range []float64{-1, math.NaN()} {
		p := *s
		p.Layers = append([]LayerProfile(nil), s.Layers...)
		p.Layers[1].EncodeSeconds = bad
		if p.Validate() == nil {
			t.Errorf("a layer's encode time of %g validated", bad)
		}
	}
}
