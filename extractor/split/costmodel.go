package split

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
//	            + copy(S) [+ compress(S)] on the server
//	            + bytes(S) x the server's CPU per byte sent
//	wire(S)   = (bytes(S) + overhead) / bandwidth (the encoded image for raw)
//	client(S) = compute(S..F) on the mount (decode + compute(input..F) for raw)
//	            + copy(S) [+ decompress(S)] on the mount
//	            + bytes(S) x the mount's CPU per byte received
//	time(S)   = max(server, wire, client)           stages on separate processors
//	time(S)   = max(server + client, wire)          both sides share processors
//
// with server and client multiplied by the calibration factors (Cal), where
// the CPU each side measured per sample while serving set them.
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
//
// The CPU per byte (Profile.ByteSeconds, measured on each side while the
// bandwidth probe passes) is what carrying a byte over the link costs each
// side besides computing: HTTP and the kernel's network stack. The
// tensor's own path is timed per layer in the profiles (LayerProfile's
// CopySeconds, EncodeSeconds, DecodeSeconds): on the test bed a 700 KB
// tensor cost the storage side about 5 ms of CPU beyond its compute (the
// wire codec 14% of its CPU, its cache write 13%, page faults of fresh
// buffers), where the probe's per-byte figure moved the estimate by 0.2
// ms. A split tensor is not cached by the server (fs/remote), and each
// layer is scored both compressed for the wire and plain: compression
// wins where the link is the slowest stage, and costs both sides' CPU
// where it is not.

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/featurefs/featurefs/extractor/spec"
)

// ErrNoProfile is matched by cost model errors for a missing or mismatched
// profile.
var ErrNoProfile = errors.New("no usable compute profile")

// ErrUnknownLayer is matched by Candidates and Choose errors for a freeze
// layer the profiles do not have, and by the extractor's errors for a
// layer index out of range: extractor/api's ErrUnknownLayer (and
// extractor's) is this one.
var ErrUnknownLayer = errors.New("unknown layer")

// CostModel scores split points for one model between a server and a mount.
type CostModel struct {
	// Server and Client are the two sides' compute profiles of the model.
	Server, Client *Profile
	// RawBytes is the mean encoded image size per sample (for spec.SplitRaw).
	RawBytes float64
	// ElemBytes is the bytes per element on the wire (4 float32, 2 float16).
	ElemBytes int64
	// OverheadBytes is the per-sample framing on the wire (.npy header,
	// protocol); default 256.
	OverheadBytes float64
	// SharedCompute says both sides run on the same processors (see the
	// file comment). NewCostModel sets it when both profiles are CPU ones of
	// the same host whose processes' CPU lists overlap (Profile.SharesCPUs).
	SharedCompute bool
	// ServerMemory and ClientMemory bound each side's memory for the model
	// (bytes; 0 = not limited). NewCostModel takes a GPU profile's free
	// memory.
	ServerMemory, ClientMemory int64
	// ServerBatch and ClientBatch are the batch sizes each side runs.
	ServerBatch, ClientBatch int
	// Compressed says tensors may go compressed on the wire (the server
	// compresses and the client accepts it): each layer is then scored
	// both ways, compressed (its bytes divided by its measured
	// LayerProfile.WireRatio, the codec's CPU on both sides) and plain.
	Compressed bool
	// Cal corrects the stage estimates by the CPU each side measured per
	// sample while serving (Planner.ObserveCPU); the zero value corrects
	// nothing.
	Cal Calibration
}

// Calibration holds, per side, how far the CPU a stage measured per
// sample while serving was from the profile's estimate of it: a
// stage's estimate is multiplied by the factor of its candidate where
// that candidate was measured, and otherwise, for a stage that computes
// (the server's of any layer, the mount's of any split below the freeze
// layer or raw), by the factor last measured on such a stage.
//
// The profiles time the model's runs and a tensor's path alone; serving
// costs more. On the test bed at half a core (ResNet-18, 400 Mbit/s) the
// storage side spent 1.71x the profiled CPU per sample at layer2 and
// 1.74x at layer6 (HTTP, page faults of fresh buffers, Go's runtime, the
// cache write of a whole layer, decoding real images), and the mount
// 1.33x at raw and 1.37x at layer2: near one factor per side whatever
// the split. And the bound side's measured CPU per sample over its cores
// was within 1% of the time per sample delivered: corrected, the slowest
// stage is the rate (docs/records/split-profiles.md).
type Calibration struct {
	// Server and Client are the measured factors by candidate.
	Server, Client map[CalKey]float64
	// ServerCompute and ClientCompute are the factors last measured on a
	// computing stage (0: none).
	ServerCompute, ClientCompute float64
}

