package views

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/features"
	"github.com/featurefs/featurefs/fs/namespace"
)

// Feature is a read of one .npy file of the feature tree: the feature of
// one object version at one layer version. Its size follows from the
// layer's shape (FV.Size); its content is read from the cache a part at a
// time, or computed whole by the read that finds the cache without it.
// The mount's feature file node (fs/featurefile.go) makes one per READ.
type Feature struct {
	NS     *namespace.Namespace
	P      *features.Pipeline
	FV     *features.View // the model version it was looked up at: its reads finish on it
	Prefix string         // the directory's bucket prefix
	Name   string         // the file's name in it
	Obj    bucket.Object  // the version it was looked up as
}

// FeatureRead says what a read did, for the mount's figures and the
// kernel's cache.
type FeatureRead struct {
	// Recent: copied from the feature a read of this file just computed.
	Recent bool
	// DropPages: the object changed, and the kernel is to drop the file's
	// pages once this read is answered.
	DropPages bool
}

// RetriedError is the failure of a request the kernel retries, answered
// at once from the first one's (already counted and logged).
type RetriedError struct{ Err error }

func (e *RetriedError) Error() string { return e.Err.Error() }
func (e *RetriedError) Unwrap() error { return e.Err }

// ReadAt returns the part of the feature a read of len(p) bytes at off
// sees (p receives a part the cache holds; a computed feature is returned
// as it is, not copied).
//
// A file's content is its own object version's (the kernel may hold the
// file past a relisting, until it drops the entry). A name that the fresh
// listing of its directory no longer has is gone (bucket.ErrNotFound).
// When the mount knows of a newer version, the file still serves its own
// version's bytes while they are at hand (just computed, or in the cache):
// a reader part way through the file, or the kernel's pages of it, hold
// some of them, and a file must never mix two versions' bytes; the name
// stands for the new version's file once the kernel drops the entry. Only
// when the own version's feature is gone (evicted, and the object no
// longer there to compute it from) does the file serve the newest version,
// with DropPages.
//
// A feature a read computed is kept in the namespace (Recent), and the
// file's next reads copy from it. Else a read the cache can answer copies
// just the part it asks for (features.Pipeline.ReadCachedAt: a feature
// prefetch just computed comes from its hand-off buffer, in memory).
// Otherwise it computes the whole feature (from the cache, the feature
// store or the model: concurrent reads of a file share one computation).
// A failure that took a while is kept there for the kernel's retry of the
// request (namespace.Namespace.ReadFailed), which then fails at once
// (RetriedError) instead of waiting out a second --read-timeout; a new
// read(2) tries again. The first read of a feature's content tells
// prefetch which layer directory a reader is in (metadata alone never
// does: ls, find, du and stat compute nothing).
func (f *Feature) ReadAt(ctx context.Context, p []byte, off int64) ([]byte, FeatureRead, error) {
	var r FeatureRead
	obj, ok := f.NS.CurrentVersion(f.Prefix, f.Name, f.Obj)
	if !ok {
		return nil, r, fmt.Errorf("%s%s: no longer listed: %w", f.Prefix, f.Name, bucket.ErrNotFound)
	}
	if obj.Key != f.Obj.Key || obj.ETag != f.Obj.ETag {
		if out, ok := f.held(f.Obj, p, off, &r); ok {
			return out, r, nil
		}
		r.DropPages = true
	}
	if out, ok := f.held(obj, p, off, &r); ok {
		return out, r, nil
	}
	data, err := f.content(ctx, obj, off, len(p))
	if err != nil {
		return nil, r, err
	}
	if nv, _, ok := f.P.NewerVersion(obj.Key); ok && nv.ETag != f.Obj.ETag {
		r.DropPages = true // the read found the object changed and served its new version
	}
	return SliceAt(data, len(p), off), r, nil
}

func (f *Feature) key(obj bucket.Object) namespace.FileKey {
	return namespace.FileKey{View: f.FV, Key: obj.Key, ETag: obj.ETag}
}

// held answers a read of the feature of obj from what is at hand,
// without computing: a feature a read of this file just computed (its
// next reads copy it from memory, not decompress it back out of the
// cache), or the part the cache holds. ok is false when neither has it.
func (f *Feature) held(obj bucket.Object, p []byte, off int64, r *FeatureRead) ([]byte, bool) {
	k := f.key(obj)
	if data, ok := f.NS.Recent(k); ok {
		f.P.Touch(f.FV, f.Prefix)
		f.NS.ReadDone(k, f.Prefix+f.Name, nil)
		r.Recent = true
		return SliceAt(data, len(p), off), true
	}
	if n, ok := f.P.ReadCachedAt(f.FV, obj, p, off); ok {
		f.P.Touch(f.FV, f.Prefix)
		f.NS.ReadDone(k, f.Prefix+f.Name, nil)
		return p[:n], true
	}
	return nil, false
}

// content returns the feature of obj for a request of size bytes at off:
// a recent result (a slow failure only for the kernel's retry of a
// request that failed: namespace.Namespace.Retry), else a computation of
// its own or one in flight for the same feature.
func (f *Feature) content(ctx context.Context, obj bucket.Object, off int64, size int) ([]byte, error) {
	k := f.key(obj)
	if data, ok := f.NS.Recent(k); ok {
		return data, nil
	}
	if err := f.NS.Retry(k, off); err != nil {
		return nil, &RetriedError{err}
	}
	t0 := time.Now()
	data, err := f.P.Read(ctx, f.FV, obj)
	f.P.Touch(f.FV, f.Prefix)
	if err != nil {
		// Interrupted: not this file's failure, and the computation goes
		// on for the reader's retry.
		if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
			f.NS.ReadFailed(k, f.Prefix+f.Name, off, size, err, t0)
		}
		return nil, err
	}
	f.NS.ReadDone(k, f.Prefix+f.Name, data)
	return data, nil
}

// Params returns a view file's parameters as JSON, the value of its
// augment.Xattr: the crop box in the image's pixels, the flip, the size,
// the seed and the view of an augmented view (the image is fetched for
// its header the first time, then remembered:
// features.Pipeline.ViewParams; no feature is computed), or the numbers of
// a feature-space view. A plain layer's file has none (nil, nil).
func (f *Feature) Params(ctx context.Context) ([]byte, error) {
	switch {
	case f.FV.FAug != nil:
		return json.Marshal(f.P.FeatureParams(f.FV, f.Obj))
	case f.FV.Aug == nil:
		return nil, nil
	}
	params, err := f.P.ViewParams(ctx, f.FV, f.Obj)
	if err != nil {
		return nil, err
	}
	return json.Marshal(params)
}
