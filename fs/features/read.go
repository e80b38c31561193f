package features

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"time"

	"github.com/featurefs/featurefs/cache"
	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/fs/bucket"
)

// Feature returns the .npy bytes of obj's feature at a model's layer, by
// the same path as a read of the mounted file: a known bad object fails at
// once; else the cache, else an extraction whose result is stored; identical
// concurrent calls share one run. It needs no mount: featurefs serve calls it.
// An unknown model or layer matches api.ErrUnknownModel /
// api.ErrUnknownLayer. If ctx ends first, Feature returns ctx.Err() and
// the run goes on (and fills the cache).
func (p *Pipeline) Feature(ctx context.Context, model string, layer int, obj bucket.Object) ([]byte, error) {
	if !p.isImage(path.Base(obj.Key)) {
		return nil, fmt.Errorf("feature %s: %w", obj.Key, ErrNotImage)
	}
	m, ok := p.cfg.Extractor.Model(model)
	if !ok {
		return nil, fmt.Errorf("feature %s: %w %q", obj.Key, api.ErrUnknownModel, model)
	}
	if layer < 0 || layer >= len(m.Layers) {
		return nil, fmt.Errorf("feature %s: %w %d of model %s (it has %d)", obj.Key, api.ErrUnknownLayer, layer, model, len(m.Layers))
	}
	return p.feature(ctx, p.NewView(m, m.Layers[layer]), obj)
}

// FeatureAt is Feature at view v, which may be of a model version the
// extractor replaced since and still keeps (a feature server answering a
// client that asked for that version: fs/remote).
func (p *Pipeline) FeatureAt(ctx context.Context, v *View, obj bucket.Object) ([]byte, error) {
	if !p.isImage(path.Base(obj.Key)) {
		return nil, fmt.Errorf("feature %s: %w", obj.Key, ErrNotImage)
	}
	return p.feature(ctx, v, obj)
}

// FeatureUncached is FeatureAt for a tensor its caller finishes itself
// (a split client's layer, fs/remote): served from the cache when there,
// else extracted and not stored, in the cache or the feature store. Such
// tensors are large early layers each read once per epoch by the mount,
// which caches what it computes from them: storing them cost the test
// bed's storage side 13% of its CPU and would fill its cache.
func (p *Pipeline) FeatureUncached(ctx context.Context, v *View, obj bucket.Object) ([]byte, error) {
	if !p.isImage(path.Base(obj.Key)) {
		return nil, fmt.Errorf("feature %s: %w", obj.Key, ErrNotImage)
	}
	if v.FAug != nil {
		return p.feature(ctx, v, obj)
	}
	if reason, bad := p.isBad(obj.Key, obj.ETag); bad {
		p.stats.badHits.Add(1)
		return nil, &api.ImageError{Key: obj.Key, Reason: reason}
	}
	key := p.cacheKey(v, obj)
	// Its own in-flight key: a reader's request for the same feature
	// must not share a run that does not store it (the extractor still
	// merges the two extractions).
	return p.features.Do(ctx, string(key.ID())+"\x00uncached", func(ctx context.Context) ([]byte, error) {
		return p.computeFor(ctx, v, obj, key, forSplit)
	})
}

// Read is a reader's feature of obj, the whole read within ReadTimeout. An
// object overwritten since it was listed (its ETag changed) is a normal
// event, not an error: the new version is looked up, remembered for later
// opens (NewerVersion) and its feature served; the shape, and so the file's
// size, are the same.
func (p *Pipeline) Read(ctx context.Context, v *View, obj bucket.Object) ([]byte, error) {
	if p.cfg.ReadTimeout > 0 { // the whole read, a changed object included
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.cfg.ReadTimeout)
		defer cancel()
	}
	data, err := p.feature(ctx, v, obj)
	if !errors.Is(err, ErrObjectChanged) {
		return data, err
	}
	newer, serr := p.cfg.Bucket.Stat(ctx, obj.Key)
	if serr != nil {
		return nil, fmt.Errorf("%w; stat of the new version: %w", err, serr)
	}
	if newer.Key == "" {
		newer.Key = obj.Key
	}
	if newer.ETag == obj.ETag {
		return nil, err
	}
	p.versions.Put(obj.Key, objVersion{obj: newer, seen: p.now()}, 1)
	p.log.Info("featurefs: object changed since it was listed; serving its new version",
		slog.String("key", obj.Key), slog.String("listed_etag", obj.ETag), slog.String("etag", newer.ETag))
	return p.feature(ctx, v, newer)
}

