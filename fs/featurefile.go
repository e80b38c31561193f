package fs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/featurefs/featurefs/cache"
	"github.com/featurefs/featurefs/extractor"
	"github.com/featurefs/featurefs/fs/bucket"
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
	fileAttr(&out.Attr, ff.view.size, ff.obj.ModTime)
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
			data, err := ff.fs.readFeature(ctx, ff.view, h.obj)
			ff.fs.pf.touch(ff.view, ff.prefix)
			file := ff.prefix + ff.name
			if err != nil {
				r.errno = ff.fs.errno(err, h.obj.Key)
				if r.errno != syscall.EINTR {
					ff.fs.failed.add(file, h.obj.Key, errReason(h.obj.Key, err), ff.fs.now())
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

// readFeature is a read's feature of obj. An object overwritten since it
// was listed (its ETag changed) is a normal event, not an error: the new
// version is looked up, remembered for later opens (FS.versions) and its
// feature served; the shape, and so the file's size, are the same.
func (f *FS) readFeature(ctx context.Context, v *layerView, obj bucket.Object) ([]byte, error) {
	ctx, cancel := f.listCtx(ctx) // the whole read, a changed object included, within ReadTimeout
	defer cancel()
	data, err := f.feature(ctx, v, obj)
	if !errors.Is(err, errObjectChanged) {
		return data, err
	}
	newer, serr := f.cfg.Bucket.Stat(ctx, obj.Key)
	if serr != nil {
		return nil, fmt.Errorf("%w; stat of the new version: %w", err, serr)
	}
	if newer.Key == "" {
		newer.Key = obj.Key
	}
	if newer.ETag == obj.ETag {
		return nil, err
	}
	f.versions.Put(obj.Key, objVersion{obj: newer, seen: f.now()}, 1)
	f.log.Info("featurefs: object changed since it was listed; serving its new version",
		slog.String("key", obj.Key), slog.String("listed_etag", obj.ETag), slog.String("etag", newer.ETag))
	return f.feature(ctx, v, newer)
}

// objVersion is a version of an object a read found newer than its listing.
type objVersion struct {
	obj  bucket.Object
	seen time.Time
}

// currentVersion returns the version of the object named name under prefix
// that an open should read, given the version obj the node was made for:
// the fresh listing's, or a newer one a read found since that listing was
// read (FS.versions). It returns false when a fresh complete listing no
// longer has the name (the object was deleted or renamed). It asks only the
// mount's caches.
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
	if nv, ok := f.versions.Get(obj.Key); ok && nv.seen.After(listedAt) {
		obj = nv.obj
	}
	return obj, true
}

// cacheKey is the cache key of one object version's feature at one layer.
func (f *FS) cacheKey(v *layerView, obj bucket.Object) cache.Key {
	return cache.Key{
		Source:      f.identity,
		Object:      obj.Key,
		ETag:        obj.ETag,
		ModelDigest: v.model.Digest,
		Layer:       v.layer.Tensor,
		Preprocess:  v.model.Preprocess.Key(),
		DType:       string(f.dtype),
	}
}

// feature returns the .npy bytes of an object's feature: a known bad object
// fails at once; otherwise concurrent readers share one cache lookup and, on
// a miss, one extraction, whose result is stored in the cache.
func (f *FS) feature(ctx context.Context, v *layerView, obj bucket.Object) ([]byte, error) {
	if reason, bad := f.isBad(obj.Key, obj.ETag); bad {
		f.stats.badHits.Add(1)
		return nil, &extractor.ImageError{Key: obj.Key, Reason: reason}
	}
	key := f.cacheKey(v, obj)
	return f.features.do(ctx, string(key.ID()), func(ctx context.Context) ([]byte, error) {
		return f.compute(ctx, v, obj, key)
	})
}

// compute reads the cache, else extracts and stores. It runs detached from
// the reader (see flightGroup) under ReadTimeout.
func (f *FS) compute(ctx context.Context, v *layerView, obj bucket.Object, key cache.Key) ([]byte, error) {
	data, ok, err := f.cfg.Cache.Get(key)
	switch {
	case err != nil:
		f.stats.cacheErrors.Add(1)
		f.log.Warn("featurefs: cache read failed; extracting again", slog.String("key", obj.Key), slog.Any("err", err))
	case ok && int64(len(data)) == v.size:
		f.stats.cacheHits.Add(1)
		return data, nil
	case ok:
		f.stats.cacheErrors.Add(1)
		f.log.Warn("featurefs: cached feature has the wrong size; extracting again", slog.String("key", obj.Key),
			slog.String("model", v.model.Name), slog.String("layer", v.layer.Name), slog.Int("bytes", len(data)), slog.Int64("want", v.size))
	}
	f.stats.cacheMisses.Add(1)
	return f.extractStore(ctx, v, obj, key, extractor.Foreground)
}

// extractStore extracts obj's feature at prio, under ReadTimeout, records a
// bad object, and stores the result in the cache. Reads call it on a cache
// miss (Foreground), prefetch and warm-up for objects not cached
// (Background): the extractor merges identical requests in flight, and a
// reader's Foreground request moves a queued Background one ahead.
func (f *FS) extractStore(ctx context.Context, v *layerView, obj bucket.Object, key cache.Key, prio extractor.Priority) ([]byte, error) {
	if f.cfg.ReadTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.cfg.ReadTimeout)
		defer cancel()
	}
	f.stats.extractions.Add(1)
	data, err := f.cfg.Extractor.Extract(ctx, extractor.Request{
		Model:    v.model.Name,
		Layer:    v.layer.Index,
		Key:      obj.Key,
		ETag:     obj.ETag,
		ID:       f.identity + "\x00" + obj.Key + "\x00" + obj.ETag,
		Priority: prio,
		Fetch: func(ctx context.Context) ([]byte, error) {
			b, o, err := f.cfg.Bucket.Get(ctx, obj.Key, f.cfg.MaxObjectSize)
			if err != nil {
				return nil, fmt.Errorf("get %q: %w", obj.Key, err)
			}
			if obj.ETag != "" && o.ETag != "" && o.ETag != obj.ETag {
				return nil, fmt.Errorf("get %q: %w (listed ETag %s, now %s)", obj.Key, errObjectChanged, obj.ETag, o.ETag)
			}
			return b, nil
		},
	})
	if err != nil {
		if badObject(err) {
			f.recordBad(obj.Key, obj.ETag, err)
		}
		return nil, err
	}
	if int64(len(data)) != v.size {
		return nil, fmt.Errorf("model %s %s: %w: %d bytes, the layer's shape %v gives %d",
			v.model.Name, v.layer.Name, errBadFeature, len(data), v.layer.Shape, v.size)
	}
	if err := f.cfg.Cache.Put(key, data); err != nil {
		f.stats.cacheErrors.Add(1)
		f.log.Warn("featurefs: cache write failed", slog.String("key", obj.Key), slog.Any("err", err))
	}
	return data, nil
}
