package remote

// Model versions on the client (docs/SERVE.md, "Model versions"): a
// server that reloads a model announces its new model set's version in
// every answer (ModelsVersionHeader); the client then refetches GET
// /v1/models and tells the mount (OnModelReplaced), and asks every feature
// for the layer digest of the version its read was made for
// (BatchItem.Digest), so that no answer is another version's.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/featurefs/featurefs/extractor/api"
)

// modelSet is the servers' models as fetched once; never changed once
// published.
type modelSet struct {
	info   ModelsResponse
	models []*api.Model
	byName map[string]*api.Model
	// prev is each model's version before the last Refresh that replaced
	// it: reads made for it are still asked for at its layer digests (the
	// servers keep one previous version too).
	prev map[string]*api.Model
}

// version returns the version of req's model that req was made for: the
// current one when req.Digest is empty or the current digest, the previous
// one when it is that one's; otherwise an error matching
// api.ErrModelReplaced. An unknown model or layer is an error too.
func (s *modelSet) version(req api.Request) (*api.Model, error) {
	m, ok := s.byName[req.Model]
	if !ok {
		return nil, fmt.Errorf("extract %s: %w %q", req.Key, api.ErrUnknownModel, req.Model)
	}
	if req.Layer < 0 || req.Layer >= len(m.Layers) {
		return nil, fmt.Errorf("extract %s: %w %d of model %s (it has %d)", req.Key, api.ErrUnknownLayer, req.Layer, m.Name, len(m.Layers))
	}
	if req.Digest == "" || req.Digest == m.Digest {
		return m, nil
	}
	if p, ok := s.prev[req.Model]; ok && p.Digest == req.Digest {
		return p, nil
	}
	return nil, fmt.Errorf("extract %s: model %s (%.12s): %w (the servers now serve %.12s)", req.Key, req.Model, req.Digest, api.ErrModelReplaced, m.Digest)
}

// lists reports whether the models answer the set was built from lists
// layer of model at digest: whether the servers serve that version of it
// now (layer is in range: version checked it).
func (s *modelSet) lists(model string, layer int, digest string) bool {
	for _, mi := range s.info.Models {
		if mi.Name == model {
			return layer < len(mi.Layers) && mi.Layers[layer].Digest == digest
		}
	}
	return false
}

// OnModelReplaced sets the function called with each model version a
// Refresh brings (a mount points its tree at it: fs.FS.ModelReplaced). It
// is called on the refreshing goroutine, after the client serves the new
// version, one call at a time and outside the lock a read waiting for a
// refresh holds (f may wait for the kernel, and the kernel for that read).
func (c *Client) OnModelReplaced(f func(m *api.Model)) { c.onReplaced.Store(&f) }

// Version returns the version of the model set the client holds
// (ModelsResponse.Version).
func (c *Client) Version() string { return c.set.Load().info.Version }

// sawVersion starts a background Refresh when server u's answer carries a
// models version other than the client's: at most one runs at a time.
func (c *Client) sawVersion(u, version string) {
	if version == "" || version == c.set.Load().info.Version || !c.refreshing.CompareAndSwap(false, true) {
		return
	}
	if !c.owner.Go(func() {
		defer c.refreshing.Store(false)
		ctx, cancel := context.WithTimeout(c.owner.Context(), c.cfg.Timeout)
		defer cancel()
		if err := c.refreshFrom(ctx, []string{u}); err != nil {
			c.log.Warn("featurefs: the feature server's models changed and could not be fetched; keeping the version held", slog.String("server", u), slog.Any("err", err))
		}
	}) {
		c.refreshing.Store(false)
	}
}

// Refresh fetches GET /v1/models from the first server that answers and,
// when its version is not the client's, serves the new model set: each
// model whose digest changed is replaced (its previous version kept for
// the reads made for it) and handed to OnModelReplaced's function. A
// model whose layers or shapes changed is refused with a WARN line and
// keeps its old version (a remount serves it); models that appeared are
// ignored until a remount. A mount's SIGHUP calls it.
func (c *Client) Refresh(ctx context.Context) error {
	return c.refreshFrom(ctx, c.cfg.URLs)
}

func (c *Client) refreshFrom(ctx context.Context, urls []string) error {
	replaced, err := c.refreshSet(ctx, urls)
	if err != nil || len(replaced) == 0 {
		return err
	}
	// The tree is told outside refreshMu: telling it drops kernel pages,
	// which can wait for a read in progress, and such a read may be
	// waiting for refreshMu (ExtractWire's Refresh after a 412). Calls
	// are serialized and each hands over the version held now, so a slow
	// earlier refresh cannot point the tree back at an older one.
	f := c.onReplaced.Load()
	if f == nil {
		return nil
	}
	c.notifyMu.Lock()
	defer c.notifyMu.Unlock()
	for _, name := range replaced {
		if m := c.set.Load().byName[name]; m != nil {
			(*f)(m)
		}
	}
	return nil
}

// refreshSet is Refresh's part under refreshMu: the models fetched and,
// when their version is new, the client's set replaced. It returns the
// names of the models whose digest changed.
func (c *Client) refreshSet(ctx context.Context, urls []string) ([]string, error) {
	c.refreshMu.Lock()
	defer c.refreshMu.Unlock()
	var info ModelsResponse
	var errs []error
	for _, u := range urls {
		var err error
		if info, err = c.fetchModels(ctx, u); err == nil {
			errs = nil
			break
		}
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	cur := c.set.Load()
	if info.Version == cur.info.Version {
		return nil, nil
	}
	if info.DType != cur.info.DType || info.Source != cur.info.Source {
		return nil, fmt.Errorf("remote: the servers now serve %s as %s, the mount %s as %s: remount", info.Source, info.DType, cur.info.Source, cur.info.DType)
	}
	fresh, sizes, err := c.buildModels(info)
	if err != nil {
		return nil, err
	}
	next := &modelSet{info: info, byName: map[string]*api.Model{}, prev: map[string]*api.Model{}}
	var replaced []string
	for _, old := range cur.models {
		m := fresh.byName[old.Name]
		switch {
		case m == nil:
			c.log.Warn("featurefs: a feature server no longer serves a model; the mount keeps its last version", slog.String("model", old.Name))
			m = old
		case !slices.Equal(sizes[old.Name], c.npySizes[old.Name]):
			c.log.Warn("featurefs: a feature server's new model version has other layers or shapes; remount to serve it", slog.String("model", old.Name), slog.String("digest", m.Digest))
			m = old
		}
		if p, ok := cur.prev[old.Name]; ok {
			next.prev[old.Name] = p
		}
		if m.Digest != old.Digest {
			next.prev[old.Name] = old
			replaced = append(replaced, m.Name)
		}
		next.models = append(next.models, m)
		next.byName[m.Name] = m
	}
	c.set.Store(next)
	c.log.Info("featurefs: feature servers' models refreshed", slog.String("version", info.Version), slog.Int("replaced", len(replaced)))
	return replaced, nil
}
