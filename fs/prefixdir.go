package fs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/featurefs/featurefs/fs/bucket"
)

// prefixDir is a bucket prefix seen through one layer:
// features/<model>/<layer>/<prefix>. It holds no listing itself; listings
// live in the FS's listing cache, shared by all models and layers.
type prefixDir struct {
	gofs.Inode
	readOnly
	fs     *FS
	view   *layerView
	prefix string // "" or "a/b/"
}

var _ = (gofs.NodeGetattrer)((*prefixDir)(nil))
var _ = (gofs.NodeLookuper)((*prefixDir)(nil))
var _ = (gofs.NodeOpendirHandler)((*prefixDir)(nil))

// Getattr reports a read-only directory.
func (d *prefixDir) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	d.fs.dirAttr(&out.Attr)
	return 0
}

// Lookup finds a subdirectory or feature file.
func (d *prefixDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	d.fs.stats.lookups.Add(1)
	e, err := d.fs.lookupEntry(ctx, d.prefix, name)
	if err != nil {
		return nil, d.fs.errno(err, d.prefix+name)
	}
	return d.child(ctx, e, &out.Attr), 0
}

// child returns the inode of an entry, filling its attributes.
func (d *prefixDir) child(ctx context.Context, e dirEntry, attr *fuse.Attr) *gofs.Inode {
	if e.dir {
		d.fs.dirAttr(attr)
		sub := &prefixDir{fs: d.fs, view: d.view, prefix: d.prefix + e.name + "/"}
		return d.NewInode(ctx, sub, gofs.StableAttr{Mode: syscall.S_IFDIR, Ino: d.view.dirIno(sub.prefix)})
	}
	fileAttr(attr, d.view.size, e.obj.ModTime)
	ff := &featureFile{fs: d.fs, view: d.view, prefix: d.prefix, name: e.name, obj: e.obj}
	return d.NewInode(ctx, ff, gofs.StableAttr{Mode: syscall.S_IFREG, Ino: d.view.fileIno(e.obj.Key, e.obj.ETag)})
}

// entryIno is the inode number readdir reports for an entry.
func (d *prefixDir) entryIno(e dirEntry) uint64 {
	if e.dir {
		return d.view.dirIno(d.prefix + e.name + "/")
	}
	return d.view.fileIno(e.obj.Key, e.obj.ETag)
}

// OpendirHandle starts a listing: from the cache when a complete one is
// fresh, else streamed from the bucket page by page as the reader asks.
func (d *prefixDir) OpendirHandle(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	h := &dirHandle{d: d}
	h.start(ctx)
	return h, 0, 0
}

// lookupEntry answers a lookup of name under prefix, within ReadTimeout as
// a whole:
//   - from a fresh listing that has the name or is complete;
//   - for a stale listing that was complete, from the listing read again
//     if the store answers within StaleGrace, else from the stale listing
//     (the new one is read in the background);
//   - without a listing to fall back on, from a listing read now (shared by
//     concurrent lookups, at most RelistPages pages), else by Stat calls.
//
// A name is missing only if a complete listing lacks it or Stat says so.
func (f *FS) lookupEntry(ctx context.Context, prefix, name string) (dirEntry, error) {
	if !validName(name) {
		return dirEntry{}, fmt.Errorf("%q: %w", name, bucket.ErrNotFound)
	}
	ctx, cancel := f.listCtx(ctx)
	defer cancel()
	l, ok := f.listings.Get(prefix)
	var last *listing // the last complete listing, if any
	if ok {
		last = l.lastComplete()
	}
	switch {
	case ok && f.fresh(l):
		if e, found, complete := l.find(name); found || complete {
			return f.answer(prefix, name, e, found)
		}
		// Fresh but incomplete: being read page by page, or too large to
		// keep whole. A name the last complete listing had is still there
		// most likely; any other is asked of the store, unless the store is
		// failing: then the last complete listing answers.
		if last != nil {
			if e, found, _ := last.find(name); found || f.health.failing() {
				return f.answer(prefix, name, e, found)
			}
		}
		return f.statLookup(ctx, prefix, name)
	case last != nil:
		if nl := f.refreshStale(ctx, prefix); nl != nil {
			if e, found, complete := nl.find(name); found || complete {
				return f.answer(prefix, name, e, found)
			}
		}
		e, found, _ := last.find(name)
		return f.answer(prefix, name, e, found)
	}
	l, err := f.lists.do(ctx, prefix, f.relist(prefix, f.cfg.RelistPages))
	if err != nil {
		return dirEntry{}, err
	}
	if e, found, complete := l.find(name); found || complete {
		return f.answer(prefix, name, e, found)
	}
	return f.statLookup(ctx, prefix, name)
}

// answer is a lookup's result from a listing that has the name or is
// complete.
func (f *FS) answer(prefix, name string, e dirEntry, found bool) (dirEntry, error) {
	if !found {
		return dirEntry{}, fmt.Errorf("%s%s: %w", prefix, name, bucket.ErrNotFound)
	}
	return e, nil
}

