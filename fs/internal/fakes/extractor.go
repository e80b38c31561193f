package fakes

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/extractor/augment"
)

// Feature computes a fake extractor's .npy file of layer l for an object's
// bytes in dtype dt. Each test package passes its own, so that its tests
// can recompute the bytes they expect.
type Feature func(l api.Layer, data []byte, dt api.DType) []byte

// Extractor is an in-memory extractor (the Extractor of fs, fs/features
// and fs/remote): the feature of an object is Feature of the bytes its
// req.Fetch returns; an object whose bytes start with "BAD" is a bad image.
// It counts calls, in all and per object key, tracks how many run at once,
// and can be slowed down. Safe for concurrent use; set Delay, BadErr and
// the dtype before the first Extract.
type Extractor struct {
	models  []*api.Model
	dtype   api.DType
	feature Feature

	// Delay holds each Extract for that long (or until its context ends).
	Delay time.Duration
	// BadErr is the Err of the ImageError a "BAD" object gets (nil: none).
	BadErr error
	// Calls counts Extract calls; Running those in progress and
	// MaxRunning the most that ever were at once.
	Calls, Running, MaxRunning atomic.Int64

	mu    sync.Mutex
	byKey map[string]int // GUARDED_BY(mu): Extract calls per object key
}

// NewExtractor returns an extractor of models (float32) computing feature.
func NewExtractor(feature Feature, models ...*api.Model) *Extractor {
	return &Extractor{models: models, dtype: api.Float32, feature: feature, byKey: map[string]int{}}
}

// SetDType makes the extractor serve dt.
func (e *Extractor) SetDType(dt api.DType) { e.dtype = dt }

// Models returns the models.
func (e *Extractor) Models() []*api.Model { return e.models }

// Model returns the model called name.
func (e *Extractor) Model(name string) (*api.Model, bool) {
	for _, m := range e.models {
		if m.Name == name {
			return m, true
		}
	}
	return nil, false
}

// DType returns the element type served.
func (e *Extractor) DType() api.DType { return e.dtype }

// Device is "fake".
func (e *Extractor) Device() string { return "fake" }

// Stats reports the device and the calls as requests.
func (e *Extractor) Stats() api.Stats {
	return api.Stats{Device: "fake", Requests: e.Calls.Load()}
}

// CallsFor returns the Extract calls for object key.
func (e *Extractor) CallsFor(key string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.byKey[key]
}

// Keys returns the object keys Extract was called for, sorted.
func (e *Extractor) Keys() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	keys := make([]string, 0, len(e.byKey))
	for k := range e.byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Extract fetches req's object and returns its fake feature.
func (e *Extractor) Extract(ctx context.Context, req api.Request) ([]byte, error) {
	e.Calls.Add(1)
	e.mu.Lock()
	e.byKey[req.Key]++
	e.mu.Unlock()
	n := e.Running.Add(1)
	defer e.Running.Add(-1)
	for {
		m := e.MaxRunning.Load()
		if n <= m || e.MaxRunning.CompareAndSwap(m, n) {
			break
		}
	}
	if e.Delay > 0 {
		select {
		case <-time.After(e.Delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	m, ok := e.Model(req.Model)
	if !ok || req.Layer < 0 || req.Layer >= len(m.Layers) {
		return nil, fmt.Errorf("no model %s layer %d", req.Model, req.Layer)
	}
	data, err := req.Fetch(ctx)
	if err != nil {
		return nil, err
	}
	if bytes.HasPrefix(data, []byte("BAD")) {
		return nil, &api.ImageError{Key: req.Key, Reason: "not an image", Err: e.BadErr}
	}
	if req.Augment != nil {
		data = ViewInput(data, *req.Augment)
	}
	return e.feature(m.Layers[req.Layer], data, e.dtype), nil
}

// ViewInput is what the fake extractor computes the feature of for view a
// of an object's bytes: the bytes, then the view's key and identity.
func ViewInput(data []byte, a augment.Spec) []byte {
	return append(append(append([]byte{}, data...), "|"+a.Key()+"|"...), a.Identity...)
}

// ViewParams draws view a's parameters for an object's bytes as if the
// image were (64 + its length) x 48 pixels, at the model's crop size.
func (e *Extractor) ViewParams(model string, a augment.Spec, data []byte) (augment.Params, error) {
	m, ok := e.Model(model)
	if !ok {
		return augment.Params{}, fmt.Errorf("no model %s", model)
	}
	if bytes.HasPrefix(data, []byte("BAD")) {
		return augment.Params{}, &api.ImageError{Key: "", Reason: "not an image", Err: e.BadErr}
	}
	return a.Params(64+len(data), 48, m.Preprocess.Crop), nil
}

// Gated is an Extractor whose every Extract first reports its object key on
// Entered (when not nil), then waits until Gate is closed, ignoring its
// context like an ONNX Runtime run, which cannot be interrupted; with
// HonorCtx it returns when its context ends instead, and CtxErr keeps that
// context's error. Once through the gate it extracts as its Extractor does.
type Gated struct {
	*Extractor
	Gate     chan struct{}
	Entered  chan string
	HonorCtx bool
	// CtxErr holds the error of the context of the last Extract that saw
	// it end (HonorCtx).
	CtxErr atomic.Value
}

// Extract waits at the gate, then extracts.
func (g *Gated) Extract(ctx context.Context, req api.Request) ([]byte, error) {
	if g.Entered != nil {
		g.Entered <- req.Key
	}
	if g.HonorCtx {
		select {
		case <-g.Gate:
		case <-ctx.Done():
			g.CtxErr.Store(ctx.Err())
			return nil, ctx.Err()
		}
	} else {
		<-g.Gate
	}
	return g.Extractor.Extract(context.Background(), req)
}
