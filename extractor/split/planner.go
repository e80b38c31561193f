package split

// The planner: the cost model's decision per freeze layer, kept up to date
// as the measured bandwidth and the mean image size move, and the
// throughput it reaches.

import (
	"fmt"
	"sync"
	"time"

	"github.com/featurefs/featurefs/extractor/spec"
)

// Planner keeps the split decision of each freeze layer up to date: it
// re-plans when the measured bandwidth moves by more than a factor of 2 from
// the bandwidth of the last plan, and it measures the throughput reached.
// It is safe for concurrent use.
type Planner struct {
	cm     *CostModel
	policy spec.SplitPolicy

	mu        sync.Mutex
	bw        float64            // GUARDED_BY(mu): current estimate, bytes/s
	plannedBW float64            // GUARDED_BY(mu): estimate the plans were made with
	plans     map[int]*plan      // GUARDED_BY(mu): by freeze layer (bounded by the layer count)
	replans   int                // GUARDED_BY(mu)
	transfers int64              // GUARDED_BY(mu)
	now       func() time.Time   // the clock
	rates     map[int]*rateMeter // GUARDED_BY(mu): by freeze layer
	served    map[int]*served    // GUARDED_BY(mu): by freeze layer (bounded by the layer count)
	// calibrations counts ObserveCPU's corrections and switches the
	// plans they changed.
	calibrations, switches int // GUARDED_BY(mu)
}

// served counts the samples of one freeze layer delivered: in all, and
// in a row by the split of the plan now in use.
type served struct {
	total, run int64
	cals       int // calibrations of this freeze layer
}

type plan struct {
	chosen Candidate
	cands  []Candidate
}

// minTransferBytes is the smallest transfer that counts as a bandwidth
// measurement: smaller ones measure latency, not bandwidth.
const minTransferBytes = 64 << 10

// NewPlanner returns a planner for cm under policy, starting from a
// measured bandwidth (bytes per second).
func NewPlanner(cm *CostModel, policy spec.SplitPolicy, bandwidth float64) (*Planner, error) {
	if cm == nil {
		return nil, fmt.Errorf("%w: planner without a cost model", ErrNoProfile)
	}
	if !(bandwidth > 0) {
		return nil, fmt.Errorf("planner: bandwidth %g: want a positive number", bandwidth)
	}
	return &Planner{cm: cm, policy: policy, bw: bandwidth, plannedBW: bandwidth, plans: map[int]*plan{}, rates: map[int]*rateMeter{}, served: map[int]*served{}, now: time.Now}, nil
}

// Split returns the layer the server should send for freeze layer freeze
// (spec.SplitRaw: the image). Unknown layers get freeze itself.
func (p *Planner) Split(freeze int) int {
	s, _ := p.Plan(freeze)
	return s
}

// Plan is Split, and whether the layer goes compressed on the wire
// (Candidate.Compressed; false for raw). Unknown layers get freeze
// itself, compressed (a request as without a plan).
func (p *Planner) Plan(freeze int) (split int, compressed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pl, err := p.planLocked(freeze)
	if err != nil {
		return freeze, true
	}
	return pl.chosen.Split, pl.chosen.Compressed
}

// Candidates returns every candidate of freeze layer freeze as the current
// plan scored them (at the bandwidth planned with), and the one in use.
func (p *Planner) Candidates(freeze int) (chosen Candidate, all []Candidate, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pl, err := p.planLocked(freeze)
	if err != nil {
		return Candidate{}, nil, err
	}
	return pl.chosen, append([]Candidate(nil), pl.cands...), nil
}

func (p *Planner) planLocked(freeze int) (*plan, error) {
	if pl := p.plans[freeze]; pl != nil {
		return pl, nil
	}
	best, cands, err := p.cm.Choose(freeze, p.plannedBW)
	if err != nil {
		return nil, err
	}
	want := best.Split
	switch p.policy.Mode {
	case "fixed":
		want = min(p.policy.Layer, freeze)
	case "auto":
	default: // none
		want = freeze
	}
	for _, k := range cands {
		if k.Split == want {
			best = k
		}
	}
	pl := &plan{chosen: best, cands: cands}
	p.plans[freeze] = pl
	return pl, nil
}