// statLookup answers a lookup without a complete listing. A name without
// .npy is a directory if its prefix lists anything; NAME.npy is the object
// NAME.<ext> if it is the only image object of stem NAME, or the object NAME
// (an image) if another image object shares its stem.
func (f *FS) statLookup(ctx context.Context, prefix, name string) (dirEntry, error) {
	f.stats.statLookups.Add(1)
	base, isFile := strings.CutSuffix(name, npyExt)
	if !isFile || base == "" {
		lctx, cancel := f.listCtx(ctx)
		p, err := f.cfg.Bucket.List(lctx, prefix+name+"/", "")
		cancel()
		f.stats.listPages.Add(1)
		if err != nil {
			return dirEntry{}, fmt.Errorf("listing %q: %w", prefix+name+"/", err)
		}
		if len(p.Prefixes)+len(p.Objects) > 0 {
			return dirEntry{name: name, dir: true}, nil
		}
		return dirEntry{}, fmt.Errorf("%s%s: %w", prefix, name, bucket.ErrNotFound)
	}
	short := f.naming.candidates(prefix + base)
	keys := append([]string(nil), short...)
	var siblings []string
	stem, long := f.naming.split(base)
	if long {
		keys = append(keys, prefix+base)
		for _, k := range f.naming.candidates(prefix + stem) {
			if k != prefix+base {
				siblings = append(siblings, k)
			}
		}
		keys = append(keys, siblings...)
	}
	found, err := f.statAll(ctx, keys)
	if err != nil {
		return dirEntry{}, err
	}
	if long {
		if o, ok := found[prefix+base]; ok {
			for _, k := range siblings {
				if _, ok := found[k]; ok {
					return dirEntry{name: name, obj: o}, nil
				}
			}
		}
	}
	var only []bucket.Object
	for _, k := range short {
		if o, ok := found[k]; ok {
			only = append(only, o)
		}
	}
	if len(only) == 1 {
		return dirEntry{name: name, obj: only[0]}, nil
	}
	return dirEntry{}, fmt.Errorf("%s%s: %w", prefix, name, bucket.ErrNotFound)
}

// statAll Stats keys in parallel (bounded for all lookups together) and
// returns those that exist. Any error other than not-found fails the lookup:
// a missing answer is not a negative one.
func (f *FS) statAll(ctx context.Context, keys []string) (map[string]bucket.Object, error) {
	var (
		mu    sync.Mutex
		found = map[string]bucket.Object{}
		errs  []error
		wg    sync.WaitGroup
		done  = map[string]bool{}
	)
	for _, k := range keys {
		if done[k] {
			continue
		}
		done[k] = true
		select {
		case f.statSem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return nil, ctx.Err()
		}
		wg.Go(func() {
			defer func() { <-f.statSem }()
			sctx, cancel := f.listCtx(ctx)
			o, err := f.cfg.Bucket.Stat(sctx, k)
			cancel()
			f.stats.stats.Add(1)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				if o.Key == "" {
					o.Key = k
				}
				found[k] = o
			case !errors.Is(err, bucket.ErrNotFound):
				errs = append(errs, fmt.Errorf("stat %q: %w", k, err))
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return found, nil
}

// dirHandle is one open directory: a snapshot of a complete cached listing,
// or a stream reading the bucket page by page.
type dirHandle struct {
	d *prefixDir

	mu      sync.Mutex
	entries []dirEntry  // GUARDED_BY(mu): entries to hand out from pos
	pos     int         // GUARDED_BY(mu)
	off     uint64      // GUARDED_BY(mu): entries handed out so far
	stream  *listStream // GUARDED_BY(mu): nil when serving a cached listing
}

var _ = (gofs.FileReaddirenter)((*dirHandle)(nil))
var _ = (gofs.FileSeekdirer)((*dirHandle)(nil))
var _ = (gofs.FileReleasedirer)((*dirHandle)(nil))

// start (re)opens the listing: a fresh complete listing from the cache; for
// a stale one that was complete, the listing read again if the store answers
// within StaleGrace, else the stale one (see FS.refreshStale); else a stream
// reading the bucket page by page as the reader asks. Callers hold mu or own
// h.
func (h *dirHandle) start(ctx context.Context) {
	f := h.d.fs
	h.entries, h.pos, h.off, h.stream = nil, 0, 0, nil
	l, ok := f.listings.Get(h.d.prefix)
	if ok && f.fresh(l) {
		if es, complete := l.snapshot(); complete {
			h.entries = es
			return
		}
	}
	if ok {
		// Stale, or being read again: the last complete listing, unless the
		// new one comes within the grace.
		if old := l.lastComplete(); old != nil {
			if nl := f.refreshStale(ctx, h.d.prefix); nl != nil {
				if es, complete := nl.snapshot(); complete {
					h.entries = es
					return
				}
			}
			h.entries, _ = old.snapshot()
			return
		}
	}
	h.stream = f.newListStream(h.d.prefix)
}

// Readdirent returns the next entry, reading another page when needed.
func (h *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for h.pos >= len(h.entries) {
		if h.stream == nil || h.stream.done {
			return nil, 0
		}
		es, err := h.stream.next(ctx)
		if err != nil {
			return nil, h.d.fs.errno(err, h.d.prefix)
		}
		h.entries, h.pos = es, 0
	}
	e := h.entries[h.pos]
	h.pos++
	h.off++
	mode := uint32(syscall.S_IFREG)
	if e.dir {
		mode = syscall.S_IFDIR
	}
	return &fuse.DirEntry{Name: e.name, Mode: mode, Ino: h.d.entryIno(e), Off: h.off}, 0
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
	h.entries, h.stream = nil, nil
}
