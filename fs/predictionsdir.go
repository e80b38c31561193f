package fs

import (
	"context"
	"sync/atomic"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/fs/features"
	"github.com/featurefs/featurefs/fs/naming"
)

// PredictionsFile is the file, in every directory under
// predictions/<model>/, that holds the top classes of the images directly
// in that directory's bucket prefix, one JSON line each
// (predictionsfile.go). Where the prefix has a subdirectory of that name,
// the subdirectory keeps it and the file is PredictionsFile.Moved()
// (naming.Generated).
const PredictionsFile naming.Generated = "predictions.jsonl"

// predView is what every node under predictions/<model>/ shares: the
// model, the view of its last layer (class scores) and the lines' layout.
// model (its name) and layout are constant: a reload keeps the name and
// the layers' shapes (so the class count), and the labels are the
// mount's. The view is the version served: FS.ModelReplaced swaps it.
type predView struct {
	model  *api.Model
	cur    atomic.Pointer[features.View]
	layout *features.PredictionLayout
}

// view returns the last layer's view of the model version served now.
func (pv *predView) view() *features.View { return pv.cur.Load() }

// predDir is predictions/<model>/<prefix>: the bucket prefix's
// subdirectories, as the feature directories show them, and its
// predictions file, listed after them. A subdirectory named
// predictions.jsonl keeps its name: the file is then
// PredictionsFile.Moved().
type predDir struct {
	gofs.Inode
	readOnly
	fs     *FS
	pv     *predView
	prefix string // "" or "a/b/"
}

var _ = (gofs.NodeGetattrer)((*predDir)(nil))
var _ = (gofs.NodeLookuper)((*predDir)(nil))
var _ = (gofs.NodeReaddirer)((*predDir)(nil))
var _ = (gofs.NodeOnAdder)((*predDir)(nil))
var _ = (gofs.NodeOnForgetter)((*predDir)(nil))

// newPredModelDir returns predictions/<model>.
func newPredModelDir(f *FS, m *api.Model) *predDir {
	k := f.p.Config().PredictionsTop
	pv := &predView{model: m, layout: features.NewPredictionLayout(m, f.p.Labels(m.Name), k)}
	pv.cur.Store(f.p.PredictionView(m))
	return &predDir{fs: f, pv: pv}
}

// OnAdd counts the node in the metadata budget (budget.go).
func (d *predDir) OnAdd(ctx context.Context) { d.fs.nodeAdded() }

// OnForget takes the node out of the metadata budget.
func (d *predDir) OnForget() { d.fs.nodeForgotten() }

// Getattr reports a read-only directory.
func (d *predDir) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	d.fs.dirAttr(&out.Attr)
	return 0
}

// Lookup finds the predictions file or a subdirectory (through the
// namespace's listings, shared with the feature directories).
func (d *predDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	d.fs.stats.lookups.Add(1)
	id := gofs.StableAttr{Mode: syscall.S_IFREG, Ino: ino('j', d.pv.model.Name, d.prefix)}
	if PredictionsFile.Is(name) {
		pf := &predFile{fs: d.fs, noOpen: noOpen{d.fs}, pv: d.pv, prefix: d.prefix}
		if ch := d.GetChild(name); ch != nil && ch.StableAttr() == id {
			pf = ch.Operations().(*predFile)
		}
		snap, err := pf.snapshot(ctx, true)
		if err != nil {
			return nil, d.fs.errno(err, d.prefix)
		}
		switch name {
		case PredictionsFile.Name(snap.dirTaken):
			pf.attr(&out.Attr, snap)
			if ch := d.GetChild(name); ch != nil && ch.StableAttr() == id {
				return ch, 0
			}
			return d.NewInode(ctx, pf, id), 0
		case PredictionsFile.Moved():
			return nil, syscall.ENOENT
		}
		// The bucket's subdirectory called predictions.jsonl.
	}
	e, err := d.fs.ns.Lookup(ctx, d.prefix, name)
	if err != nil {
		return nil, d.fs.errno(err, d.prefix+name)
	}
	if !e.Dir {
		return nil, syscall.ENOENT
	}
	d.fs.dirAttr(&out.Attr)
	id = gofs.StableAttr{Mode: syscall.S_IFDIR, Ino: ino('p', d.pv.model.Name, e.Sub)}
	if ch := d.GetChild(name); ch != nil && ch.StableAttr() == id {
		return ch, 0
	}
	return d.NewInode(ctx, &predDir{fs: d.fs, pv: d.pv, prefix: e.Sub}, id), 0
}

// Readdir lists the subdirectories and the predictions file. It reads the
// whole listing (the namespace keeps it, within the metadata budget) and
// hands out only directories: their number, not the images', is held.
func (d *predDir) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	var entries []fuse.DirEntry
	taken := false
	err := d.fs.listEach(ctx, d.prefix, func(e naming.Entry) {
		if e.Dir {
			taken = taken || e.Name == string(PredictionsFile)
			entries = append(entries, fuse.DirEntry{Name: e.Name, Mode: syscall.S_IFDIR, Ino: ino('p', d.pv.model.Name, e.Sub)})
		}
	})
	if err != nil {
		return nil, d.fs.errno(err, d.prefix)
	}
	entries = append(entries, fuse.DirEntry{Name: PredictionsFile.Name(taken), Mode: syscall.S_IFREG, Ino: ino('j', d.pv.model.Name, d.prefix)})
	return gofs.NewListDirStream(entries), 0
}
