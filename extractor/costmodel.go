package extractor

// The split cost model (HAPI): which layer S <= F the storage side should
// send so that the mount gets layer F fastest, from per-layer output bytes,
// the compute profiles of both sides, the measured bandwidth between them and
// the memory each side has.
//
// HAPI's choose_split_idx keeps the layers whose output is smaller than the
// input and fits the bandwidth, then takes the first whose two-sided memory
// beats running everything on the client. Here every S in raw, 0..F is
// scored by its steady-state time per sample instead:
//
//	server(S) = decode + compute(input..S) on the server (0 for raw)
//	wire(S)   = (bytes(S) + overhead) / bandwidth (the encoded image for raw)
//	client(S) = compute(S..F) on the mount (decode + compute(input..F) for raw)
//	time(S)   = max(server, wire, client)           stages on separate processors
//	time(S)   = max(server + client, wire)          both sides share processors
//
// The stages are pipelined: the mount keeps several batch requests in flight
// (parallel readers, DataLoader workers), the server computes the next batch
// while the previous one is on the wire, and the mount's split lane finishes
// one response while the next arrives, so the slowest stage bounds the
// throughput. Compute on processors both sides share does not overlap (the
// cores are busy either way), so there the two compute stages add up, while
// the transfer still overlaps them. A candidate whose memory need (weights
// plus batch activations, as in HAPI's get_mem_consumption) exceeds a side's
// memory is infeasible. Among candidates within 1% of the best time the one
// sending the fewest bytes wins.

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/featurefs/featurefs/extractor/spec"
)

// SplitRaw is the split "layer" that ships the encoded image: the mount
// decodes and computes everything (spec.SplitRaw).
const SplitRaw = spec.SplitRaw

// ErrNoProfile is matched by cost model errors for a missing or mismatched
// profile.
var ErrNoProfile = errors.New("no usable compute profile")

// CostModel scores split points for one model between a server and a mount.
type CostModel struct {
	// Server and Client are the two sides' compute profiles of the model.
	Server, Client *Profile
	// RawBytes is the mean encoded image size per sample (for SplitRaw).
	RawBytes float64
	// ElemBytes is the bytes per element on the wire (4 float32, 2 float16).
	ElemBytes int64
	// OverheadBytes is the per-sample framing on the wire (.npy header,
	// protocol); default 256.
	OverheadBytes float64
	// SharedCompute says both sides run on the same processors (see the
	// file comment). NewCostModel sets it when both profiles are CPU ones of
	// the same host.
	SharedCompute bool
	// ServerMemory and ClientMemory bound each side's memory for the model
	// (bytes; 0 = not limited). NewCostModel takes a GPU profile's free
	// memory.
	ServerMemory, ClientMemory int64
	// ServerBatch and ClientBatch are the batch sizes each side runs.
	ServerBatch, ClientBatch int
}

// NewCostModel returns the cost model of two profiles of the same model with
// defaults: float32 on the wire, 110 KB images (ImageNet's mean JPEG), shared
// compute when both are CPU profiles of one host, GPU memory from the
// profiles, batches of the profiles.
func NewCostModel(server, client *Profile) (*CostModel, error) {
	if server == nil || client == nil {
		return nil, fmt.Errorf("%w: need both sides' profiles", ErrNoProfile)
	}
	if err := server.Validate(); err != nil {
		return nil, fmt.Errorf("%w: server: %w", ErrNoProfile, err)
	}
	if err := client.Validate(); err != nil {
		return nil, fmt.Errorf("%w: client: %w", ErrNoProfile, err)
	}
	if server.Digest != client.Digest || len(server.Layers) != len(client.Layers) {
		return nil, fmt.Errorf("%w: server and client profiles are of different models (%.12s, %.12s)", ErrNoProfile, server.Digest, client.Digest)
	}
	return &CostModel{
		Server:        server,
		Client:        client,
		RawBytes:      110 << 10,
		ElemBytes:     4,
		OverheadBytes: 256,
		SharedCompute: server.Host != "" && server.Host == client.Host && !isGPU(server.Device) && !isGPU(client.Device),
		ServerMemory:  server.FreeMemory,
		ClientMemory:  client.FreeMemory,
		ServerBatch:   max(1, server.Batch),
		ClientBatch:   max(1, client.Batch),
	}, nil
}

func isGPU(device string) bool { return strings.HasPrefix(device, "cuda") }

