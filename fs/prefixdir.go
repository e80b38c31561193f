package fs

import (
	"context"
	"sync"
	"sync/atomic"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/featurefs/featurefs/fs/features"
	"github.com/featurefs/featurefs/fs/namespace"
	"github.com/featurefs/featurefs/fs/naming"
	"github.com/featurefs/featurefs/fs/views"
)

// prefixDir is a bucket prefix seen through one layer:
// features/<model>/<layer>/<prefix>. It holds no listing itself; listings
// live in the namespace's listing cache, shared by all models and layers.
type prefixDir struct {
	gofs.Inode
	readOnly
	fs     *FS
	view   *views.Layer
	prefix string // "" or "a/b/"
	// lookups counts the kernel's LOOKUPs in the directory (a reader
	// stat'ing entries READDIRPLUS handed out without attributes).
	lookups atomic.Int64
}

var _ = (gofs.NodeGetattrer)((*prefixDir)(nil))
var _ = (gofs.NodeLookuper)((*prefixDir)(nil))
var _ = (gofs.NodeOpendirHandler)((*prefixDir)(nil))
var _ = (gofs.NodeOnAdder)((*prefixDir)(nil))
var _ = (gofs.NodeOnForgetter)((*prefixDir)(nil))

// OnAdd counts the node in the metadata budget (budget.go).
func (d *prefixDir) OnAdd(ctx context.Context) { d.fs.nodeAdded() }

// OnForget takes the node out of the metadata budget.
func (d *prefixDir) OnForget() { d.fs.nodeForgotten() }

// Getattr reports a read-only directory.
func (d *prefixDir) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	d.fs.dirAttr(&out.Attr)
	return 0
}

// Lookup finds a subdirectory or feature file. The kernel looks a
// subdirectory up again when a path walk passes through it after
// MetadataTTL: the feature files it holds there are then checked against a
// fresh listing before the walk goes on (FS.revalidateDir).
func (d *prefixDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	d.fs.stats.lookups.Add(1)
	d.lookups.Add(1)
	if d.view.Aug != nil && views.AugmentJSONL.Is(name) {
		return augJSONLLookup(ctx, d, name, out)
	}
	e, err := d.fs.ns.Lookup(ctx, d.prefix, name)
	if err != nil {
		return nil, d.fs.errno(err, d.prefix+name)
	}
	if e.Dir {
		d.fs.revalidateDir(ctx, e.Sub)
	}
	return d.child(ctx, e, out), 0
}

// augJSONLLookup answers a lookup of name in view directory d, where name
// is augment.jsonl's usual or moved name (views.AugJSONLLookup): the
// bucket's entry when it has the usual name, else the augment.jsonl file
// (one listing gives it its size and its bytes).
func augJSONLLookup(ctx context.Context, d *prefixDir, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	n, taken, err := views.AugJSONLLookup(ctx, d.fs.ns, d.fs.p, d.view, d.prefix, name)
	switch {
	case err != nil:
		return nil, d.fs.errno(err, d.prefix+name)
	case taken == nil:
		return d.fs.viewChild(ctx, &d.Inode, name, d.prefix+name, n, out)
	case taken.Dir:
		d.fs.revalidateDir(ctx, taken.Sub)
	}
	return d.child(ctx, *taken, out), 0
}

