package extractor

// Split execution (HAPI): the storage side runs a model only up to a split
// layer S and ships that tensor; the training side finishes layers S..F with
// the sub-model graph.PruneFrom(layer S tensor, layer F tensor). Requests for
// the same (model, S, F) are batched in one lane each, like images are in the
// scheduler, and run on sessions of the Service's bounded pool.
//
// Bounds: at most Config.MaxPending split requests are queued or running at
// once (ExtractFrom waits for room); one goroutine per lane runs only while
// the lane has work; lanes are at most layers^2 per model.
//
// Lock order: splitState.mu, then splitLane.mu; neither is held across an
// ONNX Runtime call or a pool acquire.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// ErrBadTensor is matched by ExtractFrom errors caused by the input tensor
// itself: not a .npy file, or not the shape of the layer it claims to be.
var ErrBadTensor = errors.New("bad input tensor")

// defaultSplitBatch is the split lanes' batch size when Config.BatchSize is 0.
const defaultSplitBatch = 8

// splitKey names one split lane.
type splitKey struct {
	model    string
	from, to int
}

// splitItem is one queued split request.
type splitItem struct {
	ctx  context.Context
	in   []float32
	done chan struct{}
	out  []byte
	err  error
}

// splitLane batches the requests of one (model, from, to).
type splitLane struct {
	key      splitKey
	m        *Model
	from, to Layer
	wake     chan struct{} // buffered 1

	mu      sync.Mutex
	q       []*splitItem // GUARDED_BY(mu)
	running bool         // GUARDED_BY(mu); a goroutine serves the lane
}

// splitState is the Service's split execution state; its zero value is
// ready for use.
type splitState struct {
	mu     sync.Mutex
	lanes  map[splitKey]*splitLane // GUARDED_BY(mu)
	slots  chan struct{}           // GUARDED_BY(mu) (made once)
	closed bool                    // GUARDED_BY(mu)
	wg     sync.WaitGroup
	stop   chan struct{} // GUARDED_BY(mu) (made once); closed by close
	runs   int64         // GUARDED_BY(mu): batches run
	items  int64         // GUARDED_BY(mu): items run
}

func (st *splitState) close() {
	st.mu.Lock()
	if !st.closed {
		st.closed = true
		if st.stop != nil {
			close(st.stop)
		}
	}
	st.mu.Unlock()
	st.wg.Wait()
}

// SplitStats are the figures of split execution.
type SplitStats struct {
	// Batches and Items count the sub-model runs and the tensors they computed.
	Batches int64 `json:"batches"`
	Items   int64 `json:"items"`
	// Lanes is the number of (model, from, to) pairs used so far.
	Lanes int `json:"lanes"`
}

// SplitStats returns the split execution figures.
func (s *Service) SplitStats() SplitStats {
	st := &s.split
	st.mu.Lock()
	defer st.mu.Unlock()
	return SplitStats{Batches: st.runs, Items: st.items, Lanes: len(st.lanes)}
}

// ExtractFrom computes layer to of model from a .npy file of its layer from
// (as Extract returns it: per-sample shape, float32 or float16), and returns
// the .npy file of layer to in the Service's dtype. It is the second half of
// split execution: the other side ran the model up to layer from. from == to
// re-encodes the input. A tensor of the wrong shape or a malformed file is an
// error matching ErrBadTensor. The returned bytes are the caller's.
func (s *Service) ExtractFrom(ctx context.Context, model string, from, to int, npy []byte) ([]byte, error) {
	m, ok := s.models[model]
	if !ok {
		return nil, fmt.Errorf("extract from: %w %q", ErrUnknownModel, model)
	}
	for _, l := range []int{from, to} {
		if l < 0 || l >= len(m.Layers) {
			return nil, fmt.Errorf("extract from: %w %d of model %s (it has %d)", ErrUnknownLayer, l, m.Name, len(m.Layers))
		}
	}
	if from > to {
		return nil, fmt.Errorf("extract from: layer %d of model %s comes after layer %d: %w", from, m.Name, to, ErrUnknownLayer)
	}
	fl := m.Layers[from]
	shape, _, data, err := DecodeNPY(npy)
	if err != nil {
		return nil, fmt.Errorf("extract from %s %s: %w: %w", m.Name, fl.Name, ErrBadTensor, err)
	}
	if !slices.Equal(shape, fl.Shape) {
		return nil, fmt.Errorf("extract from %s %s: %w: shape %s, want %s", m.Name, fl.Name, ErrBadTensor, shapeString(shape), shapeString(fl.Shape))
	}
	if from == to {
		return EncodeNPY(fl.Shape, data, s.cfg.DType), nil
	}
	return s.runSplit(ctx, m, from, to, data)
}