// SplitCandidate is one split point scored.
type SplitCandidate struct {
	// Split is the layer the server sends (SplitRaw: the image).
	Split int `json:"split"`
	// ServerSeconds, WireSeconds and ClientSeconds are the per-sample time of
	// each stage; SecondsPerSample combines them (see CostModel).
	ServerSeconds    float64 `json:"server_seconds"`
	WireSeconds      float64 `json:"wire_seconds"`
	ClientSeconds    float64 `json:"client_seconds"`
	SecondsPerSample float64 `json:"seconds_per_sample"`
	// Throughput is 1/SecondsPerSample: samples per second.
	Throughput float64 `json:"throughput"`
	// WireBytes is the bytes per sample on the wire.
	WireBytes float64 `json:"wire_bytes"`
	// ServerMemory and ClientMemory are the estimated memory needs.
	ServerMemory int64 `json:"server_memory"`
	ClientMemory int64 `json:"client_memory"`
	// Feasible is false when a side lacks the memory.
	Feasible bool `json:"feasible"`
}

// SplitName is "raw" for SplitRaw and "layerK" otherwise.
func SplitName(split int) string { return spec.SplitName(split) }

// Candidates scores raw and every layer 0..freeze at bandwidth (bytes per
// second).
func (c *CostModel) Candidates(freeze int, bandwidth float64) ([]SplitCandidate, error) {
	if c.Server == nil || c.Client == nil {
		return nil, fmt.Errorf("%w: cost model without profiles", ErrNoProfile)
	}
	if freeze < 0 || freeze >= len(c.Server.Layers) || freeze >= len(c.Client.Layers) {
		return nil, fmt.Errorf("cost model: %w %d (the model has %d)", ErrUnknownLayer, freeze, len(c.Server.Layers))
	}
	if !(bandwidth > 0) || math.IsInf(bandwidth, 0) {
		return nil, fmt.Errorf("cost model: bandwidth %g bytes/s: want a positive number", bandwidth)
	}
	elem := c.ElemBytes
	if elem <= 0 {
		elem = 4
	}
	sb, cb := int64(max(1, c.ServerBatch)), int64(max(1, c.ClientBatch))
	cl := c.Client.Layers
	out := make([]SplitCandidate, 0, freeze+2)
	for s := SplitRaw; s <= freeze; s++ {
		var k SplitCandidate
		k.Split = s
		if s == SplitRaw {
			k.WireBytes = c.RawBytes + c.OverheadBytes
			k.ClientSeconds = c.Client.DecodeSeconds + cl[freeze].CumSeconds
			k.ClientMemory = c.Client.WeightBytes + cb*cl[freeze].ActBytes
		} else {
			sl := c.Server.Layers[s]
			k.WireBytes = float64(sl.Bytes/4*elem) + c.OverheadBytes
			k.ServerSeconds = c.Server.DecodeSeconds + sl.CumSeconds
			k.ClientSeconds = cl[freeze].CumSeconds - cl[s].CumSeconds
			k.ServerMemory = c.Server.WeightBytes + sb*sl.ActBytes
			if s < freeze {
				k.ClientMemory = c.Client.WeightBytes + cb*(cl[freeze].ActBytes-cl[s].ActBytes+cl[s].Bytes)
			}
		}
		k.WireSeconds = k.WireBytes / bandwidth
		if c.SharedCompute {
			k.SecondsPerSample = max(k.ServerSeconds+k.ClientSeconds, k.WireSeconds)
		} else {
			k.SecondsPerSample = max(k.ServerSeconds, k.WireSeconds, k.ClientSeconds)
		}
		if k.SecondsPerSample > 0 {
			k.Throughput = 1 / k.SecondsPerSample
		}
		k.Feasible = (c.ServerMemory <= 0 || k.ServerMemory <= c.ServerMemory) &&
			(c.ClientMemory <= 0 || k.ClientMemory <= c.ClientMemory)
		out = append(out, k)
	}
	return out, nil
}

// Choose returns the best candidate for freeze at bandwidth and all of them.
// The best is the fastest feasible one, ties (within 1%) going to the fewest
// bytes on the wire; when none is feasible it is the one needing the least
// memory beyond what the sides have.
func (c *CostModel) Choose(freeze int, bandwidth float64) (SplitCandidate, []SplitCandidate, error) {
	cands, err := c.Candidates(freeze, bandwidth)
	if err != nil {
		return SplitCandidate{}, nil, err
	}
	best := -1
	minTime := math.Inf(1)
	for _, k := range cands {
		if k.Feasible {
			minTime = min(minTime, k.SecondsPerSample)
		}
	}
	for i, k := range cands {
		if !k.Feasible || k.SecondsPerSample > minTime*1.01 {
			continue
		}
		if best < 0 || k.WireBytes < cands[best].WireBytes {
			best = i
		}
	}
	if best < 0 {
		over := func(k SplitCandidate) int64 {
			return max(0, k.ServerMemory-c.ServerMemory) + max(0, k.ClientMemory-c.ClientMemory)
		}
		best = 0
		for i, k := range cands {
			if over(k) < over(cands[best]) {
				best = i
			}
		}
	}
	return cands[best], cands, nil
}

// SplitPolicy is the --split setting (spec.SplitPolicy).
type SplitPolicy = spec.SplitPolicy

