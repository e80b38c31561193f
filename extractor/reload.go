package extractor

// Replacing a model without a restart (docs/MODELS.md, "Reload").

import (
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/featurefs/featurefs/extractor/graph"
)

// registry is the models a Service serves: replaced whole by Reload, never
// changed once published.
type registry struct {
	models map[string]*model // by name: the current version
	order  []*model          // the order given to New
	// prev is each replaced model's previous version, kept so that the
	// requests made for it (Request.Digest) finish on it: one per model.
	prev map[string]*model
}

// version returns model name at the file digest, current or previous;
// digest "" is the current.
func (r *registry) version(name, digest string) (*model, bool) {
	if m, ok := r.models[name]; ok && (digest == "" || m.Digest == digest) {
		return m, true
	}
	if m, ok := r.prev[name]; ok && m.Digest == digest {
		return m, true
	}
	return nil, false
}

// forKey returns a version the key of a session or lane (segment.key) was
// made for: a layer's is any held version whose layer has that digest,
// the current one first; a split segment's is the version with that file
// digest.
func (r *registry) forKey(k sessionKey) (*model, bool) {
	if k.from != "" {
		return r.version(k.model, k.version)
	}
	for _, m := range []*model{r.models[k.model], r.prev[k.model]} {
		if m == nil || k.layer < 0 || k.layer >= len(m.Layers) {
			continue
		}
		if (segment{m: m, l: m.Layers[k.layer]}).key() == k {
			return m, true
		}
	}
	return nil, false
}

// ErrReloadRefused is matched by Reload's error when the new file cannot
// replace the model; the old version keeps serving.
var ErrReloadRefused = errors.New("the new file cannot replace the running version")

// ModelVersion is one model's version: its file's digest and when it was
// loaded.
type ModelVersion struct {
	Name   string
	Path   string
	Digest string
	Loaded time.Time
}

// Versions returns each model's current version, in the order given to New.
func (s *Service) Versions() []ModelVersion {
	var out []ModelVersion
	for _, m := range s.reg.Load().order {
		out = append(out, ModelVersion{Name: m.Name, Path: m.Path, Digest: m.Digest, Loaded: m.Loaded})
	}
	return out
}

// LoadedAt returns when the current version of model name was loaded
// (ModelVersion.Loaded), if its file digest is digest; false for another
// digest or an unknown model. A feature server reports it per model (GET
// /v1/models), so that its clients move only to later versions.
func (s *Service) LoadedAt(name, digest string) (time.Time, bool) {
	m, ok := s.reg.Load().models[name]
	if !ok || m.Digest != digest {
		return time.Time{}, false
	}
	return m.Loaded, true
}

// Reload loads model name's file again and, if its bytes changed, replaces
// the model with it: requests made from then on (and those naming no
// Digest) use the new version; requests made for the old one (Request.Digest)
// finish on it, which is kept until the next replacement. The new file is
// parsed, its layers found, and one ONNX Runtime session opened on its last
// layer before anything changes, all on the caller's goroutine; it must have
// the old version's layers (count and shapes), input and fixed batch, which
// the mounted tree and the feature files' sizes are made of: otherwise, or
// when it does not load, the error matches ErrReloadRefused and the old
// version keeps serving. changed is false when the file's digest is the
// current one's.
func (s *Service) Reload(name string) (m *Model, changed bool, err error) {
	s.reloads.Lock()
	defer s.reloads.Unlock()
	old, ok := s.reg.Load().models[name]
	if !ok {
		return nil, false, fmt.Errorf("reload: %w %q", ErrUnknownModel, name)
	}
	f, data, err := openModelFile(old.spec.Path)
	if err != nil {
		return nil, false, fmt.Errorf("model %s: %w: %w", name, ErrReloadRefused, err)
	}
	sum := graph.Sum256(data)
	if hex.EncodeToString(sum[:]) == old.Digest {
		f.Close()
		return old.public(), false, nil
	}
	// The file read, the parse, the pruned copy and the check
	// session are garbage once this returns, and so is the version before
	// the previous: handed back to the system, or a mount's resident
	// memory grows by them with every reload.
	defer releaseMemory()
	nm, err := loadModelFile(old.spec, f, data) // read once: the digest's bytes are the ones loaded
	if err != nil {
		return nil, false, fmt.Errorf("%w: %w", ErrReloadRefused, err)
	}
	if why := incompatible(old, nm); why != "" {
		return nil, false, fmt.Errorf("model %s: %w: %s (a restart serves it)", name, ErrReloadRefused, why)
	}
	if err := s.checkSession(nm); err != nil {
		return nil, false, fmt.Errorf("model %s: %w: %w", name, ErrReloadRefused, err)
	}
	nm.spec, nm.Loaded = old.spec, time.Now()
	nm.bufs = old.bufs // the same input shape (incompatible)
	cur := s.reg.Load()
	next := &registry{models: map[string]*model{}, prev: map[string]*model{}}
	for k, v := range cur.models {
		next.models[k] = v
	}
	for k, v := range cur.prev {
		next.prev[k] = v
	}
	next.models[name] = nm
	next.prev[name] = old
	for _, o := range cur.order {
		if o.Name == name {
			o = nm
		}
		next.order = append(next.order, o)
	}
	s.reg.Store(next)
	s.forgetReplaced()
	return nm.public(), true, nil
}

// forgetReplaced drops the lanes and idle sessions of the versions the
// service no longer holds (the one before the previous): those of layers
// whose digest the held versions share go on, so the first read of an
// unchanged layer after a reload opens no session and measures no batch
// size.
func (s *Service) forgetReplaced() {
	reg := s.reg.Load()
	held := func(k sessionKey) bool {
		_, ok := reg.forKey(k)
		return ok
	}
	s.sched.forgetLanes(reg.forKey, func(m *model) bool {
		return reg.models[m.Name] == m || reg.prev[m.Name] == m
	})
	for _, p := range s.pools {
		p.forget(held)
	}
}

// incompatible says why nm cannot replace old in a running tree, or "".
func incompatible(old, nm *model) string {
	switch {
	case len(nm.Layers) != len(old.Layers):
		return fmt.Sprintf("%d layers, the running version has %d", len(nm.Layers), len(old.Layers))
	case !slices.Equal(nm.InputShape, old.InputShape) || nm.FixedBatch != old.FixedBatch:
		return "another input shape or fixed batch"
	}
	for i, l := range nm.Layers {
		if !slices.Equal(l.Shape, old.Layers[i].Shape) {
			return fmt.Sprintf("%s has shape %v, the running version's %v", l.Name, l.Shape, old.Layers[i].Shape)
		}
	}
	return ""
}

// checkSession opens (and closes) a session of m's last layer on the
// service's first device: ONNX Runtime accepts the new file.
func (s *Service) checkSession(m *model) error {
	sc := sessionConfig{threads: s.cfg.IntraOpThreads, gpu: s.dev.gpu, gpuIndex: s.dev.index, tensorRT: s.dev.tensorRT, precision: s.cfg.Precision}
	sess, err := m.openSession("", m.Layers[len(m.Layers)-1], nil, sc)
	if err != nil {
		return err
	}
	sess.close()
	return nil
}

// Previous returns the version of model name that its last Reload replaced,
// kept for the requests made for it (Request.Digest); false when the model
// was never replaced. A feature server answers a client that asks for that
// version from it (fs/remote).
func (s *Service) Previous(name string) (*Model, bool) {
	m, ok := s.reg.Load().prev[name]
	if !ok {
		return nil, false
	}
	return m.public(), true
}
