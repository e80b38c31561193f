package fs

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/featurefs/featurefs/fs/features"
	"github.com/featurefs/featurefs/fs/namespace"
	"github.com/featurefs/featurefs/fs/naming"
	"github.com/featurefs/featurefs/fs/views"
)

// arrays/<model>/: beside every directory D of a layer's (alias's, view's)
// feature tree, D.npy, D.labels.npy and D.rows.jsonl, the array view of D
// (fs/views): arrays/<model>/layer18.npy is the bucket's root,
// arrays/<model>/layer18/train.npy its train/ prefix,
// arrays/<model>/layer12-aug/0/train.npy augmented view 0's. Only
// directories and arrays are shown: the feature files are under
// features/. A directory's name wins over an array's (naming.Generated):
// where the bucket also shows a directory called X.npy, the array of X is
// shown under that name's moved form (X.npy~ and 16 hex digits).

// The array files' suffixes, by kind.
var arraySuffixes = [...]string{".labels.npy", ".rows.jsonl", ".npy"}

// maxArrayRows bounds one array view's rows (a directory of more fails
// its array's lookup with EFBIG, logged with its prefix).
const maxArrayRows = 16 << 20

// arrayAhead is how many rows an in-order reader of an array has
// extracted ahead of it; arrayFetch, how many rows one read computes at
// once (the extractor batches concurrent requests: both are a few of its
// batches).
const (
	arrayAhead = 64
	arrayFetch = 16
)

// arrayName splits an array file's name into its directory's name and
// its kind (an index of arraySuffixes); ok is false for another name.
func arrayName(name string) (dir string, kind int, ok bool) {
	for k, s := range arraySuffixes {
		if d, found := strings.CutSuffix(name, s); found && d != "" {
			return d, k, true
		}
	}
	return "", 0, false
}

// arrayDir is a directory of arrays/<model>/: a group of layer views
// (arrays/<model>/ itself, or LAYER-aug/ in it) when view is nil, else the
// bucket prefix prefix seen through view.
type arrayDir struct {
	gofs.Inode
	readOnly
	fs *FS
	// A group: its layer views and nested groups, by name.
	views  map[string]*layerView
	groups map[string]*arrayDir
	// A prefix directory: its view and bucket prefix. A group's prefix
	// is its path under arrays/ (its inode number's).
	view   *layerView
	prefix string
}

var _ = (gofs.NodeGetattrer)((*arrayDir)(nil))
var _ = (gofs.NodeLookuper)((*arrayDir)(nil))
var _ = (gofs.NodeReaddirer)((*arrayDir)(nil))
var _ = (gofs.NodeOnAdder)((*arrayDir)(nil))

// newArrayGroup returns arrays/<model>/ for the model's directory md of
// the features tree: a layer view for each of its layer and alias
// directories, a nested group for each of its view directories.
func newArrayGroup(f *FS, md *gofs.Inode, path string) *arrayDir {
	g := &arrayDir{fs: f, views: map[string]*layerView{}, groups: map[string]*arrayDir{}, prefix: path}
	for name, ch := range md.Children() {
		switch n := ch.Operations().(type) {
		case *prefixDir:
			g.views[name] = n.view
		case *augDir:
			g.groups[name] = newArrayGroup(f, ch, path+"/"+name)
		}
	}
	return g
}

// OnAdd adds a group's directories.
func (d *arrayDir) OnAdd(ctx context.Context) {
	for name, v := range d.views {
		ch := d.NewPersistentInode(ctx, &arrayDir{fs: d.fs, view: v}, gofs.StableAttr{Mode: syscall.S_IFDIR, Ino: ino('A', "d", v.model, v.dir, "")})
		d.AddChild(name, ch, true)
	}
	for name, g := range d.groups {
		ch := d.NewPersistentInode(ctx, g, gofs.StableAttr{Mode: syscall.S_IFDIR, Ino: ino('A', "g", g.prefix)})
		d.AddChild(name, ch, true)
	}
}

// Getattr reports a read-only directory.
func (d *arrayDir) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	d.fs.dirAttr(&out.Attr)
	return 0
}

// arrayTarget is a directory whose arrays a name stands for.
type arrayTarget struct {
	view   *layerView
	prefix string
}