// ParseSplitPolicy parses auto, none, raw, K or layerK.
func ParseSplitPolicy(s string) (SplitPolicy, error) { return spec.ParseSplitPolicy(s) }

// Planner keeps the split decision of each freeze layer up to date: it
// re-plans when the measured bandwidth moves by more than a factor of 2 from
// the bandwidth of the last plan, and it measures the throughput reached.
// It is safe for concurrent use.
type Planner struct {
	cm     *CostModel
	policy SplitPolicy

	mu        sync.Mutex
	bw        float64            // GUARDED_BY(mu): current estimate, bytes/s
	plannedBW float64            // GUARDED_BY(mu): estimate the plans were made with
	plans     map[int]*plan      // GUARDED_BY(mu): by freeze layer (bounded by the layer count)
	replans   int                // GUARDED_BY(mu)
	transfers int64              // GUARDED_BY(mu)
	now       func() time.Time   // the clock
	rates     map[int]*rateMeter // GUARDED_BY(mu): by freeze layer
}

type plan struct {
	chosen SplitCandidate
	cands  []SplitCandidate
}

// minTransferBytes is the smallest transfer that counts as a bandwidth
// measurement: smaller ones measure latency, not bandwidth.
const minTransferBytes = 64 << 10

// NewPlanner returns a planner for cm under policy, starting from a
// measured bandwidth (bytes per second).
func NewPlanner(cm *CostModel, policy SplitPolicy, bandwidth float64) (*Planner, error) {
	if cm == nil {
		return nil, fmt.Errorf("%w: planner without a cost model", ErrNoProfile)
	}
	if !(bandwidth > 0) {
		return nil, fmt.Errorf("planner: bandwidth %g: want a positive number", bandwidth)
	}
	return &Planner{cm: cm, policy: policy, bw: bandwidth, plannedBW: bandwidth, plans: map[int]*plan{}, rates: map[int]*rateMeter{}, now: time.Now}, nil
}

// Split returns the layer the server should send for freeze layer freeze
// (SplitRaw: the image). Unknown layers get freeze itself.
func (p *Planner) Split(freeze int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	pl, err := p.planLocked(freeze)
	if err != nil {
		return freeze
	}
	return pl.chosen.Split
}

// Candidates returns every candidate of freeze layer freeze as the current
// plan scored them (at the bandwidth planned with), and the one in use.
func (p *Planner) Candidates(freeze int) (chosen SplitCandidate, all []SplitCandidate, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pl, err := p.planLocked(freeze)
	if err != nil {
		return SplitCandidate{}, nil, err
	}
	return pl.chosen, append([]SplitCandidate(nil), pl.cands...), nil
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
// reports whether the plans were redone: when the bandwidth estimate (a
// moving average of transfers of 64 KiB or more) differs from the one
// planned with by more than a factor of 2.
func (p *Planner) ObserveTransfer(n int64, d time.Duration) bool {
	if n < minTransferBytes || d <= 0 {
		return false
	}
	rate := float64(n) / d.Seconds()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.transfers++
	p.bw = 0.5*p.bw + 0.5*rate
	if r := p.bw / p.plannedBW; r > 2 || r < 0.5 {
		p.plannedBW = p.bw
		p.replans++
		clear(p.plans)
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
		clear(p.plans)
	}
}

// ObserveSamples records n samples of freeze layer freeze delivered (with
// wire bytes on the wire) now, for the measured throughput.
func (p *Planner) ObserveSamples(freeze, n int, wire int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
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

// PlannerStats are a planner's figures, for the mount's stats file.
type PlannerStats struct {
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
	// PredictedPerSec is the cost model's throughput of the split;
	// MeasuredPerSec the recent delivered samples per second (0 until
	// measured).
	PredictedPerSec float64 `json:"predicted_samples_per_second"`
	MeasuredPerSec  float64 `json:"measured_samples_per_second"`
	// PredictedWireBytes is the model's bytes per sample; MeasuredWireBytes
	// the bytes per sample seen.
	PredictedWireBytes float64 `json:"predicted_wire_bytes_per_sample"`
	MeasuredWireBytes  float64 `json:"measured_wire_bytes_per_sample"`
	// Samples is the number delivered.
	Samples int64 `json:"samples"`
}

// Stats returns the planner's figures.
func (p *Planner) Stats() PlannerStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := PlannerStats{Policy: p.policy.String(), SharedCompute: p.cm.SharedCompute, BandwidthBps: p.bw, PlannedBandwidthBps: p.plannedBW, Replans: p.replans, Transfers: p.transfers}
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
		ps := PlanStats{Freeze: f, Split: pl.chosen.Split, SplitLayer: SplitName(pl.chosen.Split), PredictedPerSec: pl.chosen.Throughput, PredictedWireBytes: pl.chosen.WireBytes}
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
