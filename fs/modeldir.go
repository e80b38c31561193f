package fs

import (
	"context"
	"log/slog"
	"sort"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/extractor/spec"
	"github.com/featurefs/featurefs/fs/naming"
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
			d.GetChild(augDirName(a)) != nil || d.GetChild(a+faugSuffix) != nil {
			d.fs.log.Warn("featurefs: alias ignored", slog.String("model", m.Name), slog.String("alias", a), slog.String("layer", m.Aliases[a]))
			continue
		}
		d.addLayer(ctx, a, l)
	}
	// The layers table is a generated file (naming.Generated) in a
	// directory where the bucket shows no name (layer and alias
	// directories only; an alias called layers is ignored above): it
	// keeps its name.
	lf := d.NewPersistentInode(ctx, newLayersFile(d.fs, m.Table()), gofs.StableAttr{Mode: syscall.S_IFREG, Ino: ino('t', m.Name)})
	d.AddChild(naming.Generated(spec.LayersFile).Name(false), lf, true)
}

func (d *modelDir) addLayer(ctx context.Context, dir string, l api.Layer) {
	v := newLayerView(d.fs, d.model, l, dir)
	ch := d.NewPersistentInode(ctx, newLayerDir(d.fs, v), gofs.StableAttr{Mode: syscall.S_IFDIR, Ino: v.dirIno("")})
	d.AddChild(dir, ch, true)
	d.fs.addLayerDir(ch)
	aug := d.fs.p.Config().Augment
	for _, ad := range []*augDir{{fs: d.fs, model: d.model, layer: l, dir: dir}, {fs: d.fs, model: d.model, layer: l, dir: dir, feat: true}} {
		name := augDirName(dir)
		if ad.feat {
			name = dir + faugSuffix
		}
		if (ad.feat && aug.FeatureViews == 0) || (!ad.feat && aug.Views == 0) {
			continue
		}
		ach := d.NewPersistentInode(ctx, ad, gofs.StableAttr{Mode: syscall.S_IFDIR, Ino: ino('a', "features", d.model.Name, name)})
		d.AddChild(name, ach, true)
	}
}

// Getattr reports a read-only directory.
func (d *modelDir) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	d.fs.dirAttr(&out.Attr)
	return 0
}
