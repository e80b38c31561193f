package fs

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/features"
	"github.com/featurefs/featurefs/fs/figures"
	"github.com/featurefs/featurefs/fs/namespace"
	"github.com/featurefs/featurefs/fs/views"
)

// featureFile is one .npy file: the feature of one object version at one
// layer. Its size follows from the layer's shape. Its content is read from
// the cache a part at a time, or computed whole by the read that finds the
// cache without it (noOpen: a read comes without an open handle).
type featureFile struct {
	gofs.Inode
	readOnly
	noOpen
	fs     *FS
	view   *views.Layer
	fv     *features.View // the model version it was looked up at: its reads finish on it
	prefix string         // the directory's bucket prefix
	name   string         // the file's name in it
	obj    bucket.Object  // the version it was looked up as
	pt     ptState        // its opens, with passthrough on (passthrough.go)
}

var _ = (gofs.NodeGetattrer)((*featureFile)(nil))
var _ = (gofs.NodeReader)((*featureFile)(nil))
var _ = (gofs.NodeOnAdder)((*featureFile)(nil))
var _ = (gofs.NodeOnForgetter)((*featureFile)(nil))

// OnAdd counts the node in the metadata budget (budget.go).
func (ff *featureFile) OnAdd(ctx context.Context) { ff.fs.nodeAdded() }

// OnForget takes the node out of the metadata budget.
func (ff *featureFile) OnForget() { ff.fs.nodeForgotten() }

// Getattr reports the size the layer's shape gives; it never computes.
// The attributes are those of one object version, so the kernel keeps them
// as long as the entry (FS.fileTimeout).
func (ff *featureFile) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	fileAttr(&out.Attr, ff.fv.Size, ff.obj.ModTime)
	if t := ff.fs.fileTimeout(); t > 0 {
		out.SetTimeout(t)
	}
	return 0
}

// Read returns part of the feature; the kernel asks only for what its
// page cache lacks (the file's first read, pages it dropped).
//
// A node's content is its own object version's (the kernel may hold this
// node past a relisting, until it drops the entry: see kernelcache.go). A
// name that the fresh listing of its directory no longer has is gone
// (ENOENT). When the mount knows of a newer version, the node still serves
// its own version's bytes while they are at hand (just computed, or in the
// cache): a reader part way through the file, or the kernel's pages of it,
// hold some of them, and a file must never mix two versions' bytes; the
// name stands for the new version's node once the kernel drops the entry.
// Only when the own version's feature is gone (evicted, and the object no
// longer there to compute it from) does the node serve the newest
// version, and the kernel is told to drop the node's pages once this read
// is answered.
//
// A feature a read computed is kept in the namespace (Recent), and the
// file's next reads copy from it. Else a read the cache can answer copies just the
// part it asks for (features.Pipeline.ReadCachedAt: a feature prefetch
// just computed comes from its hand-off buffer, in memory). Otherwise it
// computes the whole feature (from the cache, the feature store or the
// model: concurrent reads of a file share one computation). A failure that took a while is kept
// there for the kernel's retry of the request (namespace.Namespace.ReadFailed), which then
// fails at once instead of waiting out a second --read-timeout; a new
// read(2) tries again. The first read of a
// feature's content tells prefetch which layer directory a reader is in
// (metadata alone never does: ls, find, du and stat compute nothing).
func (ff *featureFile) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	ff.fs.stats.readSizes[figures.ReadSizeBucket(len(dest))].Add(1)
	ns := ff.fs.ns
	obj, ok := ns.CurrentVersion(ff.prefix, ff.name, ff.obj)
	if !ok {
		return nil, ff.fs.errno(fmt.Errorf("%s%s: no longer listed: %w", ff.prefix, ff.name, bucket.ErrNotFound), ff.obj.Key)
	}
	if obj.Key != ff.obj.Key || obj.ETag != ff.obj.ETag {
		if out, ok := ff.readHeld(ff.obj, dest, off); ok {
			return out, 0
		}
		ff.fs.dropPagesLater(&ff.Inode, &ff.fs.stats.contentDrops)
	}
	if out, ok := ff.readHeld(obj, dest, off); ok {
		return out, 0
	}
	k := namespace.FileKey{View: ff.fv, Key: obj.Key, ETag: obj.ETag}
	data, errno := ff.content(ctx, k, obj, off, len(dest))
	if errno != 0 {
		return nil, errno
	}
	if nv, _, ok := ff.fs.p.NewerVersion(obj.Key); ok && nv.ETag != ff.obj.ETag {
		// The read found the object changed and served its new version.
		ff.fs.dropPagesLater(&ff.Inode, &ff.fs.stats.contentDrops)
	}
	ff.fs.stats.reads.Add(1)
	out := views.SliceAt(data, len(dest), off)
	ff.fs.stats.readBytes.Add(int64(len(out)))
	return fuse.ReadResultData(out), 0
}