// CalKey names a candidate of a freeze layer (the server's stage does not
// depend on the freeze layer: its keys have Freeze 0).
type CalKey struct {
	Freeze, Split int
	Compressed    bool
}

// serverKey and clientKey are k's keys on each side for freeze layer
// freeze.
func serverKey(k Candidate) CalKey { return CalKey{Split: k.Split, Compressed: k.Compressed} }
func clientKey(freeze int, k Candidate) CalKey {
	return CalKey{Freeze: freeze, Split: k.Split, Compressed: k.Compressed}
}

// factors returns the server's and the mount's factor for candidate k of
// freeze layer freeze (1: not calibrated).
func (cal *Calibration) factors(freeze int, k Candidate) (server, client float64) {
	server, client = 1, 1
	if f, ok := cal.Server[serverKey(k)]; ok {
		server = f
	} else if k.Split != spec.SplitRaw && cal.ServerCompute > 0 {
		server = cal.ServerCompute
	}
	if f, ok := cal.Client[clientKey(freeze, k)]; ok {
		client = f
	} else if k.Split != freeze && cal.ClientCompute > 0 {
		client = cal.ClientCompute
	}
	return server, client
}

// NewCostModel returns the cost model of two profiles of the same model with
// defaults: float32 on the wire, 110 KB images (ImageNet's mean JPEG), shared
// compute when both are CPU profiles of one host's same processors, GPU memory from the
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
		SharedCompute: server.SharesCPUs(client) && !isGPU(server.Device) && !isGPU(client.Device),
		ServerMemory:  server.FreeMemory,
		ClientMemory:  client.FreeMemory,
		ServerBatch:   max(1, server.Batch),
		ClientBatch:   max(1, client.Batch),
	}, nil
}

func isGPU(device string) bool { return strings.HasPrefix(device, "cuda") }

// Candidate is one split point scored.
type Candidate struct {
	// Split is the layer the server sends (spec.SplitRaw: the image).
	Split int `json:"split"`
	// ServerSeconds, WireSeconds and ClientSeconds are the per-sample time of
	// each stage; SecondsPerSample combines them (see CostModel).
	ServerSeconds    float64 `json:"server_seconds"`
	WireSeconds      float64 `json:"wire_seconds"`
	ClientSeconds    float64 `json:"client_seconds"`
	SecondsPerSample float64 `json:"seconds_per_sample"`
	// Throughput is 1/SecondsPerSample: samples per second.
	Throughput float64 `json:"throughput"`
	// Compressed says the tensor goes compressed on the wire (the faster
	// of the two ways, CostModel.Compressed); false: plain.
	Compressed bool `json:"compressed,omitempty"`
	// WireBytes is the bytes per sample on the wire.
	WireBytes float64 `json:"wire_bytes"`
	// ServerMemory and ClientMemory are the estimated memory needs.
	ServerMemory int64 `json:"server_memory"`
	ClientMemory int64 `json:"client_memory"`
	// Feasible is false when a side lacks the memory.
	Feasible bool `json:"feasible"`
	// ServerFactor and ClientFactor are the calibration factors the
	// stages were multiplied by (CostModel.Cal; 1: none).
	ServerFactor float64 `json:"server_factor"`
	ClientFactor float64 `json:"client_factor"`
}

// Candidates scores raw and every layer 0..freeze at bandwidth (bytes per
// second): each layer the faster of its tensor compressed and plain.
func (c *CostModel) Candidates(freeze int, bandwidth float64) ([]Candidate, error) {
	if err := c.check(freeze, bandwidth); err != nil {
		return nil, err
	}
	out := make([]Candidate, 0, freeze+2)
	for s := spec.SplitRaw; s <= freeze; s++ {
		plain, z, ok := c.variants(freeze, s, bandwidth)
		if ok && z.SecondsPerSample < plain.SecondsPerSample {
			plain = z
		}
		out = append(out, plain)
	}
	return out, nil
}