// ReadCachedAt copies the cached feature of obj at v from off into dst
// and returns how many bytes it copied (fewer than len(dst) only at the
// end of the file). It never computes, fetches or waits: ok is false when
// the cache cannot answer (a miss, a damaged value, an error), and the
// caller then reads with Read, which logs what went wrong. A file's reads that the kernel's page cache cannot serve (its
// first read after a restart, pages the kernel dropped) so cost the bytes
// they ask for rather than a copy and check of the whole feature.
//
// A feature just computed (by a read or by prefetch) is copied from the
// hand-off buffer instead, and leaves it once its last byte is read; one
// queued for its cache write and not yet written, from the queue.
func (p *Pipeline) ReadCachedAt(v *View, obj bucket.Object, dst []byte, off int64) (int, bool) {
	if v.FAug != nil {
		return 0, false // computed at each read from its base (Read)
	}
	key := p.cacheKey(v, obj)
	id := string(key.ID())
	if n, ok := p.readHandoff(id, v, dst, off); ok {
		return n, true
	}
	if data, ok := p.writes.get(id); ok && int64(len(data)) == v.Size && off >= 0 {
		// Computed, queued for its cache write and not yet written: the
		// cache's answer, from memory.
		var n int
		if off < int64(len(data)) {
			n = copy(dst, data[off:])
		}
		p.writes.reads.Add(1)
		if off == 0 {
			p.stats.cacheHits.Add(1)
		}
		return n, true
	}
	n, size, ok, err := p.cfg.Cache.ReadAt(key, dst, off)
	if err != nil || !ok || size != v.Size {
		return 0, false
	}
	p.stats.cachePartialReads.Add(1)
	if off == 0 { // a file's read from its start: one feature served
		p.stats.cacheHits.Add(1)
	}
	return n, true
}

// handOff keeps a feature just computed for the reads that follow.
func (p *Pipeline) handOff(id string, data []byte) {
	p.handoff.Put(id, data, len(data))
}

// readHandoff copies the handed-off feature id from off into dst; the
// read that reaches its end removes it (a later read, after the kernel
// dropped its pages, is served by the cache).
func (p *Pipeline) readHandoff(id string, v *View, dst []byte, off int64) (int, bool) {
	data, ok := p.handoff.Get(id)
	if !ok || int64(len(data)) != v.Size || off < 0 {
		return 0, false
	}
	var n int
	if off < int64(len(data)) {
		n = copy(dst, data[off:])
	}
	if off+int64(n) >= int64(len(data)) {
		p.handoff.Remove(id)
	}
	p.stats.handoffReads.Add(1)
	return n, true
}

// objVersion is a version of an object a read found newer than its listing.
type objVersion struct {
	obj  bucket.Object
	seen time.Time
}

// NewerVersion returns the version of the object key that a read found
// newer than the one it was asked for (Read), and when, if one did recently
// (a bounded set).
func (p *Pipeline) NewerVersion(key string) (bucket.Object, time.Time, bool) {
	nv, ok := p.versions.Get(key)
	return nv.obj, nv.seen, ok
}

// cacheKey is the cache key of one object version's feature at one layer:
// keyed by the layer's digest (what computes it, docs/MODELS.md), so a
// model version that computes the layer the same way shares its features.
// A layer without a digest (a feature server that predates them) is keyed
// as before digests (legacyKey).
func (p *Pipeline) cacheKey(v *View, obj bucket.Object) cache.Key {
	k := p.legacyKey(v, obj)
	if v.Layer.Digest != "" {
		k.ModelDigest, k.Layer = v.Layer.Digest, ""
	}
	return k
}

