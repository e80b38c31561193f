package fs

import (
	"context"
	"sort"
	"syscall"
	"time"
	"unsafe"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/naming"
)

// predFile is predictions/<model>/<prefix>/predictions.jsonl: one JSON
// line per image directly in the prefix, in listing order, with its top
// classes (features.PredictionLayout; an image that fails has an error
// line instead, and the others are unaffected).
//
// Sizes: stat never computes. Each line is padded with spaces to a width
// that depends only on its key, the model's class count, the labels and
// --predictions-top, so the file's size is the sum of its images' widths,
// known from the directory's listing alone (the one ls reads), like a
// feature file's size from its layer's shape. The mount opens no files
// (noOpen), so there is no direct_io: the kernel reads up to the size
// stat reported, and caches pages as for any file.
//
// Reads: a READ of [off, off+n) computes only the lines it covers (the
// line widths give their images), in parallel within the pipeline's bound
// on predictions (features.Pipeline.PredictAll), and each from the last
// layer's feature through the cache, the feature store and the
// extraction, as a read of that feature. A READ is at most maxRead (1 MiB)
// of lines, so memory per request is bounded whatever the prefix's size;
// a whole-file read is a stream of such requests. The listing is the
// snapshot stat last took (taken again after --metadata-ttl), so a file's
// size and lines agree; the snapshots are kept in one LRU for the whole
// tree (FS.predSnaps, predSnapshotBytes), and one evicted, or too large
// for it, is taken again from the namespace's listing.
type predFile struct {
	gofs.Inode
	readOnly
	noOpen
	fs     *FS
	pv     *predView
	prefix string
}

// predSnapshotBytes bounds the predictions files' listing snapshots kept
// between requests, all files together (FS.predSnaps): about 700,000
// images' records and line offsets.
const predSnapshotBytes = 64 << 20

// predSnapshotCost is the bytes a snapshot of n images holds (an
// object record and a line offset each; the strings are the listing's).
func predSnapshotCost(n int) int {
	return 64 + n*int(unsafe.Sizeof(bucket.Object{})+8)
}

var _ = (gofs.NodeGetattrer)((*predFile)(nil))
var _ = (gofs.NodeReader)((*predFile)(nil))

// predSnapshot is one listing of the file's prefix and its line offsets.
// Constant.
type predSnapshot struct {
	objs  []bucket.Object
	ends  []int64 // ends[i]: the offset just past objs[i]'s line
	size  int64
	mtime time.Time
	taken time.Time
	// dirTaken is whether the listing holds a subdirectory called
	// predictions.jsonl, which then keeps the name (naming.Generated).
	dirTaken bool
}

// snapshot returns the file's listing: the last one while it is younger
// than the mount's --metadata-ttl (or when fresh is false), else a new one
// read through the namespace. A stale one is read again in the background
// (predRefresh), waited for up to predStaleGrace: past it, or when the
// store fails, the last one answers and the new one replaces it when it
// comes, so that a stat after the TTL never waits for a whole directory's
// listing (a prefix whose namespace listing was dropped under the
// metadata budget is read again page by page: on a large prefix and a
// loaded store, tens of seconds).
func (pf *predFile) snapshot(ctx context.Context, fresh bool) (*predSnapshot, error) {
	id := pf.pv.model.Name + "\x00" + pf.prefix
	s, ok := pf.fs.predSnaps.Get(id)
	if ok && (!fresh || pf.fs.now().Sub(s.taken) < pf.fs.metadataTTL) {
		return s, nil
	}
	if !ok {
		return pf.take(ctx, id)
	}
	c := pf.fs.predRefresh.Start(ctx, id, pf.fs.predRefreshSlot, func(ctx context.Context) (*predSnapshot, error) {
		defer func() { <-pf.fs.predRefreshing }()
		return pf.take(ctx, id)
	})
	if c == nil {
		return s, nil // every refresh slot busy: the last one
	}
	wctx, cancel := context.WithTimeout(ctx, predStaleGrace)
	defer cancel()
	if ns, err := c.Wait(wctx); err == nil {
		return ns, nil
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return s, nil
}

// predStaleGrace is how long a stat of a predictions file whose snapshot
// is stale waits for the new one; predRefreshes bounds the snapshots
// being read again at once, all files together.
const (
	predStaleGrace = time.Second
	predRefreshes  = 4
)

// predRefreshSlot takes one of the refresh slots, if one is free.
func (f *FS) predRefreshSlot() bool {
	select {
	case f.predRefreshing <- struct{}{}:
		return true
	default:
		return false
	}
}

// take reads the file's listing through the namespace and keeps it as
// the file's snapshot.
func (pf *predFile) take(ctx context.Context, id string) (*predSnapshot, error) {
	s := &predSnapshot{taken: pf.fs.now(), mtime: pf.fs.p.Started()}
	err := pf.fs.listEach(ctx, pf.prefix, func(e naming.Entry) {
		if e.Dir && e.Name == string(PredictionsFile) {
			s.dirTaken = true
		}
		if e.Dir || e.Obj.Plain {
			return
		}
		s.size += pf.pv.layout.Width(e.Obj.Key)
		s.objs = append(s.objs, e.Obj)
		s.ends = append(s.ends, s.size)
		if e.Obj.ModTime.After(s.mtime) {
			s.mtime = e.Obj.ModTime
		}
	})
	if err != nil {
		return nil, err
	}
	pf.fs.predSnaps.Put(id, s, predSnapshotCost(len(s.objs)))
	return s, nil
}

// attr fills the file's attributes from a snapshot.
func (pf *predFile) attr(out *fuse.Attr, s *predSnapshot) {
	fileAttr(out, s.size, s.mtime)
}

// Getattr reports the size the listing gives; it computes nothing.
func (pf *predFile) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	s, err := pf.snapshot(ctx, true)
	if err != nil {
		return pf.fs.errno(err, pf.prefix)
	}
	pf.attr(&out.Attr, s)
	return 0
}

// Read computes the lines [off, off+len(dest)) covers and returns its part
// of them.
func (pf *predFile) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	s, err := pf.snapshot(ctx, false)
	if err != nil {
		return nil, pf.fs.errno(err, pf.prefix)
	}
	if off < 0 || off >= s.size || len(dest) == 0 {
		return fuse.ReadResultData(nil), 0
	}
	end := min(off+int64(len(dest)), s.size)
	first := sort.Search(len(s.ends), func(i int) bool { return s.ends[i] > off })
	last := sort.Search(len(s.ends), func(i int) bool { return s.ends[i] >= end })
	start := int64(0)
	if first > 0 {
		start = s.ends[first-1]
	}
	v := pf.pv.view() // one version for the whole read
	pf.fs.p.Touch(v, pf.prefix)
	preds := pf.fs.p.PredictAll(ctx, v, s.objs[first:last+1], pf.pv.layout.TopK)
	if ctx.Err() != nil {
		return nil, syscall.EINTR
	}
	buf := make([]byte, 0, s.ends[last]-start)
	for _, pr := range preds {
		buf = pf.pv.layout.Append(buf, pr, true)
	}
	out := buf[off-start : end-start]
	pf.fs.stats.reads.Add(1)
	pf.fs.stats.readBytes.Add(int64(len(out)))
	return fuse.ReadResultData(out), 0
}