// child returns the inode of an entry (the one the kernel already has when
// it is the same node), filling its attributes and, for a feature file, its
// kernel timeouts (FS.fileTimeout; directories keep the mount's).
func (d *prefixDir) child(ctx context.Context, e naming.Entry, out *fuse.EntryOut) *gofs.Inode {
	fv := d.view.View()
	id := gofs.StableAttr{Mode: syscall.S_IFREG, Ino: d.entryIno(fv, e)}
	if e.Dir {
		id.Mode = syscall.S_IFDIR
		d.fs.dirAttr(&out.Attr)
	} else if e.Obj.Plain {
		fileAttr(&out.Attr, e.Obj.Size, e.Obj.ModTime)
	} else {
		fileAttr(&out.Attr, fv.Size, e.Obj.ModTime)
		if t := d.fs.fileTimeout(); t > 0 {
			out.SetEntryTimeout(t)
			out.SetAttrTimeout(t)
		}
	}
	if ch := d.GetChild(e.Name); ch != nil && ch.StableAttr() == id {
		return ch
	}
	if e.Dir {
		return d.NewInode(ctx, &prefixDir{fs: d.fs, view: d.view, prefix: e.Sub}, id)
	}
	if e.Obj.Plain {
		return d.NewInode(ctx, &viewFile{fs: d.fs, noOpen: noOpen{d.fs}, file: views.NewObject(d.fs.p.Bucket(), e.Obj), name: e.Obj.Key}, id)
	}
	return d.NewInode(ctx, &featureFile{fs: d.fs, noOpen: noOpen{d.fs}, view: d.view, fv: fv, prefix: d.prefix, name: e.Name, obj: e.Obj}, id)
}

// entryIno is the inode number readdir reports for an entry, at the
// layer's version fv.
func (d *prefixDir) entryIno(fv *features.View, e naming.Entry) uint64 {
	if e.Dir {
		return d.view.DirIno(e.Sub)
	}
	return d.view.FileIno(fv, e.Obj.Key, e.Obj.ETag)
}

// OpendirHandle starts a listing: from the cache when a complete one is
// fresh, else streamed from the bucket page by page as the reader asks
// (namespace.Namespace.OpenDir).
func (d *prefixDir) OpendirHandle(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	h := &dirHandle{d: d, lookupsAtOpen: d.lookups.Load(), walk: d.fs.ns.InWalk(d.prefix)}
	h.start(ctx)
	return h, 0, 0
}

// dirHandle is one open directory: its namespace's reader (a snapshot of a
// complete cached listing, or a stream reading the bucket page by page).
type dirHandle struct {
	d             *prefixDir
	lookupsAtOpen int64 // d.lookups when the handle was opened. Constant.
	// walk is whether the directory was opened as a step of a walk (its
	// parent read by a directory reader: namespace.Namespace.InWalk).
	// Constant.
	walk bool

	mu      sync.Mutex
	r       *namespace.DirReader // GUARDED_BY(mu)
	entries []naming.Entry       // GUARDED_BY(mu): entries to hand out from pos
	pos     int                  // GUARDED_BY(mu)
	off     uint64               // GUARDED_BY(mu): entries handed out so far
	last    naming.Entry         // GUARDED_BY(mu): the entry Readdirent returned last
	hasLast bool                 // GUARDED_BY(mu)
	// In a view directory: whether the bucket's entries handed out so
	// far hold one called augment.jsonl, and whether the augment.jsonl
	// was handed out (after them, under the name taken gives it; last is
	// then that file).
	augTaken, augDone bool // GUARDED_BY(mu)
}

var _ = (gofs.FileReaddirenter)((*dirHandle)(nil))
var _ = (gofs.FileLookuper)((*dirHandle)(nil))
var _ = (gofs.FileSeekdirer)((*dirHandle)(nil))
var _ = (gofs.FileReleasedirer)((*dirHandle)(nil))

// start (re)opens the directory (namespace.Namespace.OpenDir). Callers
// hold mu or own h.
func (h *dirHandle) start(ctx context.Context) {
	if h.r != nil {
		h.r.Close()
	}
	h.entries, h.pos, h.off, h.hasLast = nil, 0, 0, false
	h.augTaken, h.augDone = false, false
	h.r = h.d.fs.ns.OpenDir(ctx, h.d.prefix)
}

