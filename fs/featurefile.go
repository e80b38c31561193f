package fs

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/figures"
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
	view   *layerView
	prefix string        // the directory's bucket prefix
	name   string        // the file's name in it
	obj    bucket.Object // the version it was looked up as
}

var _ = (gofs.NodeGetattrer)((*featureFile)(nil))
var _ = (gofs.NodeReader)((*featureFile)(nil))

// Getattr reports the size the layer's shape gives; it never computes.
// The attributes are those of one object version, so the kernel keeps them
// as long as the entry (FS.fileTimeout).
func (ff *featureFile) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	fileAttr(&out.Attr, ff.view.Size, ff.obj.ModTime)
	if t := ff.fs.fileTimeout(); t > 0 {
		out.SetTimeout(t)
	}
	return 0
}

// Read returns part of the feature; the kernel asks only for what its
// page cache lacks (the file's first read, pages it dropped).
//
// It serves the newest version of the object the mount knows of (the
// kernel may hold this node past a relisting, until it drops the entry:
// see kernelcache.go), and a name that the fresh listing of its directory
// no longer has is gone (ENOENT). When that version is not the node's own,
// the kernel is told to drop the node's pages once this read is answered,
// so that the file never mixes two versions' bytes.
//
// A feature a read computed is kept in FS.recent, and the file's next
// reads copy from it. Else a read the cache can answer copies just the
// part it asks for (features.Pipeline.ReadCachedAt: a feature prefetch
// just computed comes from its hand-off buffer, in memory). Otherwise it
// computes the whole feature (from the cache, the feature store or the
// model: concurrent reads of a file share one computation). A failure that took slowFailure or longer is kept
// there for the kernel's retry of the request (failedReads), which then
// fails at once instead of waiting out a second --read-timeout; a new
// read(2) tries again. The first read of a
// feature's content tells prefetch which layer directory a reader is in
// (metadata alone never does: ls, find, du and stat compute nothing).
func (ff *featureFile) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	ff.fs.stats.readSizes[figures.ReadSizeBucket(len(dest))].Add(1)
	obj, ok := ff.fs.currentVersion(ff.prefix, ff.name, ff.obj)
	if !ok {
		return nil, ff.fs.errno(fmt.Errorf("%s%s: no longer listed: %w", ff.prefix, ff.name, bucket.ErrNotFound), ff.obj.Key)
	}
	if obj.Key != ff.obj.Key || obj.ETag != ff.obj.ETag {
		ff.fs.dropPagesLater(&ff.Inode, &ff.fs.stats.contentDrops)
	}
	if r, ok := ff.fs.recent.Get(recentKey{ff.view, obj.Key, obj.ETag}); ok && r.fail == nil {
		// A feature a read of this file just computed: its next reads
		// copy it from memory, not decompress it back out of the cache.
		ff.fs.p.Touch(ff.view.View, ff.prefix)
		ff.fs.failed.clear(ff.prefix + ff.name)
		out := sliceAt(r.data, dest, off)
		ff.fs.stats.recentReads.Add(1)
		ff.fs.stats.reads.Add(1)
		ff.fs.stats.readBytes.Add(int64(len(out)))
		return fuse.ReadResultData(out), 0
	}
	if n, ok := ff.fs.p.ReadCachedAt(ff.view.View, obj, dest, off); ok {
		ff.fs.p.Touch(ff.view.View, ff.prefix)
		ff.fs.failed.clear(ff.prefix + ff.name)
		ff.fs.stats.reads.Add(1)
		ff.fs.stats.readBytes.Add(int64(n))
		return fuse.ReadResultData(dest[:n]), 0
	}
	data, errno := ff.content(ctx, obj, off, len(dest))
	if errno != 0 {
		return nil, errno
	}
	if nv, _, ok := ff.fs.p.NewerVersion(obj.Key); ok && nv.ETag != ff.obj.ETag {
		// The read found the object changed and served its new version.
		ff.fs.dropPagesLater(&ff.Inode, &ff.fs.stats.contentDrops)
	}
	ff.fs.stats.reads.Add(1)
	out := sliceAt(data, dest, off)
	ff.fs.stats.readBytes.Add(int64(len(out)))
	return fuse.ReadResultData(out), 0
}

// failMemo is how long a slow failure of a file's computation answers the
// kernel's retry of the request that failed (see Read); slowFailure is what
// slow means (a failure that comes quicker costs little to try again).
const (
	failMemo    = time.Second
	slowFailure = 100 * time.Millisecond
)

