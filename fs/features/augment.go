package features

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/extractor/augment"
	"github.com/featurefs/featurefs/fs/bucket"
)

// ViewParamser is what an Extractor implements that can tell an
// augmented view's parameters from an image's bytes (*extractor.Service:
// the image's size from its header, then augment.Spec.Params at the
// model's crop size, as its Extract of that view draws them).
type ViewParamser interface {
	ViewParams(model string, spec augment.Spec, data []byte) (augment.Params, error)
}

// ObjectViewParamser is what an Extractor implements that tells a view's
// parameters for an object it reads itself (fs/remote's: the server reads
// the image's header), so that the pipeline fetches nothing.
type ObjectViewParamser interface {
	ObjectViewParams(ctx context.Context, model string, layer int, spec augment.Spec, key, etag string) (augment.Params, error)
}

// ErrNoViewParams is matched by ViewParams's error when the extractor
// cannot tell a view's parameters (a remote one).
var ErrNoViewParams = errors.New("the extractor does not tell augmented views' parameters")

// maxViewParams bounds the views whose parameters ViewParams remembers;
// viewParamFetches the images ViewParams fetches at once (each held whole,
// up to MaxObjectSize, until its header is read), whoever asks: a mount's
// getxattr and augment.jsonl reads, a feature server's GET /v1/viewparams.
const (
	maxViewParams    = 16384
	viewParamFetches = 8
)

// ViewParams returns the parameters of augmented view v (v.Aug not nil)
// of obj: the crop box in the image's pixels, the flip, the output size,
// the seed and the view. The image is fetched for its header once, the
// parameters then remembered (a bounded set: the most recent
// maxViewParams); a bad image is an error matching ErrBadObject's.
func (p *Pipeline) ViewParams(ctx context.Context, v *View, obj bucket.Object) (augment.Params, error) {
	a := v.augSpec(obj)
	if a == nil {
		return augment.Params{}, fmt.Errorf("%s: not an augmented view", obj.Key)
	}
	id := v.Model.Name + "\x00" + v.Model.Digest + "\x00" + a.Key() + "\x00" + a.Identity
	if params, ok := p.viewParams.Get(id); ok {
		return params, nil
	}
	if p.cfg.ReadTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.cfg.ReadTimeout)
		defer cancel()
	}
	if ovp, ok := p.given.Extractor.(ObjectViewParamser); ok {
		params, err := ovp.ObjectViewParams(ctx, v.Model.Name, v.Layer.Index, *v.Aug, obj.Key, obj.ETag)
		if err != nil {
			return augment.Params{}, fmt.Errorf("%s: %w", obj.Key, err)
		}
		p.viewParams.Put(id, params, 1)
		return params, nil
	}
	vp, ok := p.given.Extractor.(ViewParamser)
	if !ok {
		return augment.Params{}, ErrNoViewParams
	}
	select {
	case p.viewFetches <- struct{}{}:
	case <-ctx.Done():
		return augment.Params{}, fmt.Errorf("%s: waiting to fetch its header: %w", obj.Key, ctx.Err())
	}
	defer func() { <-p.viewFetches }()
	data, err := p.getVersion(ctx, obj)
	if err != nil {
		return augment.Params{}, err
	}
	params, err := vp.ViewParams(v.Model.Name, *a, data)
	if err != nil {
		return augment.Params{}, fmt.Errorf("%s: %w", obj.Key, err)
	}
	p.viewParams.Put(id, params, 1)
	return params, nil
}

// AugmentConfig is a mount's augmented views (--augment, --augment-seed,
// --augment-scale, --augment-ratio): Views views of every layer, drawn
// with Seed and the ranges Scale and Ratio (torchvision's defaults,
// augment.DefaultScale and augment.DefaultRatio, when zero).
type AugmentConfig struct {
	Views        int
	Seed         uint64
	Scale, Ratio [2]float64
	// FeatureViews is how many feature-space views of every layer
	// (--feature-augment), with FeatureOps (--feature-augment-ops,
	// augment.ParseFeatureOps's order) and Seed.
	FeatureViews int
	FeatureOps   []string
}

// Any reports whether the mount shows views of either kind.
func (c AugmentConfig) Any() bool { return c.Views > 0 || c.FeatureViews > 0 }

// Feature returns feature-space view k.
func (c AugmentConfig) Feature(k int) FeatureAug {
	return FeatureAug{View: k, Seed: c.Seed, Ops: c.FeatureOps}
}

// Spec returns view k's spec (without an identity).
func (c AugmentConfig) Spec(k int) augment.Spec {
	s := augment.Spec{View: k, Seed: c.Seed, Scale: c.Scale, Ratio: c.Ratio}
	if s.Scale == ([2]float64{}) {
		s.Scale = augment.DefaultScale
	}
	if s.Ratio == ([2]float64{}) {
		s.Ratio = augment.DefaultRatio
	}
	return s
}

// featureView computes feature-space view v of obj from its base feature
// (.npy bytes): the view's numbers drawn for the object's identity, the
// ops applied (augment.ApplyFeature), in the base's dtype and shape.
func (p *Pipeline) featureView(v *View, obj bucket.Object, base []byte) ([]byte, error) {
	shape, dt, body, err := api.ParseNPY(base)
	if err != nil {
		return nil, fmt.Errorf("feature view of %s: the base feature: %w", obj.Key, err)
	}
	vals := make([]float32, int64(len(body))/dt.Size())
	api.DecodeNPYBody(body, dt, vals)
	augment.ApplyFeature(vals, p.FeatureParams(v, obj))
	return api.EncodeNPY(shape, vals, dt), nil
}

// FeatureParams returns feature-space view v's numbers for obj (v.FAug not
// nil): drawn from the object's identity, the view and the seed.
func (p *Pipeline) FeatureParams(v *View, obj bucket.Object) augment.FeatureParams {
	return augment.DrawFeature(augment.Identity(objectID(obj), obj.ETag), v.FAug.View, v.FAug.Seed, v.FAug.Ops)
}

// storeLayer is the feature store's directory of v's features beside its
// model's: the layer's name, and for an augmented view the view and a
// digest of its spec (layer12-aug-3-1a2b3c4d5e6f), so that views never
// share a path with the plain feature or with each other (the store
// verifies a feature's digest, so a shared path would only miss and
// overwrite).
func (v *View) storeLayer() string {
	if v.Aug == nil {
		return v.Layer.Name
	}
	sum := sha256.Sum256([]byte(v.Aug.Key()))
	return fmt.Sprintf("%s-aug-%d-%x", v.Layer.Name, v.Aug.View, sum[:6])
}