// ObserveTransfer records a transfer of n bytes that took d on the wire and
// reports whether the plans were redone: when the bandwidth estimate
// differs from the one planned with by more than a factor of 2. The
// estimate is a moving average of transfers of 64 KiB or more, but a
// transfer more than a factor of 2 off the estimate replaces it: the
// link changed (a probe measures the link's capacity, the bytes received
// meanwhile included, every SplitConfig.ProbeEvery), and averaging a 40x
// drop in halves took 5 probes, 100 s at the default period, to reach a
// plan for the new rate (TestSplitReplan measured auto still on the old
// split 60 s after 1000 -> 25 Mbit/s).
func (p *Planner) ObserveTransfer(n int64, d time.Duration) bool {
	if n < minTransferBytes || d <= 0 {
		return false
	}
	rate := float64(n) / d.Seconds()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.transfers++
	if r := rate / p.bw; r > 2 || r < 0.5 || !(p.bw > 0) {
		p.bw = rate
	} else {
		p.bw = 0.5*p.bw + 0.5*rate
	}
	if r := p.bw / p.plannedBW; r > 2 || r < 0.5 {
		p.plannedBW = p.bw
		p.replans++
		p.clearPlansLocked()
		return true
	}
	return false
}

// SetRawBytes updates the mean image size of the raw candidate; the plans
// are redone when it moved by more than 25%.
func (p *Planner) SetRawBytes(v float64) {
	if !(v > 0) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if r := v / p.cm.RawBytes; r > 1.25 || r < 0.8 {
		p.cm.RawBytes = v
		p.clearPlansLocked()
	}
}

// ObserveSamples records n samples of freeze layer freeze delivered by
// split split (compressed: the tensor came compressed), with wire bytes
// on the wire, now: the measured throughput, and the samples of the plan
// in use that ObserveCPU's measurements count.
func (p *Planner) ObserveSamples(freeze, split int, compressed bool, n int, wire int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if sv := p.servedLocked(freeze); sv != nil {
		sv.total += int64(n)
		if pl := p.plans[freeze]; pl != nil && pl.chosen.Split == split && (split == spec.SplitRaw || pl.chosen.Compressed == compressed) {
			sv.run += int64(n)
		} else {
			sv.run = 0
		}
	}
	r := p.rates[freeze]
	if r == nil {
		if len(p.rates) >= len(p.cm.Server.Layers) {
			return
		}
		r = &rateMeter{}
		p.rates[freeze] = r
	}
	r.add(p.now(), n, wire)
}

// clearPlansLocked drops the plans, to be made again at their next use:
// no sample delivered so far is of those.
func (p *Planner) clearPlansLocked() {
	clear(p.plans)
	for _, sv := range p.served {
		sv.run = 0
	}
}

func (p *Planner) servedLocked(freeze int) *served {
	sv := p.served[freeze]
	if sv == nil {
		if len(p.served) >= len(p.cm.Server.Layers) {
			return nil
		}
		sv = &served{}
		p.served[freeze] = sv
	}
	return sv
}

// Served is what a freeze layer's plan delivered (Planner.Served).
type Served struct {
	// Key is the plan in use: the split and whether it goes compressed.
	Key CalKey
	// Total counts the samples delivered; Run those delivered in a row
	// by the plan in use, since it came into use.
	Total, Run int64
}

// Served returns the counts of each freeze layer that delivered samples,
// for a caller that measures the CPU both sides spend per sample
// (ObserveCPU).
func (p *Planner) Served() []Served {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Served
	for f, sv := range p.served {
		k := CalKey{Freeze: f, Split: f}
		if pl := p.plans[f]; pl != nil {
			k = clientKey(f, pl.chosen)
		}
		out = append(out, Served{Key: k, Total: sv.total, Run: sv.run})
	}
	return out
}

// Calibration factors are kept within [minCalFactor, maxCalFactor]; a
// plan changes on a calibration only for a candidate predicted at least
// calSwitchGain faster than the plan in use as now calibrated, so that
// two candidates within the measurements' noise do not take turns.
const (
	minCalFactor  = 0.25
	maxCalFactor  = 8
	calSwitchGain = 0.95
)

