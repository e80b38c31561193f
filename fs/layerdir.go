package fs

import (
	"strconv"
	"sync/atomic"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/extractor/augment"
	"github.com/featurefs/featurefs/fs/features"
)

// layerView is what every node under features/<model>/<dir>/ shares: the
// pipeline's view of the model's current version (the model, the layer and
// the size of its .npy files), which a model reload replaces
// (FS.ModelReplaced), and the directory's name. A feature file keeps the
// view it was looked up with (featureFile.fv).
type layerView struct {
	cur   atomic.Pointer[features.View]
	model string // the model's name
	dir   string // "layer12", or an alias such as "pool"; "layer12-aug/3" for a view
	layer string // the layer's name or alias in the model: dir, but for a view
	aug   *augment.Spec
	faug  *features.FeatureAug
}

func newLayerView(f *FS, m *api.Model, l api.Layer, dir string) *layerView {
	v := &layerView{model: m.Name, dir: dir, layer: dir}
	v.cur.Store(f.p.NewView(m, l))
	return v
}

// newAugView is the layerView of augmented view spec of layer l, shown
// as layerDir-aug/<spec.View>.
func newAugView(f *FS, m *api.Model, l api.Layer, layerDir string, spec augment.Spec) *layerView {
	v := &layerView{model: m.Name, dir: augDirName(layerDir) + "/" + strconv.Itoa(spec.View), layer: layerDir, aug: &spec}
	v.cur.Store(v.make(f, m, l))
	return v
}

// make returns the features view of l of m for v: plain, or v's
// augmented view.
func (v *layerView) make(f *FS, m *api.Model, l api.Layer) *features.View {
	switch {
	case v.aug != nil:
		return f.p.NewAugView(m, l, *v.aug)
	case v.faug != nil:
		return f.p.NewFeatureAugView(m, l, *v.faug)
	}
	return f.p.NewView(m, l)
}

// newFeatureAugView is the layerView of feature-space view fa of layer
// l, shown as layerDir-faug/<fa.View>.
func newFeatureAugView(f *FS, m *api.Model, l api.Layer, layerDir string, fa features.FeatureAug) *layerView {
	v := &layerView{model: m.Name, dir: layerDir + faugSuffix + "/" + strconv.Itoa(fa.View), layer: layerDir, faug: &fa}
	v.cur.Store(v.make(f, m, l))
	return v
}

// view returns the view of the model's current version.
func (v *layerView) view() *features.View { return v.cur.Load() }

// dirIno is the inode number of the directory of bucket prefix ("" for the
// layer directory itself).
func (v *layerView) dirIno(prefix string) uint64 {
	return ino('d', "features", v.model, v.dir, prefix)
}

// fileIno is the inode number of the feature file of one object version
// at one version of the layer (fv's digest): an overwritten object, or a
// model version that computes the layer otherwise, is a new file.
func (v *layerView) fileIno(fv *features.View, key, etag string) uint64 {
	return ino('f', "features", v.model, v.dir, key, etag, fv.Layer.Digest)
}

// newLayerDir returns features/<model>/<dir>: the bucket's root prefix seen
// through one layer.
func newLayerDir(f *FS, v *layerView) *prefixDir {
	return &prefixDir{fs: f, view: v, prefix: ""}
}