// Readdirent returns the next entry, reading another page when needed.
func (h *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for h.pos >= len(h.entries) {
		if h.r == nil || h.r.Done() {
			if h.r == nil || h.d.view.Aug == nil || h.augDone {
				return nil, 0
			}
			// A view directory lists its augment.jsonl after the
			// bucket's entries, moved if one of them has its name
			// (views.AugJSONL).
			h.augDone = true
			h.off++
			name := views.AugmentJSONL.Name(h.augTaken)
			h.last, h.hasLast = naming.Entry{Name: name}, true
			return &fuse.DirEntry{Name: name, Mode: syscall.S_IFREG, Ino: views.AugJSONLIno(h.d.view, h.d.prefix, nil), Off: h.off}, 0
		}
		es, err := h.r.Next(ctx)
		if err != nil {
			return nil, h.d.fs.errno(err, h.d.prefix)
		}
		h.entries, h.pos = es, 0
	}
	e := h.entries[h.pos]
	h.pos++
	h.off++
	h.last, h.hasLast = e, true
	h.augTaken = h.augTaken || e.Name == string(views.AugmentJSONL)
	mode := uint32(syscall.S_IFREG)
	if e.Dir {
		mode = syscall.S_IFDIR
	}
	return &fuse.DirEntry{Name: e.Name, Mode: mode, Ino: h.d.entryIno(h.d.view.View(), e), Off: h.off}, 0
}

// plusFirst is how many entries of an open directory READDIRPLUS hands
// out with their attributes (and a node) before it looks at what the reader
// does: `ls -l` of a small directory stats nothing itself. A directory
// opened as a step of a walk (dirHandle.walk) gets none up front: a walk
// that only wants names (os.walk, DatasetFolder's scan) then costs no node
// per file, and one that stats (ls -lR, find -ls) gets attributes from its
// first lookup in the directory on.
const plusFirst = 128

// Lookup answers READDIRPLUS's lookup of the entry Readdirent has just
// returned, from that entry: the listing is not searched again, and a
// subdirectory's own listing is not read (listing a directory lists none of
// its subdirectories). Any other name (go-fuse replaying an interrupted
// READDIRPLUS) is looked up as usual.
//
// Attributes cost a node in the process and an inode in the kernel per
// entry, which a reader that only wants names (os.walk, DatasetFolder's
// scan) never uses: past the handle's first plusFirst entries, entries go
// without them unless the kernel has looked a name of this directory up
// since the handle was opened (a reader stat'ing what it lists, as the
// kernel's own readdirplus_auto decides), and always while the nodes fill
// their share of the metadata budget (FS.nodesFull). In a walk (walk),
// no entry gets them before such a lookup.
func (h *dirHandle) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	h.mu.Lock()
	e, ok := h.last, h.hasLast && h.last.Name == name
	gen := ok && h.augDone // the augment.jsonl Readdirent just handed out
	attrs := (h.off <= plusFirst && !h.walk) || h.d.lookups.Load() != h.lookupsAtOpen
	h.mu.Unlock()
	if h.d.view.Aug != nil && views.AugmentJSONL.Is(name) && (gen || !ok) {
		if gen && !attrs {
			return nil, syscall.EAGAIN
		}
		return augJSONLLookup(ctx, h.d, name, out)
	}
	if ok && (!attrs || h.d.fs.nodesFull()) {
		// The name without attributes or a node: go-fuse answers an entry
		// whose lookup failed with node ID 0, which the kernel takes as
		// "no attributes offered", not as a missing name. A reader that
		// wants them looks the name up.
		return nil, syscall.EAGAIN
	}
	if !ok {
		var err error
		if e, err = h.d.fs.ns.Lookup(ctx, h.d.prefix, name); err != nil {
			return nil, h.d.fs.errno(err, h.d.prefix+name)
		}
	}
	return h.d.child(ctx, e, out), 0
}

// Seekdir supports rewinding (offset 0) and staying in place.
func (h *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch off {
	case h.off:
		return 0
	case 0:
		h.start(ctx)
		return 0
	}
	return syscall.ENOTSUP
}

// Releasedir drops the handle's state.
func (h *dirHandle) Releasedir(ctx context.Context, releaseFlags uint32) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.r != nil {
		h.r.Close()
	}
	h.entries, h.r, h.hasLast = nil, nil, false
}