// legacyKey is the key features had before layer digests: the whole model
// file's sha256 and the layer's tensor name. It names features of exactly
// the file this pipeline's model was loaded from, so a feature found under
// it is never stale: reads look there on a miss and move what they find
// under cacheKey (cacheGetAny).
func (p *Pipeline) legacyKey(v *View, obj bucket.Object) cache.Key {
	return cache.Key{
		Source:      p.identity,
		Object:      objectID(obj),
		ETag:        obj.ETag,
		ModelDigest: v.Model.Digest,
		Layer:       v.Layer.Tensor,
		Preprocess:  v.preprocessKey(),
		DType:       string(p.dtype),
	}
}

// cacheGetAny is cacheGet of key, else of the feature's legacyKey: a
// feature cached before layer digests is served and queued for the cache
// under key (dropped when the write queue is full; the old entry ages out).
func (p *Pipeline) cacheGetAny(ctx context.Context, v *View, obj bucket.Object, key cache.Key) ([]byte, bool, error) {
	data, ok, err := p.cacheGet(key)
	if ok || err != nil || v.Layer.Digest == "" {
		return data, ok, err
	}
	data, ok, err = p.cacheGet(p.legacyKey(v, obj))
	if !ok || err != nil || int64(len(data)) != v.Size {
		return nil, false, nil // a miss; a damaged old entry is not this key's error
	}
	p.putCache(ctx, obj, key, data, api.Foreground)
	return data, true, nil
}

// cachedAny reports whether obj's feature at v is cached under key or,
// from before layer digests, under its legacyKey.
func (p *Pipeline) cachedAny(v *View, obj bucket.Object, key cache.Key) bool {
	return p.cached(key) || (v.Layer.Digest != "" && p.cached(p.legacyKey(v, obj)))
}

// objectID is what identifies obj's content in cache keys and extraction
// requests: the key of the object it aliases (bucket.Object.Identity), so
// that every key reaching one object shares one computation and one cache
// entry, else its key.
func objectID(obj bucket.Object) string {
	if obj.Identity != "" {
		return obj.Identity
	}
	return obj.Key
}

// feature returns the .npy bytes of an object's feature: a known bad object
// fails at once; otherwise concurrent readers share one cache lookup and, on
// a miss, one extraction, whose result is stored in the cache.
func (p *Pipeline) feature(ctx context.Context, v *View, obj bucket.Object) ([]byte, error) {
	if reason, bad := p.isBad(obj.Key, obj.ETag); bad {
		p.stats.badHits.Add(1)
		return nil, &api.ImageError{Key: obj.Key, Reason: reason}
	}
	if v.FAug != nil {
		// A feature-space view: its base feature (cached, or computed and
		// cached), then an elementwise pass; the view itself is not cached.
		base, err := p.feature(ctx, v.base(), obj)
		if err != nil {
			return nil, err
		}
		return p.featureView(v, obj, base)
	}
	key := p.cacheKey(v, obj)
	return p.features.Do(ctx, string(key.ID()), func(ctx context.Context) ([]byte, error) {
		return p.compute(ctx, v, obj, key)
	})
}

// cacheGet reads a feature from the cache: from the write-behind queue
// while its write is pending, else from the Cache.
func (p *Pipeline) cacheGet(key cache.Key) ([]byte, bool, error) {
	if data, ok := p.writes.get(string(key.ID())); ok {
		p.writes.reads.Add(1)
		return data, true, nil
	}
	return p.cfg.Cache.Get(key)
}

// compute reads the cache, else extracts and stores. It runs detached from
// the reader (see inflight.Group) under ReadTimeout.
func (p *Pipeline) compute(ctx context.Context, v *View, obj bucket.Object, key cache.Key) ([]byte, error) {
	return p.computeFor(ctx, v, obj, key, forRead)
}