// recentKey names one object version's feature at one layer directory.
type recentKey struct {
	view      *layerView
	key, etag string
}

// recentFeature is a computed feature, or the slow failures of its
// computation.
type recentFeature struct {
	data []byte
	fail *failedReads
}

// failedReads are the requests of a file whose computation failed slowly,
// each kept for one retry. When a readahead request fails, the kernel reads
// the first page the reader needs again with a plain read, once, in the
// same read(2): that request, which lies within a failed one, takes the
// failed one's error at once. A later read(2) finds no request left to
// answer it and computes again (when the kernel left pages unfilled after
// a failure, that read starts with a plain read of one page, so a failure
// cannot be told apart from the retry by its size, only by being one
// request's only retry).
type failedReads struct {
	mu     sync.Mutex
	errno  syscall.Errno // GUARDED_BY(mu)
	at     time.Time     // GUARDED_BY(mu): the last failure
	ranges [][2]int64    // GUARDED_BY(mu): failed requests not yet retried
}

// add records a failed request of size bytes at off.
func (fr *failedReads) add(off int64, size int, errno syscall.Errno, now time.Time) {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	if now.Sub(fr.at) >= failMemo {
		fr.ranges = fr.ranges[:0]
	}
	fr.errno, fr.at = errno, now
	if len(fr.ranges) < 64 { // a file's readahead is a few requests
		fr.ranges = append(fr.ranges, [2]int64{off, off + int64(max(size, 1))})
	}
}

// retry returns the error of a failed request within failMemo that holds
// off, and forgets that request.
func (fr *failedReads) retry(off int64) (syscall.Errno, bool) {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	if time.Since(fr.at) >= failMemo {
		return 0, false
	}
	for i, r := range fr.ranges {
		if off >= r[0] && off < r[1] {
			fr.ranges = append(fr.ranges[:i], fr.ranges[i+1:]...)
			return fr.errno, true
		}
	}
	return 0, false
}

// content returns the feature of obj at the file's layer for a request of
// size bytes at off: a recent result (a slow failure only for the kernel's
// retry of a request that failed), else a computation of its own or one in
// flight for the same feature.
func (ff *featureFile) content(ctx context.Context, obj bucket.Object, off int64, size int) ([]byte, syscall.Errno) {
	k := recentKey{ff.view, obj.Key, obj.ETag}
	if r, ok := ff.fs.recent.Get(k); ok {
		if r.fail == nil {
			return r.data, 0
		}
		if errno, ok := r.fail.retry(off); ok {
			return nil, errno
		}
	}
	t0 := time.Now()
	data, err := ff.fs.p.Read(ctx, ff.view.View, obj)
	ff.fs.p.Touch(ff.view.View, ff.prefix)
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
		ff.fs.failed.add(file, obj.Key, figures.ErrReason(obj.Key, err), ff.fs.now())
		if now := time.Now(); now.Sub(t0) >= slowFailure {
			ff.fs.failMu.Lock()
			r, ok := ff.fs.recent.Get(k)
			if !ok || r.fail == nil {
				r = recentFeature{fail: &failedReads{}}
				ff.fs.recent.Put(k, r, 1)
			}
			r.fail.add(off, size, errno, now)
			ff.fs.failMu.Unlock()
		}
		return nil, errno
	}
	ff.fs.failed.clear(file)
	ff.fs.recent.Put(k, recentFeature{data: data}, len(data))
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

// currentVersion returns the version of the object named name under prefix
// that an open should read, given the version obj the node was made for:
// the fresh listing's, or a newer one a read found since that listing was
// read (features.Pipeline.NewerVersion). It returns false when a fresh
// complete listing no longer has the name (the object was deleted or
// renamed). It asks only the mount's caches.
func (f *FS) currentVersion(prefix, name string, obj bucket.Object) (bucket.Object, bool) {
	listedAt := time.Time{}
	if l, ok := f.listings.Get(prefix); ok && f.fresh(l) {
		e, found, complete := l.find(name)
		switch {
		case found && !e.Dir:
			obj = e.Obj
		case complete:
			return obj, false
		}
		listedAt = l.listedAt
	}
	if nv, seen, ok := f.p.NewerVersion(obj.Key); ok && seen.After(listedAt) {
		obj = nv
	}
	return obj, true
}
