package features

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/featurefs/featurefs/cache"
	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/featurestore"
)

// ErrNotExtracted is matched by a read's error under StoreOnly when the
// feature store does not have the feature (or cannot be read): it is not
// computed.
var ErrNotExtracted = errors.New("feature not extracted yet: not in the feature store (--feature-store-only computes nothing)")

// unusableError is a read's error under StoreOnly when the feature store
// has an object for the feature that cannot be served (damaged, or from
// another version): it matches ErrNotExtracted, as nothing is computed,
// but says that the store has the object.
type unusableError struct {
	key string
	err error // matches featurestore.ErrUnusable
}

func (e *unusableError) Error() string {
	return e.key + ": not served: the feature store's object is unusable and --feature-store-only computes nothing (" + e.err.Error() + ")"
}
func (e *unusableError) Unwrap() error        { return e.err }
func (e *unusableError) Is(target error) bool { return target == ErrNotExtracted }

// manifest is a model directory's _model.json in the feature store. A
// directory holds one layer's features (its name carries the layer's
// digest); its manifest describes the model version that first wrote it.
type manifest struct {
	Schema     string          `json:"schema_version"`
	Model      string          `json:"model"`
	Digest     string          `json:"digest"`
	DType      api.DType       `json:"dtype"`
	Preprocess api.Preprocess  `json:"preprocess"`
	Layers     []manifestLayer `json:"layers"`
}

type manifestLayer struct {
	Index  int     `json:"index"`
	Name   string  `json:"name"`
	Tensor string  `json:"tensor"`
	Shape  []int64 `json:"shape"`
	Bytes  int64   `json:"bytes"`
	Digest string  `json:"digest,omitempty"`
}

// ModelsChanged tells the pipeline that the extractor's models changed
// (a reload): the feature store gets the new versions' manifests.
func (p *Pipeline) ModelsChanged() {
	if p.cfg.FeatureStore != nil {
		p.registerManifests()
	}
}

// registerManifests gives the feature store the _model.json of each
// model's layer directories.
func (p *Pipeline) registerManifests() {
	for _, m := range p.cfg.Extractor.Models() {
		mf := manifest{Schema: featurestore.SchemaVersion, Model: m.Name, Digest: m.Digest, DType: p.dtype, Preprocess: m.Preprocess}
		for _, l := range m.Layers {
			mf.Layers = append(mf.Layers, manifestLayer{Index: l.Index, Name: l.Name, Tensor: l.Tensor,
				Shape: l.Shape, Bytes: api.NPYSize(l.Shape, p.dtype), Digest: l.Digest})
		}
		b, err := json.MarshalIndent(mf, "", "  ")
		if err != nil {
			continue // plain data: cannot fail
		}
		for _, l := range m.Layers {
			p.cfg.FeatureStore.SetManifest(featurestore.ModelDir(m.Name, layerDigest(m, l)), append(b, '\n'))
		}
	}
}

// layerDigest is the digest naming a layer's features in the feature
// store: the layer's own, else (a feature server that predates them) the
// model file's.
func layerDigest(m *api.Model, l api.Layer) string {
	if l.Digest != "" {
		return l.Digest
	}
	return m.Digest
}

// storeRef names obj's feature in the feature store. Its name follows the
// naming rule, which needs the other images of the object's stem: one small
// listing of the source (bucket.Bucket.Keys, not counted in the figures).
func (p *Pipeline) storeRef(ctx context.Context, v *View, obj bucket.Object, key cache.Key) featurestore.Ref {
	split := p.splitImage
	var siblings []string
	base := obj.Key[strings.LastIndexByte(obj.Key, '/')+1:]
	if stem, _, ok := split(base); ok {
		keys, err := p.cfg.Bucket.Keys(ctx, obj.Key[:len(obj.Key)-len(base)]+stem+".", 64)
		if err == nil {
			siblings = keys
		} else {
			// Not knowing the siblings risks a short name shared by two
			// images: verification makes that a miss, never a wrong hit.
			p.log.Debug("featurefs: feature store: listing the other images of a stem failed", slog.String("key", obj.Key), slog.Any("err", err))
		}
	}
	// The digest is the cache key's with the source named without its
	// endpoint: hosts that reach one store by different names share it.
	key.Source = hostless(key.Source)
	id := key.ID()
	return featurestore.Ref{
		Model: v.Model.Name, ModelDigest: layerDigest(v.Model, v.Layer), Layer: v.storeLayer(),
		Name: p.naming.StoreName(obj.Key, siblings),
		ETag: obj.ETag, Digest: hex.EncodeToString(id[:]),
	}
}

// legacyRef is where a feature store written before layer digests keeps
// ref's feature: under the model file's digest, with the cache-key digest
// of legacyKey, so that it answers only for the very file this pipeline
// loaded. Zero when the layer has no digest of its own (it is ref).
func (p *Pipeline) legacyRef(v *View, obj bucket.Object, ref featurestore.Ref) (featurestore.Ref, bool) {
	if v.Layer.Digest == "" {
		return featurestore.Ref{}, false
	}
	k := p.legacyKey(v, obj)
	k.Source = hostless(k.Source)
	id := k.ID()
	ref.ModelDigest, ref.Digest = v.Model.Digest, hex.EncodeToString(id[:])
	return ref, true
}