// computeFor is compute for r (forRead or forSplit).
func (p *Pipeline) computeFor(ctx context.Context, v *View, obj bucket.Object, key cache.Key, r requester) ([]byte, error) {
	data, ok, err := p.cacheGetAny(ctx, v, obj, key)
	switch {
	case err != nil:
		p.stats.cacheErrors.Add(1)
		p.log.Warn("featurefs: cache read failed; extracting again", slog.String("key", obj.Key), slog.Any("err", err))
	case ok && int64(len(data)) == v.Size:
		p.stats.cacheHits.Add(1)
		return data, nil
	case ok:
		p.stats.cacheErrors.Add(1)
		p.log.Warn("featurefs: cached feature has the wrong size; extracting again", slog.String("key", obj.Key),
			slog.String("model", v.Model.Name), slog.String("layer", v.Layer.Name), slog.Int("bytes", len(data)), slog.Int64("want", v.Size))
	}
	if data, ok := p.handoff.Get(string(key.ID())); ok && int64(len(data)) == v.Size {
		// Prefetch computed it and has not queued its cache write yet
		// (handOff comes first): no second extraction.
		p.handoff.Remove(string(key.ID()))
		p.stats.handoffReads.Add(1)
		return data, nil
	}
	p.stats.cacheMisses.Add(1)
	return p.extractStore(ctx, v, obj, key, r)
}

// requester is who asks extractStore for a feature. It decides the
// extraction's priority, whether the feature is handed off, and whether its
// feature store write waits for room in the store's queue.
type requester int

const (
	// forRead is a reader's cache miss: Foreground; the caller keeps the
	// result (the tree's recent features); the feature store write is
	// dropped when its queue is full (a reader never waits on the store).
	forRead requester = iota
	// forPrefetch is prefetch: Background; the feature is put in the
	// hand-off buffer for the reader about to read it; the feature store
	// write is dropped when its queue is full.
	forPrefetch
	// forWarm is warm-up: Background; every feature it computes reaches
	// the feature store, so its write waits for room (featurestore.PutWait).
	forWarm
	// forSplit is a split client's tensor (FeatureUncached): Foreground;
	// neither cached nor written to the feature store.
	forSplit
)

// priority is the extraction's priority for r.
func (r requester) priority() api.Priority {
	if r == forRead || r == forSplit {
		return api.Foreground
	}
	return api.Background
}

// extractStore extracts obj's feature for r, under ReadTimeout, records a
// bad object, and queues the result for the cache (putCache) and the
// feature store (toFeatureStore). Reads call it on a cache miss
// (Foreground), prefetch and warm-up for objects not cached (Background):
// the extractor merges identical requests in flight, and a reader's
// Foreground request moves a queued Background one ahead.
func (p *Pipeline) extractStore(ctx context.Context, v *View, obj bucket.Object, key cache.Key, r requester) ([]byte, error) {
	data, _, err := p.findOrExtract(ctx, v, obj, key, r)
	return data, err
}

// findOrExtract is extractStore, also reporting whether the feature was
// found in the feature store (true) rather than extracted (warm counts
// them apart).
func (p *Pipeline) findOrExtract(ctx context.Context, v *View, obj bucket.Object, key cache.Key, r requester) (_ []byte, found bool, _ error) {
	return p.findOrExtractFrom(ctx, v, obj, key, r, nil)
}

