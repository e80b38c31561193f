package extractor

// Split execution (HAPI): the storage side runs a model only up to a split
// layer S and ships that tensor; the training side finishes layers S..F with
// the sub-model graph.PruneFrom(layer S tensor, layer F tensor).
//
// ExtractFrom checks the tensor and hands it to the scheduler (batch.go) as
// a call of its own, in the lane of (model, S, F): a worker decodes it like
// an image, and the lane's batches run on the Service's pooled sessions of
// that sub-model. Split calls share the scheduler's bounds (MaxPending
// calls, decode tokens, sessions), priorities, retries and Close with image
// calls; this file has no goroutine or queue of its own.
//
// Lock order: no lock here; a split call is the scheduler's, under
// scheduler.mu (batch.go's order).

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/featurefs/featurefs/extractor/api"
)

// defaultSplitBatch is the split lanes' batch size when Config.BatchSize is 0.
const defaultSplitBatch = 8

// SplitStats are the figures of split execution.
type SplitStats struct {
	// Batches and Items count the batches run on split lanes and the
	// tensors in them (a failed batch's items retried one by one are not
	// counted again).
	Batches int64 `json:"batches"`
	Items   int64 `json:"items"`
	// Lanes is the number of (model, from, to) pairs used so far.
	Lanes int `json:"lanes"`
}

// SplitStats returns the split execution figures.
func (s *Service) SplitStats() SplitStats {
	return s.sched.splitStats()
}

// splitStats counts the split lanes' batches, items and lanes.
func (s *scheduler) splitStats() SplitStats {
	s.mu.Lock()
	lanes := 0
	for _, ln := range s.lanes {
		if ln.g().from != nil {
			lanes++
		}
	}
	s.mu.Unlock()
	return SplitStats{Batches: s.n.splitBatches.Load(), Items: s.n.splitItems.Load(), Lanes: lanes}
}

// ExtractFrom computes layer to of model from a .npy file of its layer from
// (as Extract returns it: per-sample shape, float32 or float16), and returns
// the .npy file of layer to in the Service's dtype. It is the second half of
// split execution: the other side ran the model up to layer from. from == to
// re-encodes the input. A tensor of the wrong shape or a malformed file is an
// error matching ErrBadTensor. The returned bytes are the caller's.
func (s *Service) ExtractFrom(ctx context.Context, model string, from, to int, npy []byte) ([]byte, error) {
	return s.ExtractFromVersion(ctx, model, "", from, to, npy)
}

// ExtractFromVersion is ExtractFrom on model's version digest (the model
// file's sha256): the current version or the previous one a Reload keeps;
// "" is the current one. A version it holds neither of is an error
// matching ErrModelReplaced, so that split execution never finishes one
// version's tensor with another's layers.
func (s *Service) ExtractFromVersion(ctx context.Context, model, digest string, from, to int, npy []byte) ([]byte, error) {
	reg := s.reg.Load()
	if _, ok := reg.models[model]; !ok {
		return nil, fmt.Errorf("extract from: %w %q", ErrUnknownModel, model)
	}
	m, ok := reg.version(model, digest)
	if !ok {
		return nil, fmt.Errorf("extract from: model %s (%.12s): %w", model, digest, ErrModelReplaced)
	}
	for _, l := range []int{from, to} {
		if l < 0 || l >= len(m.Layers) {
			return nil, fmt.Errorf("extract from: %w %d of model %s (it has %d)", ErrUnknownLayer, l, m.Name, len(m.Layers))
		}
	}
	if from > to {
		return nil, fmt.Errorf("extract from: layer %d of model %s comes after layer %d: %w", from, m.Name, to, ErrUnknownLayer)
	}
	fl := &m.Layers[from]
	shape, dt, data, err := api.ParseNPY(npy)
	if err != nil {
		return nil, fmt.Errorf("extract from %s %s: %w: %w", m.Name, fl.Name, ErrBadTensor, err)
	}
	if !slices.Equal(shape, fl.Shape) {
		return nil, fmt.Errorf("extract from %s %s: %w: shape %s, want %s", m.Name, fl.Name, ErrBadTensor, api.ShapeString(shape), api.ShapeString(fl.Shape))
	}
	if from == to {
		v := make([]float32, fl.Elements())
		api.DecodeNPYBody(data, dt, v)
		return api.EncodeNPY(fl.Shape, v, s.cfg.DType), nil
	}
	return s.sched.extractFrom(ctx, segment{m: m, l: m.Layers[to], from: fl}, &tensorInput{dt: dt, data: data})
}

// runSegment runs n inputs of layer from through the sub-model computing
// layer to, on a pooled session, bypassing the scheduler (profiles'
// measurement).
func (s *Service) runSegment(ctx context.Context, m *model, from, to Layer, n int, in, out []float32) error {
	return ortRunner{pool: s.pool}.run(ctx, segment{m: m, l: to, from: &from}, n, in, out)
}

// openSplitSession makes the session of a split key: the model pruned to
// compute layer k.layer from the tensor k.from.
func (s *Service) openSplitSession(m *model, k sessionKey, sc sessionConfig) (inferSession, error) {
	to := m.Layers[k.layer]
	var fromShape []int64
	for _, l := range m.Layers {
		if l.Tensor == k.from {
			fromShape = l.Shape
		}
	}
	if fromShape == nil {
		return nil, fmt.Errorf("model %s: split input %q is no layer", m.Name, k.from)
	}
	t := time.Now()
	sess, err := m.openSession(k.from, to, fromShape, sc)
	if err != nil {
		return nil, fmt.Errorf("model %s %s..%s: %w", m.Name, k.from, to.Name, err)
	}
	s.log.Debug("split session opened", "model", m.Name, "layer", to.Name, "from", k.from, "device", deviceChoice{gpu: sc.gpu, index: sc.gpuIndex}.String(), "took", time.Since(t))
	return sess, nil
}