// runSplit queues data on the lane of (m, from, to) and waits for its result.
func (s *Service) runSplit(ctx context.Context, m *Model, from, to int, data []float32) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	st := &s.split
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return nil, ErrClosed
	}
	if st.slots == nil {
		st.slots = make(chan struct{}, s.cfg.MaxPending)
		st.stop = make(chan struct{})
		st.lanes = map[splitKey]*splitLane{}
	}
	slots, stop := st.slots, st.stop
	st.mu.Unlock()

	select {
	case slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-stop:
		return nil, ErrClosed
	}
	defer func() { <-slots }()

	k := splitKey{model: m.Name, from: from, to: to}
	it := &splitItem{ctx: ctx, in: data, done: make(chan struct{})}
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return nil, ErrClosed
	}
	ln := st.lanes[k]
	if ln == nil {
		ln = &splitLane{key: k, m: m, from: m.Layers[from], to: m.Layers[to], wake: make(chan struct{}, 1)}
		st.lanes[k] = ln
	}
	ln.mu.Lock()
	ln.q = append(ln.q, it)
	start := !ln.running
	ln.running = true
	ln.mu.Unlock()
	if start {
		st.wg.Add(1)
	}
	st.mu.Unlock()
	if start {
		go s.serveLane(ln, stop)
	} else {
		select {
		case ln.wake <- struct{}{}:
		default:
		}
	}

	select {
	case <-it.done:
		return it.out, it.err
	case <-ctx.Done():
		// The lane skips or finishes it; nobody reads the result.
		return nil, ctx.Err()
	}
}

// splitBatch is the batch size of m's split lanes.
func (s *Service) splitBatch(m *Model) int {
	if m.fixedBatch > 0 {
		return m.fixedBatch
	}
	if s.cfg.BatchSize > 0 {
		return s.cfg.BatchSize
	}
	return defaultSplitBatch
}

// serveLane runs batches of ln until its queue is empty, waiting up to
// MaxWait for a batch to fill.
func (s *Service) serveLane(ln *splitLane, stop <-chan struct{}) {
	defer s.split.wg.Done()
	bs := s.splitBatch(ln.m)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	first := time.Now()
	for {
		ln.mu.Lock()
		// Drop the items nobody waits for any more.
		ln.q = slices.DeleteFunc(ln.q, func(it *splitItem) bool {
			if it.ctx.Err() != nil {
				it.err = it.ctx.Err()
				close(it.done)
				return true
			}
			return false
		})
		if len(ln.q) == 0 {
			ln.running = false
			ln.mu.Unlock()
			return
		}
		select {
		case <-stop:
			for _, it := range ln.q {
				it.err = ErrClosed
				close(it.done)
			}
			ln.q = nil
			ln.running = false
			ln.mu.Unlock()
			return
		default:
		}
		if len(ln.q) < bs {
			if wait := s.cfg.MaxWait - time.Since(first); wait > 0 {
				ln.mu.Unlock()
				if timer == nil {
					timer = time.NewTimer(wait)
				} else {
					timer.Reset(wait)
				}
				select {
				case <-ln.wake:
				case <-timer.C:
				case <-stop:
				}
				if !timer.Stop() {
					select {
					case <-timer.C:
					default:
					}
				}
				continue
			}
		}
		n := min(bs, len(ln.q))
		batch := slices.Clone(ln.q[:n])
		ln.q = slices.Delete(ln.q, 0, n)
		ln.mu.Unlock()
		s.runSplitBatch(ln, batch)
		first = time.Now()
	}
}