// ObserveCPU records the CPU time the server and the mount spent per
// sample (seconds; 0: not measured) while the plan key of its freeze
// layer was in use and delivered every sample, and calibrates the cost
// model with them (Calibration): the factor of each side is its measured
// CPU per sample, as wall time on that side (Profile.Wall, over the
// profile's threads), over the estimate of the plan in use. A GPU side's
// CPU is not its stage's cost: it is not calibrated. Under the auto
// policy the plan then moves to the best candidate as calibrated, when
// that is calSwitchGain faster; it reports whether it moved. A key that
// is no longer the plan in use is ignored.
func (p *Planner) ObserveCPU(key CalKey, serverCPU, clientCPU float64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	freeze := key.Freeze
	pl := p.plans[freeze]
	if pl == nil || clientKey(freeze, pl.chosen) != key {
		return false
	}
	cm := p.cm
	k := pl.chosen
	measure := func(prof *Profile, cpu, stage, factor float64, m *map[CalKey]float64, mk CalKey, computes bool, all *float64) {
		if !(cpu > 0) || !(stage > 0) || isGPU(prof.Device) {
			return
		}
		if !(factor > 0) {
			factor = 1
		}
		f := prof.Wall(cpu) / float64(max(1, prof.Threads)) / (stage / factor)
		f = min(max(f, minCalFactor), maxCalFactor)
		if *m == nil {
			*m = map[CalKey]float64{}
		}
		if old, ok := (*m)[mk]; ok {
			f = (old + f) / 2
		}
		(*m)[mk] = f
		if computes {
			*all = f
		}
	}
	measure(cm.Server, serverCPU, k.ServerSeconds, k.ServerFactor, &cm.Cal.Server, serverKey(k), k.Split != spec.SplitRaw, &cm.Cal.ServerCompute)
	measure(cm.Client, clientCPU, k.ClientSeconds, k.ClientFactor, &cm.Cal.Client, clientKey(freeze, k), k.Split != freeze, &cm.Cal.ClientCompute)
	p.calibrations++
	sv := p.servedLocked(freeze)
	if sv != nil {
		sv.cals++
	}
	best, cands, err := cm.Choose(freeze, p.plannedBW)
	if err != nil {
		return false
	}
	// The plan in use as now calibrated: cands holds the faster of a
	// layer's two ways, which may not be the one in use.
	cur, err := cm.Candidate(freeze, k.Split, k.Compressed, p.plannedBW)
	if err != nil {
		return false
	}
	np := &plan{chosen: cur, cands: cands}
	switched := p.policy.Mode == "auto" && clientKey(freeze, best) != key && best.SecondsPerSample < calSwitchGain*cur.SecondsPerSample
	if switched {
		np.chosen = best
		p.switches++
		if sv != nil {
			sv.run = 0
		}
	}
	p.plans[freeze] = np
	return switched
}

// Stats are a planner's figures, for the mount's stats file.
type Stats struct {
	// Policy is the --split setting.
	Policy string `json:"policy"`
	// SharedCompute says the model adds both sides' compute (same processors).
	SharedCompute bool `json:"shared_compute"`
	// BandwidthBps is the current estimate and PlannedBandwidthBps the one the
	// plans were made with (bytes per second).
	BandwidthBps        float64 `json:"bandwidth_bytes_per_second"`
	PlannedBandwidthBps float64 `json:"planned_bandwidth_bytes_per_second"`
	// Replans counts re-planning after bandwidth changes; Transfers the
	// transfers measured.
	Replans   int   `json:"replans"`
	Transfers int64 `json:"transfers"`
	// Calibrations counts the cost model's corrections by the CPU both
	// sides measured per sample (ObserveCPU), Switches the plans they
	// changed.
	Calibrations int `json:"calibrations"`
	Switches     int `json:"switches"`
	// Plans holds one entry per freeze layer in use.
	Plans []PlanStats `json:"plans"`
}