// Candidate scores one candidate of freeze layer freeze at bandwidth:
// split split, its tensor compressed or plain (a compressed one the
// model cannot send is scored plain; raw is never compressed).
func (c *CostModel) Candidate(freeze, split int, compressed bool, bandwidth float64) (Candidate, error) {
	if err := c.check(freeze, bandwidth); err != nil {
		return Candidate{}, err
	}
	if split < spec.SplitRaw || split > freeze {
		return Candidate{}, fmt.Errorf("cost model: split %d of freeze layer %d: %w", split, freeze, ErrUnknownLayer)
	}
	plain, z, ok := c.variants(freeze, split, bandwidth)
	if compressed && ok {
		return z, nil
	}
	return plain, nil
}

func (c *CostModel) check(freeze int, bandwidth float64) error {
	if c.Server == nil || c.Client == nil {
		return fmt.Errorf("%w: cost model without profiles", ErrNoProfile)
	}
	if freeze < 0 || freeze >= len(c.Server.Layers) || freeze >= len(c.Client.Layers) {
		return fmt.Errorf("cost model: %w %d (the model has %d)", ErrUnknownLayer, freeze, len(c.Server.Layers))
	}
	if !(bandwidth > 0) || math.IsInf(bandwidth, 0) {
		return fmt.Errorf("cost model: bandwidth %g bytes/s: want a positive number", bandwidth)
	}
	return nil
}

// variants scores split s of freeze layer freeze plain and, where it may
// go compressed (ok), compressed.
func (c *CostModel) variants(freeze, s int, bandwidth float64) (plain, z Candidate, ok bool) {
	elem := c.ElemBytes
	if elem <= 0 {
		elem = 4
	}
	sb, cb := int64(max(1, c.ServerBatch)), int64(max(1, c.ClientBatch))
	cl := c.Client.Layers
	var k Candidate
	k.Split = s
	if s == spec.SplitRaw {
		k.WireBytes = c.RawBytes + c.OverheadBytes
		k.ClientSeconds = c.Client.DecodeSeconds + cl[freeze].CumSeconds
		k.ClientMemory = c.Client.WeightBytes + cb*cl[freeze].ActBytes
		return c.score(k, freeze, bandwidth), Candidate{}, false
	}
	sl, ml := c.Server.Layers[s], cl[s]
	k.WireBytes = float64(sl.Bytes / 4 * elem)
	k.ServerSeconds = c.Server.DecodeSeconds + sl.CumSeconds + c.Server.Wall(sl.CopySeconds)
	k.ClientSeconds = cl[freeze].CumSeconds - ml.CumSeconds
	k.ServerMemory = c.Server.WeightBytes + sb*sl.ActBytes
	if s < freeze {
		// The mount copies the tensor into the rest of the model.
		k.ClientSeconds += c.Client.Wall(ml.CopySeconds)
		k.ClientMemory = c.Client.WeightBytes + cb*(cl[freeze].ActBytes-ml.ActBytes+ml.Bytes)
	}
	plain = k
	plain.WireBytes += c.OverheadBytes
	plain = c.score(plain, freeze, bandwidth)
	if !c.Compressed || !(sl.WireRatio > 1) {
		return plain, Candidate{}, false
	}
	z = k
	z.Compressed = true
	z.WireBytes = k.WireBytes/sl.WireRatio + c.OverheadBytes
	z.ServerSeconds += c.Server.Wall(sl.EncodeSeconds)
	z.ClientSeconds += c.Client.Wall(ml.DecodeSeconds)
	return plain, c.score(z, freeze, bandwidth), true
}

// score adds the per-byte costs and the wire time to k's stages of freeze
// layer freeze, calibrates them (Cal) and combines them (see the file
// comment).
func (c *CostModel) score(k Candidate, freeze int, bandwidth float64) Candidate {
	k.WireSeconds = k.WireBytes / bandwidth
	k.ServerSeconds += k.WireBytes * c.Server.ByteWallSeconds()
	k.ClientSeconds += k.WireBytes * c.Client.ByteWallSeconds()
	k.ServerFactor, k.ClientFactor = c.Cal.factors(freeze, k)
	k.ServerSeconds *= k.ServerFactor
	k.ClientSeconds *= k.ClientFactor
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
	return k
}

// Choose returns the best candidate for freeze at bandwidth and all of them.
// The best is the fastest feasible one, ties (within 1%) going to the fewest
// bytes on the wire; when none is feasible it is the one needing the least
// memory beyond what the sides have.
func (c *CostModel) Choose(freeze int, bandwidth float64) (Candidate, []Candidate, error) {
	cands, err := c.Candidates(freeze, bandwidth)
	if err != nil {
		return Candidate{}, nil, err
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
		over := func(k Candidate) int64 {
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