// dirs returns the directory's directories: a group's (with the layer
// view each stands for, nil for a nested group) or the bucket prefix's.
func (d *arrayDir) dirs(ctx context.Context) (map[string]*arrayTarget, error) {
	out := map[string]*arrayTarget{}
	if d.view == nil {
		for name, v := range d.views {
			out[name] = &arrayTarget{view: v}
		}
		for name := range d.groups {
			out[name] = nil
		}
		return out, nil
	}
	err := d.fs.listEach(ctx, d.prefix, func(e naming.Entry) {
		if e.Dir {
			out[e.Name] = &arrayTarget{view: d.view, prefix: e.Sub}
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// arrayEntry is a name an array directory shows: a directory (target
// nil for a nested group), or an array file of kind kind of target.
type arrayEntry struct {
	dir    bool
	target *arrayTarget
	kind   int
}

// shown returns every name the directory shows: its directories, and
// each one's three array files, under the name naming.Generated gives
// them (moved where a directory of the bucket has the usual one).
func (d *arrayDir) shown(ctx context.Context) (map[string]arrayEntry, error) {
	dirs, err := d.dirs(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]arrayEntry, 4*len(dirs))
	for name, t := range dirs {
		out[name] = arrayEntry{dir: true, target: t}
	}
	for name, t := range dirs {
		if t == nil {
			continue
		}
		for k, s := range arraySuffixes {
			_, taken := dirs[name+s]
			out[naming.Generated(name+s).Name(taken)] = arrayEntry{target: t, kind: k}
		}
	}
	return out, nil
}

// Readdir lists the directories and their arrays, by name.
func (d *arrayDir) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	shown, err := d.shown(ctx)
	if err != nil {
		return nil, d.fs.errno(err, d.prefix)
	}
	list := make([]fuse.DirEntry, 0, len(shown))
	for name, e := range shown {
		mode := uint32(syscall.S_IFREG)
		if e.dir {
			mode = syscall.S_IFDIR
		}
		list = append(list, fuse.DirEntry{Name: name, Mode: mode})
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	return gofs.NewListDirStream(list), 0
}

// Lookup finds a directory, or an array of one.
func (d *arrayDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	d.fs.stats.lookups.Add(1)
	if d.view == nil {
		if ch := d.GetChild(name); ch != nil {
			d.fs.dirAttr(&out.Attr)
			return ch, 0
		}
		base, kind, ok := arrayName(name)
		if v, found := d.views[base]; ok && found {
			return d.arrayFile(ctx, arrayTarget{view: v}, kind, name, out)
		}
		return nil, syscall.ENOENT
	}
	e, err := d.fs.ns.Lookup(ctx, d.prefix, name)
	if err == nil && e.Dir {
		d.fs.dirAttr(&out.Attr)
		id := gofs.StableAttr{Mode: syscall.S_IFDIR, Ino: ino('A', "d", d.view.model, d.view.dir, e.Sub)}
		if ch := d.GetChild(name); ch != nil && ch.StableAttr() == id {
			return ch, 0
		}
		return d.NewInode(ctx, &arrayDir{fs: d.fs, view: d.view, prefix: e.Sub}, id), 0
	}
	base, kind, ok := arrayName(name)
	if !ok {
		if strings.Contains(name, "~") { // an array's moved name (shown)
			shown, err := d.shown(ctx)
			if err != nil {
				return nil, d.fs.errno(err, d.prefix+name)
			}
			if ae, found := shown[name]; found && !ae.dir {
				return d.arrayFile(ctx, *ae.target, ae.kind, name, out)
			}
		}
		if err != nil {
			return nil, d.fs.errno(err, d.prefix+name)
		}
		return nil, syscall.ENOENT
	}
	e, err = d.fs.ns.Lookup(ctx, d.prefix, base)
	if err != nil {
		return nil, d.fs.errno(err, d.prefix+base)
	}
	if !e.Dir {
		return nil, syscall.ENOENT
	}
	return d.arrayFile(ctx, arrayTarget{view: d.view, prefix: e.Sub}, kind, name, out)
}

// arrayFile answers the lookup of array file name (of kind kind) of t:
// a snapshot of t's listing (shared with its other array files for the
// listings' TTL) made into the file, one inode per version of its rows.
func (d *arrayDir) arrayFile(ctx context.Context, t arrayTarget, kind int, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	fv := t.view.view()
	key := t.view.model + "\x00" + t.view.dir + "\x00" + t.prefix
	ds, err := d.fs.arraySnaps.Get(ctx, key, func(ctx context.Context) (*views.Dataset, error) {
		return views.Scan(ctx, d.fs.listAll, t.prefix, maxArrayRows)
	})
	if err != nil {
		return nil, d.fs.errno(err, t.prefix)
	}
	var file views.File
	switch kind {
	case 0:
		file = views.NewLabels(ds)
	case 1:
		file = views.NewRows(ds)
	default:
		file = views.NewArray(d.fs.arrayEnv(), fv, ds)
	}
	fileAttr(&out.Attr, file.Size(), file.ModTime())
	id := gofs.StableAttr{Mode: syscall.S_IFREG, Ino: ino('A', "f", t.view.model, t.view.dir, t.prefix, arraySuffixes[kind],
		fv.Layer.Digest, strconv.FormatUint(file.Version(), 16))}
	if ch := d.GetChild(name); ch != nil && ch.StableAttr() == id {
		return ch, 0
	}
	return d.NewInode(ctx, &viewFile{fs: d.fs, noOpen: noOpen{d.fs}, file: file, name: t.prefix + name}, id), 0
}

// listEach reads prefix's whole directory (namespace.Namespace.OpenDir),
// calling fn on each entry as its page comes: a caller that keeps only
// some (directories) holds no more.
func (f *FS) listEach(ctx context.Context, prefix string, fn func(naming.Entry)) error {
	r := f.ns.OpenDir(ctx, prefix)
	defer r.Close()
	for !r.Done() {
		es, err := r.Next(ctx)
		if err != nil {
			return err
		}
		for _, e := range es {
			fn(e)
		}
	}
	return nil
}

// listAll reads prefix's whole directory into one slice (listEach).
func (f *FS) listAll(ctx context.Context, prefix string) ([]naming.Entry, error) {
	var all []naming.Entry
	err := f.listEach(ctx, prefix, func(e naming.Entry) { all = append(all, e) })
	if err != nil {
		return nil, err
	}
	return all, nil
}

// arrayEnv is what array views read through: the pipeline, the failures
// record, the tree's owner for extraction ahead.
func (f *FS) arrayEnv() *views.ArrayEnv {
	f.arrayEnvOnce.Do(func() {
		f.arrayEnvV = &views.ArrayEnv{
			Source: f.p,
			Failed: func(v *features.View, ds *views.Dataset, row views.Row, err error) {
				k := namespace.FileKey{View: v, Key: row.Obj.Key, ETag: row.Obj.ETag}
				f.ns.ReadFailed(k, ds.Prefix+row.Path, 0, int(v.Size), err, time.Now())
			},
			Owner: f.owner,
			Fetch: arrayFetch,
			Ahead: arrayAhead,
		}
	})
	return f.arrayEnvV
}

// viewFile renders any views.File: its attributes, and its bytes at an
// offset. It is made per version of the file (the inode number carries
// the version), so an open file keeps its bytes.
type viewFile struct {
	gofs.Inode
	readOnly
	noOpen
	fs   *FS
	file views.File
	name string // for errors: the prefix and name
}

var _ = (gofs.NodeGetattrer)((*viewFile)(nil))
var _ = (gofs.NodeReader)((*viewFile)(nil))

// Getattr reports the file's size, known without computing it.
func (vf *viewFile) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	fileAttr(&out.Attr, vf.file.Size(), vf.file.ModTime())
	return 0
}

// Read renders [off, off+len(dest)).
func (vf *viewFile) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n, err := vf.file.ReadAt(ctx, dest, off)
	if err != nil {
		if ctx.Err() != nil {
			return nil, syscall.EINTR
		}
		return nil, vf.fs.errno(err, vf.name)
	}
	vf.fs.stats.reads.Add(1)
	vf.fs.stats.readBytes.Add(int64(n))
	return fuse.ReadResultData(dest[:n]), 0
}
