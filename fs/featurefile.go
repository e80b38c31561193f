package fs

import (
	"context"
	"errors"
	"sync/atomic"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/features"
	"github.com/featurefs/featurefs/fs/figures"
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

// Read returns part of the feature (views.Feature.ReadAt says how); the
// kernel asks only for what its page cache lacks (the file's first read,
// pages it dropped). When the object changed, the kernel is told to drop
// the file's pages once this read is answered.
func (ff *featureFile) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	ff.fs.stats.readSizes[figures.ReadSizeBucket(len(dest))].Add(1)
	feat := views.Feature{NS: ff.fs.ns, P: ff.fs.p, FV: ff.fv, Prefix: ff.prefix, Name: ff.name, Obj: ff.obj}
	out, r, err := feat.ReadAt(ctx, dest, off)
	if r.DropPages {
		ff.fs.dropPagesLater(&ff.Inode, &ff.fs.stats.contentDrops)
	}
	var retried *views.RetriedError
	switch {
	case errors.As(err, &retried):
		return nil, classify(retried.Err).errno // counted and logged the first time
	case err != nil && ctx.Err() != nil:
		return nil, syscall.EINTR // not this file's failure
	case err != nil:
		return nil, ff.fs.errno(err, ff.obj.Key)
	}
	if r.Recent {
		ff.fs.stats.recentReads.Add(1)
	}
	ff.fs.stats.reads.Add(1)
	ff.fs.stats.readBytes.Add(int64(len(out)))
	return fuse.ReadResultData(out), 0
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