// readHeld answers a read of the feature of obj from what is at hand,
// without computing: a feature a read of this file just computed (its next
// reads copy it from memory, not decompress it back out of the cache), or
// the part the cache holds. ok is false when neither has it.
func (ff *featureFile) readHeld(obj bucket.Object, dest []byte, off int64) (fuse.ReadResult, bool) {
	ns := ff.fs.ns
	k := namespace.FileKey{View: ff.fv, Key: obj.Key, ETag: obj.ETag}
	if data, ok := ns.Recent(k); ok {
		ff.fs.p.Touch(ff.fv, ff.prefix)
		ns.ReadDone(k, ff.prefix+ff.name, nil)
		out := views.SliceAt(data, len(dest), off)
		ff.fs.stats.recentReads.Add(1)
		ff.fs.stats.reads.Add(1)
		ff.fs.stats.readBytes.Add(int64(len(out)))
		return fuse.ReadResultData(out), true
	}
	if n, ok := ff.fs.p.ReadCachedAt(ff.fv, obj, dest, off); ok {
		ff.fs.p.Touch(ff.fv, ff.prefix)
		ns.ReadDone(k, ff.prefix+ff.name, nil)
		ff.fs.stats.reads.Add(1)
		ff.fs.stats.readBytes.Add(int64(n))
		return fuse.ReadResultData(dest[:n]), true
	}
	return nil, false
}

// content returns the feature of obj (k) at the file's layer for a request
// of size bytes at off: a recent result (a slow failure only for the
// kernel's retry of a request that failed: namespace.Namespace.Retry), else
// a computation of its own or one in flight for the same feature.
func (ff *featureFile) content(ctx context.Context, k namespace.FileKey, obj bucket.Object, off int64, size int) ([]byte, syscall.Errno) {
	ns := ff.fs.ns
	if data, ok := ns.Recent(k); ok {
		return data, 0
	}
	if err := ns.Retry(k, off); err != nil {
		return nil, classify(err).errno
	}
	t0 := time.Now()
	data, err := ff.fs.p.Read(ctx, ff.fv, obj)
	ff.fs.p.Touch(ff.fv, ff.prefix)
	file := ff.prefix + ff.name
	switch {
	case err != nil && ctx.Err() != nil:
		// Interrupted: not this file's failure, and the computation goes
		// on for the reader's retry.
		return nil, syscall.EINTR
	case err != nil:
		errno := ff.fs.errno(err, obj.Key)
		if errno == syscall.EINTR {
			return nil, errno
		}
		ns.ReadFailed(k, file, off, size, err, t0)
		return nil, errno
	}
	ns.ReadDone(k, file, data)
	return data, 0
}

// dropPagesLater tells the kernel, in its own goroutine, to drop the pages
// it holds of a file (FUSE_NOTIFY_INVAL_INODE), and counts it in count
// (if not nil) when the kernel held the file. Never synchronously from a
// request on that file: the kernel waits for the pages the request is
// filling.
func (f *FS) dropPagesLater(n *gofs.Inode, count *atomic.Int64) {
	f.owner.Go(func() {
		if errno := n.NotifyContent(0, 0); errno == 0 && count != nil {
			count.Add(1)
		}
	})
}
