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

// manifest is a model directory's _model.json in the feature store.
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
}

// registerManifests gives the feature store the _model.json of each model.
func (p *Pipeline) registerManifests() {
	for _, m := range p.cfg.Extractor.Models() {
		mf := manifest{Schema: featurestore.SchemaVersion, Model: m.Name, Digest: m.Digest, DType: p.dtype, Preprocess: m.Preprocess}
		for _, l := range m.Layers {
			mf.Layers = append(mf.Layers, manifestLayer{Index: l.Index, Name: l.Name, Tensor: l.Tensor,
				Shape: l.Shape, Bytes: api.NPYSize(l.Shape, p.dtype)})
		}
		b, err := json.MarshalIndent(mf, "", "  ")
		if err != nil {
			continue // plain data: cannot fail
		}
		p.cfg.FeatureStore.SetManifest(featurestore.ModelDir(m.Name, m.Digest), append(b, '\n'))
	}
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
		Model: v.Model.Name, ModelDigest: v.Model.Digest, Layer: v.Layer.Name,
		Name: p.naming.StoreName(obj.Key, siblings),
		ETag: obj.ETag, Digest: hex.EncodeToString(id[:]),
	}
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
	data, ok, err := p.cacheGet(key)
	if err != nil || !ok || int64(len(data)) != v.Size {
		return false
	}
	ref := p.storeRef(ctx, v, obj, key)
	if _, hit, _ := p.cfg.FeatureStore.Get(ctx, ref, v.Size); !hit && !p.cfg.StoreOnly {
		p.cfg.FeatureStore.PutWait(ctx, ref, data)
	}
	return true
}