// findOrExtractFrom is findOrExtract with the object's bytes given (a
// streamed archive's member: g), not fetched; nil g fetches them.
func (p *Pipeline) findOrExtractFrom(ctx context.Context, v *View, obj bucket.Object, key cache.Key, r requester, g *given) (_ []byte, found bool, _ error) {
	if p.cfg.ReadTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.cfg.ReadTimeout)
		defer cancel()
	}
	data, ref, ok, err := p.fromFeatureStore(ctx, v, obj, key)
	if err != nil {
		return nil, false, err
	}
	prio := r.priority()
	if ok {
		if r == forPrefetch {
			p.handOff(string(key.ID()), data)
		}
		if r != forSplit {
			p.putCache(ctx, obj, key, data, prio)
		}
		return data, true, nil
	}
	p.stats.extractions.Add(1)
	data, err = p.cfg.Extractor.Extract(ctx, api.Request{
		Model:    v.Model.Name,
		Layer:    v.Layer.Index,
		Key:      obj.Key,
		ETag:     obj.ETag,
		ID:       p.identity + "\x00" + objectID(obj) + "\x00" + obj.ETag,
		Priority: prio,
		Digest:   v.Model.Digest,
		Size:     obj.Size,
		Augment:  v.augSpec(obj),
		Fetch: func(ctx context.Context) ([]byte, error) {
			if g != nil {
				if g.err != nil {
					return nil, fmt.Errorf("get %q: %w", obj.Key, g.err)
				}
				return g.data, nil
			}
			return p.getVersion(ctx, obj)
		},
	})
	if err != nil {
		if BadObject(err) {
			p.recordBad(obj.Key, obj.ETag, err)
		}
		return nil, false, err
	}
	if int64(len(data)) != v.Size {
		return nil, false, fmt.Errorf("model %s %s: %w: %d bytes, the layer's shape %v gives %d",
			v.Model.Name, v.Layer.Name, errBadFeature, len(data), v.Layer.Shape, v.Size)
	}
	if r == forPrefetch {
		p.handOff(string(key.ID()), data)
	}
	if r != forSplit {
		p.putCache(ctx, obj, key, data, prio)
		p.toFeatureStore(ctx, ref, data, r == forWarm)
	}
	return data, false, nil
}

// getVersion fetches obj's bytes (at most MaxObjectSize), failing with
// ErrObjectChanged when the store now holds another version than the one
// listed.
func (p *Pipeline) getVersion(ctx context.Context, obj bucket.Object) ([]byte, error) {
	b, o, err := p.cfg.Bucket.Get(ctx, obj.Key, p.cfg.MaxObjectSize)
	if err != nil {
		return nil, fmt.Errorf("get %q: %w", obj.Key, err)
	}
	if obj.ETag != "" && o.ETag != "" && o.ETag != obj.ETag {
		return nil, fmt.Errorf("get %q: %w (listed ETag %s, now %s)", obj.Key, ErrObjectChanged, obj.ETag, o.ETag)
	}
	return b, nil
}

// putCache queues a feature for the local cache (the write-behind queue,
// cacheWriter): its producer goes on at once. When the queue has no room,
// a read's feature (Foreground) is served and not cached: the cache is not
// keeping up, and a reader never waits on it (said once in the log);
// prefetch's and warm-up's (Background) wait for room, under ctx.
func (p *Pipeline) putCache(ctx context.Context, obj bucket.Object, key cache.Key, data []byte, prio api.Priority) {
	if p.owner.Context().Err() != nil {
		// Closing: the cache's owner closes it once Close returns; a
		// result that came after Close began is served, not stored.
		return
	}
	w := &pendingWrite{id: string(key.ID()), key: key, obj: obj.Key, data: data}
	switch p.writes.enqueue(ctx, w, prio == api.Background) {
	case queued:
	case noRoom:
		p.writes.skipped.Add(1)
		p.writes.skipOnce.Do(func() {
			p.log.Warn("featurefs: the cache is not keeping up with extraction: features read while its write queue is full are served and not cached (the stats file's fs.cache_writes_skipped counts them; featurefs warm fills the cache)",
				slog.String("key", obj.Key), slog.Int64("queue_bytes", p.writes.maxBytes))
		})
	default:
		p.writes.inline.Add(1)
		p.storeCache(w)
	}
}

// storeCache writes a feature into the local cache: a writer of the
// queue calls it, or putCache when the queue has no room.
func (p *Pipeline) storeCache(w *pendingWrite) {
	switch err := p.cfg.Cache.Put(w.key, w.data); {
	case errors.Is(err, cache.ErrClosed):
		// The cache closed under an unowned caller (Warm without Close
		// first): shutting down, not an error.
	case errors.Is(err, cache.ErrDiskFull), errors.Is(err, cache.ErrDirRemoved):
		// The feature is served all the same; the store said so once.
		p.stats.cacheErrors.Add(1)
		p.log.Debug("featurefs: feature not cached", slog.String("key", w.obj), slog.Any("err", err))
	case err != nil:
		p.stats.cacheErrors.Add(1)
		p.log.Warn("featurefs: cache write failed", slog.String("key", w.obj), slog.Any("err", err))
	}
}
