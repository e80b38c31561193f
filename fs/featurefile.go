package fs

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/features"
)

// featureFile is one .npy file: the feature of one object version at one
// layer. Its size follows from the layer's shape; its content is computed
// on the first read of an open handle.
type featureFile struct {
	gofs.Inode
	readOnly
	fs     *FS
	view   *layerView
	prefix string        // the directory's bucket prefix
	name   string        // the file's name in it
	obj    bucket.Object // the version it was looked up as
}

var _ = (gofs.NodeGetattrer)((*featureFile)(nil))
var _ = (gofs.NodeOpener)((*featureFile)(nil))
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

// Open hands out a handle; the content is immutable, so the kernel keeps
// its page cache across opens, and a close needs no FLUSH round trip (numpy
// closes each file twice: the FLUSHes doubled the cost of a cached np.load).
// The handle reads the newest version the mount knows of the object (the
// kernel may hold this node past a relisting, until it drops the entry:
// see kernelcache.go); a name that the fresh listing of its directory no
// longer has is gone (ENOENT). When that version is not the node's own, the
// kernel's page cache of the node may hold the old version's bytes: the
// open does not keep it. Open never asks the store.
func (ff *featureFile) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if openForWrite(flags) {
		return nil, 0, syscall.EROFS
	}
	ff.fs.stats.opens.Add(1)
	obj, ok := ff.fs.currentVersion(ff.prefix, ff.name, ff.obj)
	if !ok {
		return nil, 0, ff.fs.errno(fmt.Errorf("%s%s: no longer listed: %w", ff.prefix, ff.name, bucket.ErrNotFound), ff.obj.Key)
	}
	if obj.Key != ff.obj.Key || obj.ETag != ff.obj.ETag {
		return &featureHandle{obj: obj}, fuse.FOPEN_NOFLUSH, 0
	}
	return &featureHandle{obj: obj}, fuse.FOPEN_KEEP_CACHE | fuse.FOPEN_NOFLUSH, 0
}

// featureHandle holds the whole feature once read, for the later reads of
// the same open file.
type featureHandle struct {
	obj bucket.Object // the object version it reads; constant

	mu sync.Mutex
	// run is the computation of the feature, once a read has started it. A
	// failed one is kept: later reads of the same handle (the kernel retries
	// a failed readahead with a plain read) fail at once instead of waiting
	// out a second --read-timeout; a new open tries again. An interrupted
	// one is dropped, and the next read starts again.
	run *handleRun // GUARDED_BY(mu)
}

// handleRun is one computation of a handle's feature. data and errno are
// set before done is closed.
type handleRun struct {
	done  chan struct{}
	data  []byte
	errno syscall.Errno
}

// Read returns part of the feature, computing it on the first read of the
// handle; concurrent reads of the handle wait for that computation, each
// interruptible on its own. Once computed, the first read of a feature's
// content tells prefetch which layer directory a reader is in (metadata
// alone never does: ls, find, du and stat compute nothing).
func (ff *featureFile) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h, ok := fh.(*featureHandle)
	if !ok {
		h = &featureHandle{obj: ff.obj}
	}
	data, errno := ff.content(ctx, h)
	if errno != 0 {
		return nil, errno
	}
	ff.fs.stats.reads.Add(1)
	if off >= int64(len(data)) {
		return fuse.ReadResultData(nil), 0
	}
	end := min(off+int64(len(dest)), int64(len(data)))
	ff.fs.stats.readBytes.Add(end - off)
	return fuse.ReadResultData(data[off:end]), 0
}

// content returns the handle's feature: the computation's result if one
// has finished, else it starts one or waits for the one running.
func (ff *featureFile) content(ctx context.Context, h *featureHandle) ([]byte, syscall.Errno) {
	for {
		h.mu.Lock()
		r, owner := h.run, false
		if r == nil {
			r, owner = &handleRun{done: make(chan struct{})}, true
			h.run = r
		}
		h.mu.Unlock()
		if owner {
			data, err := ff.fs.p.Read(ctx, ff.view.View, h.obj)
			ff.fs.p.Touch(ff.view.View, ff.prefix)
			file := ff.prefix + ff.name
			if err != nil {
				r.errno = ff.fs.errno(err, h.obj.Key)
				if r.errno != syscall.EINTR {
					ff.fs.failed.add(file, h.obj.Key, features.ErrReason(h.obj.Key, err), ff.fs.now())
				}
			} else {
				ff.fs.failed.clear(file)
			}
			r.data = data
			if r.errno == syscall.EINTR {
				h.mu.Lock()
				h.run = nil
				h.mu.Unlock()
			}
			close(r.done)
			return r.data, r.errno
		}
		select {
		case <-r.done:
			if r.errno == syscall.EINTR {
				continue // its reader was interrupted, not this one: start again
			}
			return r.data, r.errno
		case <-ctx.Done():
			return nil, syscall.EINTR
		}
	}
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
		case found && !e.dir:
			obj = e.obj
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
