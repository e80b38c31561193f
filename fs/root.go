package fs

import (
	"context"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/featurefs/featurefs/fs/figures"
	"github.com/featurefs/featurefs/fs/views"
)

// FailuresFile is the file, under the mount's .featurefs directory, that
// lists the feature files whose last read failed (namespace.Failures), so
// that a tool that walks the tree (featurefs warm) learns which object a
// failing name stands for and why, without re-implementing the naming
// rule. The mount has no extended attributes: the kernel asks for two per
// file in `ls -l`, each a round trip, and a mount without them says so
// once.
const FailuresFile = "failures"

// PredictionsFile is the file, in every directory under
// predictions/<model>/, of the top classes of its images
// (views.PredictionsFile).
const PredictionsFile = views.PredictionsFile

// rootDir is the mount's root: features/, arrays/, predictions/ and .featurefs/. The whole tree
// down to the layer directories is built once, when the root is attached,
// from persistent inodes.
type rootDir struct {
	gofs.Inode
	readOnly
	fs *FS
}

var _ = (gofs.NodeOnAdder)((*rootDir)(nil))
var _ = (gofs.NodeGetattrer)((*rootDir)(nil))

// OnAdd builds features/<model>/..., arrays/<model>/, predictions/<model>/, .featurefs/stats
// and .featurefs/failures.
func (r *rootDir) OnAdd(ctx context.Context) {
	features := r.NewPersistentInode(ctx, &staticDir{fs: r.fs}, gofs.StableAttr{Mode: syscall.S_IFDIR, Ino: ino('d', "features")})
	r.AddChild("features", features, true)
	for _, m := range r.fs.models {
		md := features.NewPersistentInode(ctx, &modelDir{fs: r.fs, model: m}, gofs.StableAttr{Mode: syscall.S_IFDIR, Ino: ino('d', "features", m.Name)})
		features.AddChild(m.Name, md, true)
	}
	arrays := r.NewPersistentInode(ctx, &staticDir{fs: r.fs}, gofs.StableAttr{Mode: syscall.S_IFDIR, Ino: ino('d', "arrays")})
	r.AddChild("arrays", arrays, true)
	for _, m := range r.fs.models {
		g := r.fs.arrayGroup(features.GetChild(m.Name), m.Name)
		ad := arrays.NewPersistentInode(ctx, &viewDir{fs: r.fs, dir: g, path: "arrays/" + m.Name + "/"}, gofs.StableAttr{Mode: syscall.S_IFDIR, Ino: g.Ino()})
		arrays.AddChild(m.Name, ad, true)
	}
	preds := r.NewPersistentInode(ctx, &staticDir{fs: r.fs}, gofs.StableAttr{Mode: syscall.S_IFDIR, Ino: ino('d', "predictions")})
	r.AddChild("predictions", preds, true)
	for _, m := range r.fs.models {
		pm := r.fs.preds.Model(m)
		pd := preds.NewPersistentInode(ctx, &viewDir{fs: r.fs, dir: pm.Dir(""), path: "predictions/" + m.Name + "/"}, gofs.StableAttr{Mode: syscall.S_IFDIR, Ino: pm.Ino("")})
		preds.AddChild(m.Name, pd, true)
		r.fs.addPredModelDir(pm, pd)
	}
	meta := r.NewPersistentInode(ctx, &staticDir{fs: r.fs}, gofs.StableAttr{Mode: syscall.S_IFDIR, Ino: ino('d', ".featurefs")})
	r.AddChild(".featurefs", meta, true)
	stats := meta.NewPersistentInode(ctx, newStatsFile(r.fs, r.fs.statsJSON), gofs.StableAttr{Mode: syscall.S_IFREG, Ino: ino('s', ".featurefs/stats")})
	meta.AddChild("stats", stats, true)
	failures := meta.NewPersistentInode(ctx, newStatsFile(r.fs, r.fs.failuresJSON), gofs.StableAttr{Mode: syscall.S_IFREG, Ino: ino('s', ".featurefs/"+FailuresFile)})
	meta.AddChild(FailuresFile, failures, true)
}

// Getattr reports a read-only directory.
func (r *rootDir) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	r.fs.dirAttr(&out.Attr)
	return 0
}

// staticDir is a directory whose children are all built at mount
// (features/, .featurefs/); go-fuse lists and looks them up.
type staticDir struct {
	gofs.Inode
	readOnly
	fs *FS
}

var _ = (gofs.NodeGetattrer)((*staticDir)(nil))
var _ = (gofs.NodeLookuper)((*staticDir)(nil))

// Lookup answers from the children built at mount, keeping the attribute
// timeout a child's Getattr asks for (the stats file's is next to none;
// go-fuse would otherwise give a looked-up child the mount's TTL).
func (d *staticDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	ch := d.GetChild(name)
	if ch == nil {
		return nil, syscall.ENOENT
	}
	if ga, ok := ch.Operations().(gofs.NodeGetattrer); ok {
		var a fuse.AttrOut
		if errno := ga.Getattr(ctx, nil, &a); errno != 0 {
			return nil, errno
		}
		out.Attr = a.Attr
		out.SetAttrTimeout(a.Timeout())
	}
	return ch, 0
}

// Getattr reports a read-only directory.
func (d *staticDir) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	d.fs.dirAttr(&out.Attr)
	return 0
}

// arrayGroup returns arrays/<path>/ for the model's directory md of the
// features tree (or a directory of views in it): a layer view for each of
// its layer and alias directories, a nested group for each of its view
// directories.
func (f *FS) arrayGroup(md *gofs.Inode, path string) *views.ArrayGroup {
	layers, groups := map[string]*views.Layer{}, map[string]*views.ArrayGroup{}
	for name, ch := range md.Children() {
		switch n := ch.Operations().(type) {
		case *prefixDir:
			layers[name] = n.view
		case *staticDir:
			groups[name] = f.arrayGroup(ch, path+"/"+name)
		}
	}
	return views.NewArrayGroup(f.arrays, path, layers, groups)
}

// failuresJSON renders the namespace's failures record, indented, with a
// final newline: the content of .featurefs/failures.
func (f *FS) failuresJSON() []byte { return figures.IndentJSON(f.ns.Failures()) }
