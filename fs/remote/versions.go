package remote

// Model versions on the client (docs/SERVE.md, "Model versions"): a
// server that reloads a model announces its new model set's version in
// every answer (ModelsVersionHeader), and the client asks for it every
// ClientConfig.PollInterval too (HEAD /v1/models, pollVersions), so that it
// learns of a reload when no read reaches a server; the client then
// refetches GET /v1/models and tells the mount (OnModelReplaced), and asks every feature
// for the layer digest of the version its read was made for
// (BatchItem.Digest), so that no answer is another version's.
//
// The client only moves forward: a model's other version is adopted only
// when its server loaded it later than the server that reported the
// version held (ModelInfo.LoadedAt), so that in a rolling deploy the
// servers not yet reloaded do not move the mount back. Such a lagging
// server's version is remembered (one per server) and not fetched again,
// and a read it refuses waits for its reload (ExtractWire).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

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
	// loaded is each held model's ModelInfo.LoadedAt as the server it was
	// taken from reported it ("" when it did not).
	loaded map[string]string
}

// DefaultLagWait is ClientConfig.LagWait's default.
const DefaultLagWait = 10 * time.Second

// lagFirstWait is the first wait before a lagging server is asked again;
// each next wait doubles (awaitLag).
const lagFirstWait = 200 * time.Millisecond

// laterLoad reports whether a model version loaded at cand (a server's
// ModelInfo.LoadedAt) may replace the one held, loaded at held: when cand
// is later, or when either is missing or unreadable (a server that
// predates it: the client then moves to any other version, as before).
func laterLoad(cand, held string) bool {
	c, err := time.Parse(time.RFC3339Nano, cand)
	if err != nil {
		return true
	}
	h, err := time.Parse(time.RFC3339Nano, held)
	if err != nil {
		return true
	}
	return c.After(h)
}

// note records version as server s's (its last answer's header) and
// reports whether the client judged that version older than its own
// (held): then nothing is fetched. An answer with the held version
// forgets the judgement (the server reloaded).
func (s *server) note(version, held string) bool {
	s.vmu.Lock()
	defer s.vmu.Unlock()
	s.seen = version
	if version == held {
		s.older = ""
	}
	return s.older != "" && s.older == version
}

// judge remembers version as the one of s's judged older than the
// client's, in place of any other.
func (s *server) judge(version string) {
	s.vmu.Lock()
	defer s.vmu.Unlock()
	s.older = version
}

// lags reports whether s's last answer carried the version the client
// judged older than its own.
func (s *server) lags() bool {
	s.vmu.Lock()
	defer s.vmu.Unlock()
	return s.older != "" && s.seen == s.older
}

// version returns the version of req's model that req was made for: the
// current one when req.Digest is empty or the current digest, the previous
// one when it is that one's; otherwise an error matching
// api.ErrModelReplaced. An unknown model or layer is an error too.
func (s *modelSet) version(req api.Request) (*api.Model, error) {
	m, ok := s.byName[req.Model]
	if !ok {
		return nil, fmt.Errorf("extract %s: %w %s", req.Key, api.ErrUnknownModel, echo(req.Model))
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

// sawVersion starts a background refresh from server u when its answer
// carries a models version other than the client's: at most one runs at a
// time, and none for a version of u's the client already judged older than
// its own (refreshSet).
func (c *Client) sawVersion(u, version string) {
	if version == "" {
		return
	}
	held := c.set.Load().info.Version
	if s := c.byURL[u]; s != nil && s.note(version, held) {
		return
	}
	if version == held || !c.refreshing.CompareAndSwap(false, true) {
		return
	}
	if !c.owner.Go(func() {
		defer c.refreshing.Store(false)
		ctx, cancel := context.WithTimeout(c.owner.Context(), c.cfg.Timeout)
		defer cancel()
		if _, err := c.refreshFrom(ctx, []string{u}, true); err != nil {
			c.log.Warn("featurefs: the feature server's models changed and could not be fetched; keeping the version held", slog.String("server", u), slog.Any("err", err))
		}
	}) {
		c.refreshing.Store(false)
	}
}

// pollVersions asks every server for its models version every
// PollInterval until the client is closed (ClientConfig.PollInterval):
// one HEAD /v1/models per server and interval, the servers at once (as
// many requests as servers), each bounded by Timeout; a version other
// than the client's starts a refresh as any answer's does (sawVersion).
func (c *Client) pollVersions() {
	ctx := c.owner.Context()
	t := time.NewTicker(c.cfg.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var wg sync.WaitGroup
		for _, s := range c.servers {
			wg.Go(func() { c.pollVersion(ctx, s.url) })
		}
		wg.Wait()
	}
}

// pollVersion asks server u for its models version with HEAD /v1/models
// (every authenticated answer carries ModelsVersionHeader; a HEAD carries
// no body). A server that does not answer is left to the reads to find.
func (c *Client) pollVersion(ctx context.Context, u string) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, u+"/v1/models", nil)
	if err != nil {
		return
	}
	c.authorize(req)
	c.n.httpRequests.Add(1)
	resp, err := c.http.Do(req)
	if err != nil {
		c.log.Debug("featurefs: asking a feature server for its models version failed", slog.String("server", u), slog.Any("err", err))
		return
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		c.sawVersion(u, resp.Header.Get(ModelsVersionHeader))
	}
}

// Refresh fetches GET /v1/models from the first server that answers and,
// when its version is not the client's, serves the new model set: each
// model whose digest changed, and whose new version its server loaded
// later than the one held (ModelInfo.LoadedAt), is replaced (its previous
// version kept for the reads made for it) and handed to OnModelReplaced's
// function. A version loaded earlier is not adopted (one INFO line: the
// server lags). A model whose layers or shapes changed is refused with a
// WARN line and keeps its old version (a remount serves it); models that
// appeared are ignored until a remount. A mount's SIGHUP calls it.
func (c *Client) Refresh(ctx context.Context) error {
	_, err := c.refreshFrom(ctx, c.cfg.URLs, false)
	return err
}