// hasLegacyDir reports whether the feature store has the directory a
// featurefs before layer digests wrote for the model file (its
// _model.json), asking the store once per directory per pipeline (at most
// one entry per model): a store without one costs no second GET per miss.
// An error is not remembered; the next miss asks again.
func (p *Pipeline) hasLegacyDir(ctx context.Context, dir string) bool {
	p.legacyMu.Lock()
	ok, known := p.legacyDirs[dir]
	p.legacyMu.Unlock()
	if known {
		return ok
	}
	ok, err := p.cfg.FeatureStore.Exists(ctx, dir+"/"+featurestore.ManifestName)
	if err != nil {
		return false
	}
	p.legacyMu.Lock()
	p.legacyDirs[dir] = ok
	p.legacyMu.Unlock()
	return ok
}

// fromLegacyStore looks for a feature the store missed under its layer
// digest in the directory written before layer digests, and on a hit
// queues it under ref (the store migrates as it is read; warm migrates a
// whole prefix).
func (p *Pipeline) fromLegacyStore(ctx context.Context, v *View, obj bucket.Object, ref featurestore.Ref) ([]byte, bool) {
	old, ok := p.legacyRef(v, obj, ref)
	if !ok || !p.hasLegacyDir(ctx, featurestore.ModelDir(old.Model, old.ModelDigest)) {
		return nil, false
	}
	data, hit, _ := p.cfg.FeatureStore.Get(ctx, old, v.Size)
	if !hit {
		return nil, false
	}
	p.toFeatureStore(ctx, ref, data, false)
	return data, true
}

// fromFeatureStore returns obj's feature from the feature store, if there
// is one and it has it (ok). Under StoreOnly a miss is ErrNotExtracted.
func (p *Pipeline) fromFeatureStore(ctx context.Context, v *View, obj bucket.Object, key cache.Key) (data []byte, ref featurestore.Ref, ok bool, err error) {
	fst := p.cfg.FeatureStore
	if fst == nil {
		return nil, ref, false, nil
	}
	ref = p.storeRef(ctx, v, obj, key)
	data, ok, err = fst.Get(ctx, ref, v.Size)
	if err != nil && ctx.Err() == nil && p.journal.FirstLog("featurestore\x00"+ref.Key()+"\x00"+err.Error()) {
		// Say what follows, which depends on the mode: only a mount that
		// may compute computes it again.
		what, then := "feature store read failed", "computing the feature here"
		if errors.Is(err, featurestore.ErrUnusable) {
			what, then = "feature store object unusable", "computing it again"
		}
		if p.cfg.StoreOnly {
			then = "the read fails (--feature-store-only computes nothing)"
		}
		msg := "featurefs: " + what + "; " + then
		p.log.Warn(msg, slog.String("key", obj.Key), slog.String("store_key", ref.Key()), slog.Any("err", err))
	}
	if ok {
		return data, ref, true, nil
	}
	if err == nil {
		if data, ok := p.fromLegacyStore(ctx, v, obj, ref); ok {
			return data, ref, true, nil
		}
	}
	if p.cfg.StoreOnly {
		if ctx.Err() != nil {
			return nil, ref, false, ctx.Err()
		}
		if errors.Is(err, featurestore.ErrUnusable) {
			return nil, ref, false, &unusableError{key: obj.Key, err: err}
		}
		if err != nil {
			return nil, ref, false, fmt.Errorf("%s: %w (%v)", obj.Key, ErrNotExtracted, err)
		}
		return nil, ref, false, fmt.Errorf("%s: %w", obj.Key, ErrNotExtracted)
	}
	return nil, ref, false, nil
}

// toFeatureStore queues a computed feature for the feature store: at once
// (dropped if the queue is full) for reads and prefetch; with wait, waiting
// under ctx for room (warm-up, forWarm), whose writes must all reach the
// store.
func (p *Pipeline) toFeatureStore(ctx context.Context, ref featurestore.Ref, data []byte, wait bool) {
	fst := p.cfg.FeatureStore
	if fst == nil {
		return
	}
	if wait {
		fst.PutWait(ctx, ref, data)
		return
	}
	fst.Put(ref, data)
}

// hostless returns a source identity without its endpoint:
// "s3://HOST/BUCKET/PREFIX" becomes "s3://BUCKET/PREFIX".
func hostless(identity string) string {
	rest, ok := strings.CutPrefix(identity, "s3://")
	if !ok {
		return identity
	}
	if _, after, ok := strings.Cut(rest, "/"); ok {
		return "s3://" + after
	}
	return identity
}

// storeCached is warm's check with a feature store: a feature in the local
// cache is made sure to be in the feature store too (written if it is not),
// so that warming a host that computed before it had a store fills the
// store. It reports whether the feature is in the local cache.
func (p *Pipeline) storeCached(ctx context.Context, v *View, obj bucket.Object, key cache.Key) bool {
	data, ok, err := p.cacheGetAny(ctx, v, obj, key)
	if err != nil || !ok || int64(len(data)) != v.Size {
		return false
	}
	ref := p.storeRef(ctx, v, obj, key)
	if _, hit, _ := p.cfg.FeatureStore.Get(ctx, ref, v.Size); !hit && !p.cfg.StoreOnly {
		p.cfg.FeatureStore.PutWait(ctx, ref, data)
	}
	return true
}
