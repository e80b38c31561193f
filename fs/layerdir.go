package fs

import (
	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/fs/features"
)

// layerView is what every node under features/<model>/<dir>/ shares: the
// pipeline's view (the model, the layer and the size of its .npy files) and
// the directory's name. Constant.
type layerView struct {
	*features.View
	dir string // "layer12", or an alias such as "pool"
}

func newLayerView(f *FS, m *api.Model, l api.Layer, dir string) *layerView {
	return &layerView{View: f.p.NewView(m, l), dir: dir}
}

// dirIno is the inode number of the directory of bucket prefix ("" for the
// layer directory itself).
func (v *layerView) dirIno(prefix string) uint64 {
	return ino('d', "features", v.Model.Name, v.dir, prefix)
}

// fileIno is the inode number of the feature file of one object version:
// an overwritten object is a new file.
func (v *layerView) fileIno(key, etag string) uint64 {
	return ino('f', "features", v.Model.Name, v.dir, key, etag)
}

// newLayerDir returns features/<model>/<dir>: the bucket's root prefix seen
// through one layer.
func newLayerDir(f *FS, v *layerView) *prefixDir {
	return &prefixDir{fs: f, view: v, prefix: ""}
}