// refreshFrom is Refresh from the first of urls that answers; with
// skipJudged, a first server whose last answer carried a version already
// judged older is not asked again. older reports that the first server's
// models are older than the client's (it lags).
func (c *Client) refreshFrom(ctx context.Context, urls []string, skipJudged bool) (older bool, err error) {
	replaced, older, err := c.refreshSet(ctx, urls, skipJudged)
	if err != nil || len(replaced) == 0 {
		return older, err
	}
	// The tree is told outside refreshMu: telling it drops kernel pages,
	// which can wait for a read in progress, and such a read may be
	// waiting for refreshMu (ExtractWire's Refresh after a 412). Calls
	// are serialized and each hands over the version held now, so a slow
	// earlier refresh cannot point the tree back at an older one.
	f := c.onReplaced.Load()
	if f == nil {
		return false, nil
	}
	c.notifyMu.Lock()
	defer c.notifyMu.Unlock()
	for _, name := range replaced {
		if m := c.set.Load().byName[name]; m != nil {
			(*f)(m)
		}
	}
	return false, nil
}

// refreshSet is Refresh's part under refreshMu: the models fetched and,
// when their version is new, the client's set replaced. It returns the
// names of the models whose digest changed, and whether the first of urls
// answered with models all older than (or the same as) the client's: then
// the set is kept whole and that server's version remembered (server.judge).
func (c *Client) refreshSet(ctx context.Context, urls []string, skipJudged bool) ([]string, bool, error) {
	c.refreshMu.Lock()
	defer c.refreshMu.Unlock()
	if s := c.byURL[urls[0]]; skipJudged && s != nil && s.lags() {
		return nil, true, nil // judged by the refresh that held refreshMu before
	}
	var info ModelsResponse
	var from string
	var errs []error
	for _, u := range urls {
		var err error
		if info, err = c.fetchModels(ctx, u); err == nil {
			from, errs = u, nil
			break
		}
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, false, errors.Join(errs...)
	}
	cur := c.set.Load()
	if info.Version == cur.info.Version {
		return nil, false, nil
	}
	if info.DType != cur.info.DType || info.Source != cur.info.Source {
		return nil, false, fmt.Errorf("remote: the servers now serve %s as %s, the mount %s as %s: remount", info.Source, info.DType, cur.info.Source, cur.info.DType)
	}
	fresh, sizes, err := c.buildModels(info)
	if err != nil {
		return nil, false, err
	}
	next := &modelSet{info: info, byName: map[string]*api.Model{}, prev: map[string]*api.Model{}, loaded: map[string]string{}}
	var replaced, older []string
	for _, old := range cur.models {
		m := fresh.byName[old.Name]
		switch {
		case m == nil:
			c.log.Warn("featurefs: a feature server no longer serves a model; the mount keeps its last version", slog.String("model", old.Name))
			m = old
		case !slices.Equal(sizes[old.Name], c.npySizes[old.Name]):
			c.log.Warn("featurefs: a feature server's new model version has other layers or shapes; remount to serve it", slog.String("model", old.Name), slog.String("digest", m.Digest))
			m = old
		case m.Digest != old.Digest && !laterLoad(fresh.loaded[m.Name], cur.loaded[old.Name]):
			older = append(older, old.Name)
			m = old
		}
		if p, ok := cur.prev[old.Name]; ok {
			next.prev[old.Name] = p
		}
		next.loaded[old.Name] = cur.loaded[old.Name]
		if m.Digest != old.Digest {
			next.prev[old.Name] = old
			next.loaded[old.Name] = fresh.loaded[m.Name]
			replaced = append(replaced, m.Name)
		}
		next.models = append(next.models, m)
		next.byName[m.Name] = m
	}
	if len(older) > 0 {
		if len(replaced) == 0 {
			// Nothing newer: the set stays, and this server's version is
			// not fetched again until it changes (sawVersion): one line
			// per server and version.
			first := older[0]
			c.log.Info("featurefs: a feature server serves an older model version than the mount's (not yet reloaded); the mount keeps its own",
				slog.String("server", from), slog.String("version", info.Version), slog.String("models", strings.Join(older, ",")),
				slog.String("digest", fresh.byName[first].Digest), slog.String("loaded_at", fresh.loaded[first]),
				slog.String("mount_digest", cur.byName[first].Digest), slog.String("mount_loaded_at", cur.loaded[first]))
			if s := c.byURL[from]; s != nil {
				s.judge(info.Version)
			}
			return nil, from == urls[0], nil
		}
		// Some models newer, some older: the set lists the versions held,
		// and its version is theirs.
		next.info = heldInfo(info, cur.info, older)
	}
	c.set.Store(next)
	c.log.Info("featurefs: feature servers' models refreshed", slog.String("version", next.info.Version), slog.Int("replaced", len(replaced)))
	return replaced, false, nil
}

// heldInfo is info with the models named in kept listed as held answers
// them (their older versions not adopted), and its version recomputed.
func heldInfo(info, held ModelsResponse, kept []string) ModelsResponse {
	out := info
	out.Models = slices.Clone(info.Models)
	for i, mi := range out.Models {
		if !slices.Contains(kept, mi.Name) {
			continue
		}
		if j := slices.IndexFunc(held.Models, func(h ModelInfo) bool { return h.Name == mi.Name }); j >= 0 {
			out.Models[i] = held.Models[j]
		}
	}
	out.Version = ModelsVersion(out.Models)
	return out
}