// PlanStats is the decision for one freeze layer.
type PlanStats struct {
	// Freeze is the layer the mount serves; Split the layer the server sends
	// and SplitLayer its name ("raw" for images).
	Freeze     int    `json:"freeze"`
	Split      int    `json:"split"`
	SplitLayer string `json:"split_layer"`
	// Compressed says the split's tensor goes compressed on the wire.
	Compressed bool `json:"compressed"`
	// PredictedPerSec is the cost model's throughput of the split;
	// MeasuredPerSec the recent delivered samples per second (0 until
	// measured).
	PredictedPerSec float64 `json:"predicted_samples_per_second"`
	MeasuredPerSec  float64 `json:"measured_samples_per_second"`
	// ServerSeconds, WireSeconds and ClientSeconds are the cost model's
	// per-sample time of each stage of the split.
	ServerSeconds float64 `json:"predicted_server_seconds"`
	WireSeconds   float64 `json:"predicted_wire_seconds"`
	ClientSeconds float64 `json:"predicted_client_seconds"`
	// PredictedWireBytes is the model's bytes per sample; MeasuredWireBytes
	// the bytes per sample seen.
	PredictedWireBytes float64 `json:"predicted_wire_bytes_per_sample"`
	MeasuredWireBytes  float64 `json:"measured_wire_bytes_per_sample"`
	// Samples is the number delivered.
	Samples int64 `json:"samples"`
	// ServerFactor and ClientFactor are the calibration factors of the
	// split's stages (1: none; Calibration), and Calibrations how often
	// this freeze layer's plan was calibrated.
	ServerFactor float64 `json:"server_factor"`
	ClientFactor float64 `json:"client_factor"`
	Calibrations int     `json:"calibrations"`
}

// Stats returns the planner's figures.
func (p *Planner) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := Stats{Policy: p.policy.String(), SharedCompute: p.cm.SharedCompute, BandwidthBps: p.bw, PlannedBandwidthBps: p.plannedBW, Replans: p.replans, Transfers: p.transfers,
		Calibrations: p.calibrations, Switches: p.switches}
	seen := map[int]bool{}
	add := func(f int) {
		if seen[f] {
			return
		}
		seen[f] = true
		pl, err := p.planLocked(f)
		if err != nil {
			return
		}
		ps := PlanStats{Freeze: f, Split: pl.chosen.Split, SplitLayer: spec.SplitName(pl.chosen.Split), Compressed: pl.chosen.Compressed, PredictedPerSec: pl.chosen.Throughput, PredictedWireBytes: pl.chosen.WireBytes,
			ServerSeconds: pl.chosen.ServerSeconds, WireSeconds: pl.chosen.WireSeconds, ClientSeconds: pl.chosen.ClientSeconds,
			ServerFactor: pl.chosen.ServerFactor, ClientFactor: pl.chosen.ClientFactor}
		if sv := p.served[f]; sv != nil {
			ps.Calibrations = sv.cals
		}
		if r := p.rates[f]; r != nil {
			ps.MeasuredPerSec, ps.MeasuredWireBytes, ps.Samples = r.rate()
		}
		st.Plans = append(st.Plans, ps)
	}
	for f := range p.plans {
		add(f)
	}
	for f := range p.rates {
		add(f)
	}
	for f := range p.served {
		add(f)
	}
	for i := 1; i < len(st.Plans); i++ {
		for j := i; j > 0 && st.Plans[j].Freeze < st.Plans[j-1].Freeze; j-- {
			st.Plans[j], st.Plans[j-1] = st.Plans[j-1], st.Plans[j]
		}
	}
	return st
}

// rateMeter measures samples per second over the last rateWindow events.
type rateMeter struct {
	t       [rateWindow]time.Time
	cum     [rateWindow]int64 // samples delivered up to and including event i
	next    int
	full    bool
	samples int64
	wire    int64
}

const rateWindow = 64

func (r *rateMeter) add(t time.Time, n int, wire int64) {
	r.samples += int64(n)
	r.wire += wire
	r.t[r.next], r.cum[r.next] = t, r.samples
	r.next = (r.next + 1) % rateWindow
	if r.next == 0 {
		r.full = true
	}
}

// rate returns samples/s between the oldest and newest events kept, the
// bytes per sample overall, and the samples delivered.
func (r *rateMeter) rate() (perSec, wirePerSample float64, samples int64) {
	if r.samples > 0 {
		wirePerSample = float64(r.wire) / float64(r.samples)
	}
	last := (r.next + rateWindow - 1) % rateWindow
	first := 0
	if r.full {
		first = r.next
	}
	if last == first {
		return 0, wirePerSample, r.samples
	}
	d := r.t[last].Sub(r.t[first]).Seconds()
	if d <= 0 {
		return 0, wirePerSample, r.samples
	}
	return float64(r.cum[last]-r.cum[first]) / d, wirePerSample, r.samples
}
