package fs

import (
	"context"
	"log/slog"
	"sort"
	"strconv"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/extractor/spec"
	"github.com/featurefs/featurefs/fs/naming"
	"github.com/featurefs/featurefs/fs/views"
)

// modelDir is features/<model>: one directory per layer (layer0..layerN),
// one per alias (e.g. pool -> layer18) and the layers table.
type modelDir struct {
	gofs.Inode
	readOnly
	fs    *FS
	model *api.Model
}

var _ = (gofs.NodeOnAdder)((*modelDir)(nil))
var _ = (gofs.NodeGetattrer)((*modelDir)(nil))

// OnAdd builds the layer directories, alias directories and layers file.
func (d *modelDir) OnAdd(ctx context.Context) {
	m := d.model
	for _, l := range m.Layers {
		d.addLayer(ctx, l.Name, l)
	}
	aliases := make([]string, 0, len(m.Aliases))
	for a := range m.Aliases {
		aliases = append(aliases, a)
	}
	sort.Strings(aliases)
	for _, a := range aliases {
		l, ok := m.Lookup(a)
		if !ok || !naming.ValidName(a) || a == spec.LayersFile || spec.LayerLike(a) || d.GetChild(a) != nil ||
			d.GetChild(a+views.AugSuffix) != nil || d.GetChild(a+views.FaugSuffix) != nil {
			d.fs.log.Warn("featurefs: alias ignored", slog.String("model", m.Name), slog.String("alias", a), slog.String("layer", m.Aliases[a]))
			continue
		}
		d.addLayer(ctx, a, l)
	}
	// The layers table is a generated file (naming.Generated) in a
	// directory where the bucket shows no name (layer and alias
	// directories only; an alias called layers is ignored above): it
	// keeps its name.
	table := &viewFile{fs: d.fs, noOpen: noOpen{d.fs}, file: views.NewBytes([]byte(m.Table()), d.fs.p.Started()), name: "features/" + m.Name + "/" + spec.LayersFile}
	lf := d.NewPersistentInode(ctx, table, gofs.StableAttr{Mode: syscall.S_IFREG, Ino: ino('t', m.Name)})
	d.AddChild(naming.Generated(spec.LayersFile).Name(false), lf, true)
}

// addLayer adds directory dir, layer l seen through the bucket, and its
// directories of augmented views (--augment K, docs/AUGMENT.md): dir-aug
// holds K directories 0..K-1, each the whole bucket seen through view k
// of the layer (torchvision's RandomResizedCrop + flip drawn from the
// object's identity, k and the seed), so that
// DatasetFolder(<dir>-aug/<epoch % K>/train) trains on one view per
// epoch; dir-faug the feature-space views (--feature-augment: the same
// layout, each file computed from the plain feature at read time). A
// view file's parameters are its extended attribute user.featurefs.augment
// (featureFile.Getxattr).
func (d *modelDir) addLayer(ctx context.Context, dir string, l api.Layer) {
	d.addLayerDir(ctx, &d.Inode, dir, views.NewLayer(d.fs.p, d.model, l, dir))
	aug := d.fs.p.Config().Augment
	for _, suffix := range []string{views.AugSuffix, views.FaugSuffix} {
		n := aug.Views
		if suffix == views.FaugSuffix {
			n = aug.FeatureViews
		}
		if n == 0 {
			continue
		}
		ad := d.NewPersistentInode(ctx, &staticDir{fs: d.fs}, gofs.StableAttr{Mode: syscall.S_IFDIR, Ino: ino('a', "features", d.model.Name, dir+suffix)})
		d.AddChild(dir+suffix, ad, true)
		for k := range n {
			v := views.NewAugLayer(d.fs.p, d.model, l, dir, aug.Spec(k))
			if suffix == views.FaugSuffix {
				v = views.NewFeatureAugLayer(d.fs.p, d.model, l, dir, aug.Feature(k))
			}
			d.addLayerDir(ctx, ad, strconv.Itoa(k), v)
		}
	}
}

// addLayerDir adds the directory name to parent: the bucket's root seen
// through v.
func (d *modelDir) addLayerDir(ctx context.Context, parent *gofs.Inode, name string, v *views.Layer) {
	ch := parent.NewPersistentInode(ctx, &prefixDir{fs: d.fs, view: v}, gofs.StableAttr{Mode: syscall.S_IFDIR, Ino: v.DirIno("")})
	parent.AddChild(name, ch, true)
	d.fs.addLayerDir(ch)
}

// Getattr reports a read-only directory.
func (d *modelDir) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	d.fs.dirAttr(&out.Attr)
	return 0
}
