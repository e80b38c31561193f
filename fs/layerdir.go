package fs

import (
	"github.com/featurefs/featurefs/extractor"
)

// layerView is what every node under features/<model>/<dir>/ shares: the
// model, the layer and the size of its .npy files. Constant.
type layerView struct {
	model *extractor.Model
	layer extractor.Layer
	dir   string // "layer12", or an alias such as "pool"
	size  int64  // bytes of each .npy file
}

func newLayerView(f *FS, m *extractor.Model, l extractor.Layer, dir string) *layerView {
	return &layerView{model: m, layer: l, dir: dir, size: extractor.NPYSize(l.Shape, f.dtype)}
}

// dirIno is the inode number of the directory of bucket prefix ("" for the
// layer directory itself).
func (v *layerView) dirIno(prefix string) uint64 {
	return ino('d', "features", v.model.Name, v.dir, prefix)
}

// fileIno is the inode number of the feature file of one object version:
// an overwritten object is a new file.
func (v *layerView) fileIno(key, etag string) uint64 {
	return ino('f', "features", v.model.Name, v.dir, key, etag)
}

// newLayerDir returns features/<model>/<dir>: the bucket's root prefix seen
// through one layer.
func newLayerDir(f *FS, v *layerView) *prefixDir {
	return &prefixDir{fs: f, view: v, prefix: ""}
}
