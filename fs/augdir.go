package fs

import (
	"context"
	"strconv"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/featurefs/featurefs/extractor/api"
)

// Augmented views (--augment K, docs/AUGMENT.md): beside each layer or
// alias directory features/<model>/<dir>, the directory <dir>-aug holds K
// directories 0..K-1, each the whole bucket seen through view k of the
// layer: the same names as <dir>, each file the feature of view k of its
// image (torchvision's RandomResizedCrop + flip drawn from the object's
// identity, k and the seed), so that DatasetFolder(<dir>-aug/<epoch % K>/train)
// trains on one view per epoch. A view file's parameters are its extended
// attribute user.featurefs.augment (featureFile.Getxattr).

// augSuffix ends the name of a layer's directory of augmented views;
// faugSuffix of its feature-space views (--feature-augment: the same
// layout, each file computed from the plain feature at read time).
const (
	augSuffix  = "-aug"
	faugSuffix = "-faug"
)

// augDirName is the name of the directory of layer directory dir's views.
func augDirName(dir string) string { return dir + augSuffix }

// augDir is features/<model>/<dir>-aug: the K view directories.
type augDir struct {
	gofs.Inode
	readOnly
	fs    *FS
	model *api.Model
	layer api.Layer
	dir   string // the layer or alias directory's name
	feat  bool   // feature-space views (-faug), not image ones (-aug)
}

var _ = (gofs.NodeOnAdder)((*augDir)(nil))
var _ = (gofs.NodeGetattrer)((*augDir)(nil))

// OnAdd builds the view directories 0..K-1.
func (d *augDir) OnAdd(ctx context.Context) {
	cfg := d.fs.p.Config().Augment
	n := cfg.Views
	if d.feat {
		n = cfg.FeatureViews
	}
	for k := range n {
		var v *layerView
		if d.feat {
			v = newFeatureAugView(d.fs, d.model, d.layer, d.dir, cfg.Feature(k))
		} else {
			v = newAugView(d.fs, d.model, d.layer, d.dir, cfg.Spec(k))
		}
		ch := d.NewPersistentInode(ctx, newLayerDir(d.fs, v), gofs.StableAttr{Mode: syscall.S_IFDIR, Ino: v.dirIno("")})
		d.AddChild(strconv.Itoa(k), ch, true)
		d.fs.addLayerDir(ch)
	}
}

// Getattr reports a read-only directory.
func (d *augDir) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	d.fs.dirAttr(&out.Attr)
	return 0
}
