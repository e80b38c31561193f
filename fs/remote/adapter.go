package remote

// The adapters a mount uses: the servers' source as a bucket.Bucket and
// their models as an features.Extractor.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/extractor/augment"
	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/features"
)

// Bucket returns the servers' source as a read-only bucket: List and Stat
// go to the servers (routed by prefix or key, falling over in rank order);
// Get reads images and sidecars (GET /v1/object).
func (c *Client) Bucket() *Bucket { return &Bucket{c: c} }

// Extractor returns the servers' models as an features.Extractor whose Extract
// fetches features from the servers in batches.
func (c *Client) Extractor() *Extractor { return &Extractor{c: c} }

// Bucket is the servers' source seen through GET /v1/list and /v1/stat.
type Bucket struct{ c *Client }

var _ bucket.Bucket = (*Bucket)(nil)

// List returns one page of a one-level listing. When no server answers, the
// last page seen for the same prefix and token is returned, if any.
func (b *Bucket) List(ctx context.Context, prefix, token string) (bucket.Page, error) {
	c := b.c
	staleKey := "l\x00" + prefix + "\x00" + token
	q := url.Values{"prefix": {prefix}}
	if token != "" {
		q.Set("continuation", token)
	}
	var lastErr error
	for _, i := range Rank(c.cfg.URLs, prefix) {
		var resp ListResponse
		err := c.get(ctx, c.servers[i].url, "/v1/list", q, &resp)
		if err == nil {
			p := bucket.Page{Prefixes: resp.Prefixes, Next: resp.Next, Archives: resp.Archives}
			for _, o := range resp.Objects {
				p.Objects = append(p.Objects, o.object())
			}
			c.stale.Put(staleKey, p, len(p.Objects)+len(p.Prefixes)+1)
			return p, nil
		}
		if !failover(err) || ctx.Err() != nil {
			return bucket.Page{}, fmt.Errorf("list %q: %w", prefix, err)
		}
		lastErr = err
	}
	if v, ok := c.stale.Get(staleKey); ok {
		c.n.staleAnswers.Add(1)
		c.log.Warn("featurefs: no feature server answers; serving the last listing seen", slog.String("key", prefix), slog.Any("err", lastErr))
		return v.(bucket.Page), nil
	}
	return bucket.Page{}, fmt.Errorf("list %q: %w", prefix, lastErr)
}

// Stat returns an object's metadata. When no server answers, the last
// answer for the key is returned, if any.
func (b *Bucket) Stat(ctx context.Context, key string) (bucket.Object, error) {
	c := b.c
	staleKey := "s\x00" + key
	var lastErr error
	for _, i := range Rank(c.cfg.URLs, key) {
		var o ObjectInfo
		err := c.get(ctx, c.servers[i].url, "/v1/stat", url.Values{"key": {key}}, &o)
		if err == nil {
			c.stale.Put(staleKey, o.object(), 1)
			return o.object(), nil
		}
		if !failover(err) || ctx.Err() != nil {
			return bucket.Object{}, fmt.Errorf("stat %q: %w", key, err)
		}
		lastErr = err
	}
	if v, ok := c.stale.Get(staleKey); ok {
		c.n.staleAnswers.Add(1)
		return v.(bucket.Object), nil
	}
	return bucket.Object{}, fmt.Errorf("stat %q: %w", key, lastErr)
}

// Get reads an object with GET /v1/object from the server key is routed
// to: the servers send images (split raw) and archives' sidecars
// (bucket.Object.Plain, which a mount shows as plain files), nothing else.
// At most maxBytes are read (<= 0: bucket.DefaultMaxObjectBytes).
func (b *Bucket) Get(ctx context.Context, key string, maxBytes int64) ([]byte, bucket.Object, error) {
	c := b.c
	if maxBytes <= 0 {
		maxBytes = bucket.DefaultMaxObjectBytes
	}
	u := c.route(key).url
	rctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, u+"/v1/object?"+url.Values{"key": {key}}.Encode(), nil)
	if err != nil {
		return nil, bucket.Object{}, err
	}
	c.authorize(req)
	c.n.httpRequests.Add(1)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, bucket.Object{}, c.unavailable(u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, bucket.Object{}, responseError(resp, u, key)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBytes+1))
	if err != nil {
		return nil, bucket.Object{}, c.unavailable(u, fmt.Errorf("reading %s: %w", key, err))
	}
	if int64(len(data)) > maxBytes {
		return nil, bucket.Object{}, tooLarge(u, key, fmt.Sprintf("more than %d bytes", maxBytes))
	}
	return data, bucket.Object{Key: key, Size: int64(len(data))}, nil
}

// Keys lists none: the servers list no keys, and a --remote mount has no
// feature store (the servers read and fill it).
func (b *Bucket) Keys(ctx context.Context, keyPrefix string, max int) ([]string, error) {
	return nil, nil
}

// Identity is "featurefs+<sorted URLs joined by ','>|<the servers' source
// identity>".
func (b *Bucket) Identity() string { return b.c.identity }

// Extractor is the servers' models; Extract asks the server the object is
// routed to, gathering concurrent requests into batches.
type Extractor struct{ c *Client }

// Models returns the servers' models, in their order.
func (e *Extractor) Models() []*api.Model {
	return append([]*api.Model(nil), e.c.set.Load().models...)
}

// Model returns the model called name.
func (e *Extractor) Model(name string) (*api.Model, bool) {
	m, ok := e.c.set.Load().byName[name]
	return m, ok
}

// DType is the servers' element type.
func (e *Extractor) DType() api.DType { return e.c.info.DType }

// Device names the servers: "remote:" and the URLs.
func (e *Extractor) Device() string { return "remote:" + strings.Join(e.c.cfg.URLs, ",") }