// runSplitBatch runs one batch; when it fails, each item is run alone so
// that one poisoned tensor fails only its own request.
func (s *Service) runSplitBatch(ln *splitLane, batch []*splitItem) {
	ctx := context.Background()
	ie, oe := int(ln.from.Elements()), int(ln.to.Elements())
	n := len(batch)
	in := make([]float32, n*ie)
	out := make([]float32, n*oe)
	for i, it := range batch {
		copy(in[i*ie:], it.in)
	}
	err := s.runSplitSession(ctx, ln, n, in, out)
	if err == nil {
		for i, it := range batch {
			it.out = EncodeNPY(ln.to.Shape, out[i*oe:(i+1)*oe], s.cfg.DType)
			close(it.done)
		}
		s.countSplit(1, n)
		return
	}
	if n == 1 {
		batch[0].err = fmt.Errorf("extract %s %s..%s: %w", ln.m.Name, ln.from.Name, ln.to.Name, err)
		close(batch[0].done)
		s.countSplit(1, 0)
		return
	}
	s.log.Warn("split batch failed; retrying its items one by one", "model", ln.m.Name, "layer", ln.to.Name, "from", ln.from.Name, "batch", n, "err", err)
	for i, it := range batch {
		if err := s.runSplitSession(ctx, ln, 1, in[i*ie:(i+1)*ie], out[:oe]); err != nil {
			it.err = fmt.Errorf("extract %s %s..%s: %w", ln.m.Name, ln.from.Name, ln.to.Name, err)
		} else {
			it.out = EncodeNPY(ln.to.Shape, out[:oe], s.cfg.DType)
		}
		close(it.done)
	}
	s.countSplit(int64(n)+1, n)
}

func (s *Service) countSplit(batches int64, items int) {
	s.split.mu.Lock()
	s.split.runs += batches
	s.split.items += int64(items)
	s.split.mu.Unlock()
}

// runSplitSession runs n inputs of ln.from through the sub-model to ln.to.
func (s *Service) runSplitSession(ctx context.Context, ln *splitLane, n int, in, out []float32) error {
	return s.runSegment(ctx, ln.m, ln.from, ln.to, n, in, out)
}

// runSegment runs n inputs of layer from through the sub-model computing
// layer to, on a pooled session.
func (s *Service) runSegment(ctx context.Context, m *Model, from, to Layer, n int, in, out []float32) error {
	e, err := s.pool.acquire(ctx, sessionKey{model: m.Name, layer: to.Index, from: from.Tensor})
	if err != nil {
		return err
	}
	defer s.pool.release(e)
	return e.s.run(n, in, out)
}

// openSplitSession makes the session of a split key: the model pruned to
// compute layer k.layer from the tensor k.from.
func (s *Service) openSplitSession(m *Model, k sessionKey, sc sessionConfig) (inferSession, error) {
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
	b, err := m.g.PruneFrom(k.from, to.Tensor)
	if err != nil {
		return nil, fmt.Errorf("model %s: prune %s..%s: %w", m.Name, k.from, to.Name, err)
	}
	t := time.Now()
	sess, err := newORTSession(b, k.from, to.Tensor, fromShape, to.Shape, m.fixedBatch, sc)
	if err != nil {
		return nil, fmt.Errorf("model %s %s..%s: %w", m.Name, k.from, to.Name, err)
	}
	s.log.Debug("split session opened", "model", m.Name, "layer", to.Name, "from", k.from, "device", s.dev.String(), "took", time.Since(t))
	return sess, nil
}
