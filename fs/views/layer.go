package views

import (
	"strconv"
	"sync/atomic"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/extractor/augment"
	"github.com/featurefs/featurefs/fs/features"
)

// Augmented views' directories (--augment K, docs/AUGMENT.md): beside each
// layer or alias directory features/<model>/<dir>, <dir>-aug holds K
// directories 0..K-1, each the whole bucket seen through view k of the
// layer, and <dir>-faug the feature-space views (--feature-augment).
const (
	AugSuffix  = "-aug"
	FaugSuffix = "-faug"
)

// Layer is what every node under features/<model>/<dir>/ shares (and the
// array views of that directory): the pipeline's view of the model's
// current version (the model, the layer and the size of its .npy files),
// which a model reload replaces (Replace), and the directory's name. A
// feature file keeps the view it was looked up with.
type Layer struct {
	cur   atomic.Pointer[features.View]
	Model string // the model's name
	Dir   string // "layer12", or an alias such as "pool"; "layer12-aug/3" for a view
	Name  string // the layer's name or alias in the model: Dir, but for a view
	Aug   *augment.Spec
	FAug  *features.FeatureAug
}

// NewLayer is the Layer of l of m shown as directory dir.
func NewLayer(p *features.Pipeline, m *api.Model, l api.Layer, dir string) *Layer {
	v := &Layer{Model: m.Name, Dir: dir, Name: dir}
	v.cur.Store(v.make(p, m, l))
	return v
}

// NewAugLayer is the Layer of augmented view spec of l, shown as
// layerDir-aug/<spec.View>.
func NewAugLayer(p *features.Pipeline, m *api.Model, l api.Layer, layerDir string, spec augment.Spec) *Layer {
	v := &Layer{Model: m.Name, Dir: layerDir + AugSuffix + "/" + strconv.Itoa(spec.View), Name: layerDir, Aug: &spec}
	v.cur.Store(v.make(p, m, l))
	return v
}

// NewFeatureAugLayer is the Layer of feature-space view fa of l, shown as
// layerDir-faug/<fa.View>.
func NewFeatureAugLayer(p *features.Pipeline, m *api.Model, l api.Layer, layerDir string, fa features.FeatureAug) *Layer {
	v := &Layer{Model: m.Name, Dir: layerDir + FaugSuffix + "/" + strconv.Itoa(fa.View), Name: layerDir, FAug: &fa}
	v.cur.Store(v.make(p, m, l))
	return v
}

// make returns the features view of l of m for v: plain, or v's
// augmented view.
func (v *Layer) make(p *features.Pipeline, m *api.Model, l api.Layer) *features.View {
	switch {
	case v.Aug != nil:
		return p.NewAugView(m, l, *v.Aug)
	case v.FAug != nil:
		return p.NewFeatureAugView(m, l, *v.FAug)
	}
	return p.NewView(m, l)
}

// Replace points v at l of m, a reloaded model, and returns the view it
// served before.
func (v *Layer) Replace(p *features.Pipeline, m *api.Model, l api.Layer) *features.View {
	return v.cur.Swap(v.make(p, m, l))
}

// View returns the view of the model's current version.
func (v *Layer) View() *features.View { return v.cur.Load() }

// DirIno is the inode number of the directory of bucket prefix ("" for the
// layer directory itself).
func (v *Layer) DirIno(prefix string) uint64 {
	return Ino('d', "features", v.Model, v.Dir, prefix)
}

// FileIno is the inode number of the feature file of one object version
// at one version of the layer (fv's digest): an overwritten object, or a
// model version that computes the layer otherwise, is a new file.
func (v *Layer) FileIno(fv *features.View, key, etag string) uint64 {
	return Ino('f', "features", v.Model, v.Dir, key, etag, fv.Layer.Digest)
}