// Stats returns the client's figures in the extractor's form: requests,
// completed, failed, bad images, batches (HTTP batch requests) and batched
// items.
func (e *Extractor) Stats() api.Stats {
	n := &e.c.n
	return api.Stats{
		Device: e.Device(), Requests: n.requests.Load(), Completed: n.completed.Load(), Failed: n.failed.Load(),
		BadImages: n.badImages.Load(), Batches: n.batches.Load(), BatchedItems: n.batchedItems.Load(),
		InFlight: int(n.inFlight.Load()),
		Wire: &api.WireStats{Bytes: n.wireBytes.Load(), RawBytes: n.rawBytes.Load(),
			DecompressSeconds: time.Duration(n.decompressNanos.Load()).Seconds()},
	}
}

// ObjectViewParams returns the parameters of augmented view spec of the
// object key (version etag) at layer of model, from the server the key is
// routed to (GET /v1/viewparams): the server reads the image's header
// (features.ObjectViewParamser).
func (e *Extractor) ObjectViewParams(ctx context.Context, model string, layer int, spec augment.Spec, key, etag string) (augment.Params, error) {
	c := e.c
	if !c.views {
		return augment.Params{}, fmt.Errorf("%s: the feature servers do not compute augmented views: %w", key, features.ErrNoViewParams)
	}
	m, err := c.set.Load().version(api.Request{Model: model, Layer: layer})
	if err != nil {
		return augment.Params{}, err
	}
	it := BatchItem{Model: model, Layer: layer, Key: key, ETag: etag, Digest: m.Layers[layer].Digest, Aug: AugItemOf(&spec)}
	var p augment.Params
	if err := c.get(ctx, c.route(key).url, "/v1/viewparams", viewParamsQuery(it), &p); err != nil {
		return augment.Params{}, err
	}
	return p, nil
}

// Extract returns the .npy file of req's feature from the server req.Key is
// routed to; req.Fetch is not used. Errors: a bad image is an
// *api.ImageError; a missing object matches bucket.ErrNotFound; a
// server that does not answer within the timeout matches ErrUnavailable.
func (e *Extractor) Extract(ctx context.Context, req api.Request) ([]byte, error) {
	data, _, err := e.ExtractWire(ctx, req)
	return data, err
}

// ExtractWire is Extract, also returning the bytes the feature took on the
// wire (fewer than its length where the server compressed it).
//
// An item the server refuses (StatusModelChanged) makes the client refresh
// from that server. When that server lags (its models are older than the
// client's: a rolling deploy has not reached it) and the client still
// holds the layer's digest, it is asked again after 200 ms, then twice as
// long each time, for at most ClientConfig.LagWait in all: past it the read
// fails with an error matching api.ErrModelReplaced naming the server.
// Otherwise it is asked once more if the client still holds the digest and
// the servers list it, else the read fails (the tree follows the new
// version: OnModelReplaced).
func (e *Extractor) ExtractWire(ctx context.Context, req api.Request) ([]byte, int, error) {
	return e.extractWire(ctx, req, itemOpts{})
}

// extractWire is ExtractWire with the item's split flags.
func (e *Extractor) extractWire(ctx context.Context, req api.Request, opts itemOpts) ([]byte, int, error) {
	c := e.c
	m, err := c.set.Load().version(req)
	if err != nil {
		return nil, 0, err
	}
	want := m.Layers[req.Layer].Digest
	var urls []string // the refusing server first: its models say whether it lags
	var lagUntil time.Time
	wait := lagFirstWait
	retried := false
	for {
		data, wire, err := c.extract(ctx, req, want, opts)
		if !errors.Is(err, api.ErrModelReplaced) || ctx.Err() != nil {
			return data, wire, err
		}
		if urls == nil {
			u := c.route(req.Key).url
			urls = append([]string{u}, slices.DeleteFunc(slices.Clone(c.cfg.URLs), func(v string) bool { return v == u })...)
		}
		older, rerr := c.refreshFrom(ctx, urls, true)
		if rerr != nil {
			return nil, 0, fmt.Errorf("%w; refreshing the models: %w", err, rerr)
		}
		// Asked again only while the client still serves the layer at
		// that digest: a changed layer fails, and the tree follows
		// (OnModelReplaced).
		set := c.set.Load()
		if cur := set.byName[req.Model]; cur == nil || cur.Layers[req.Layer].Digest != want {
			return nil, 0, err
		}
		if older {
			// The server has not reloaded yet: wait for it.
			if lagUntil.IsZero() {
				lagUntil = time.Now().Add(c.cfg.LagWait)
			}
			left := time.Until(lagUntil)
			if left <= 0 {
				return nil, 0, fmt.Errorf("extract %s: %s serves an older version of model %s than the mount's and did not reload within %v: %w",
					req.Key, urls[0], req.Model, c.cfg.LagWait, err)
			}
			if werr := c.sleep(ctx, min(wait, left)); werr != nil {
				return nil, 0, fmt.Errorf("extract %s: waiting for %s, which serves an older version of model %s, to reload: %w", req.Key, urls[0], req.Model, werr)
			}
			wait *= 2
			continue
		}
		// The servers' models answer must list the digest as what they
		// serve: a version the client refused (other layers or shapes)
		// leaves the old digest here though the servers compute it no
		// more. Asked once more at most.
		if retried || !set.lists(req.Model, req.Layer, want) {
			return nil, 0, err
		}
		retried = true
	}
}

// sleep waits d, or until ctx is done or the client closed.
func (c *Client) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.stop:
		return fmt.Errorf("%w: client closed", ErrUnavailable)
	}
}
