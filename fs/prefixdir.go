package fs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/naming"
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

// Lookup finds a subdirectory or feature file. The kernel looks a
// subdirectory up again when a path walk passes through it after
// MetadataTTL: the feature files it holds there are then checked against a
// fresh listing before the walk goes on (FS.revalidateDir).
func (d *prefixDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	d.fs.stats.lookups.Add(1)
	e, err := d.fs.lookupEntry(ctx, d.prefix, name)
	if err != nil {
		return nil, d.fs.errno(err, d.prefix+name)
	}
	if e.Dir {
		d.fs.revalidateDir(ctx, e.Sub)
	}
	return d.child(ctx, e, out), 0
}

// child returns the inode of an entry (the one the kernel already has when
// it is the same node), filling its attributes and, for a feature file, its
// kernel timeouts (FS.fileTimeout; directories keep the mount's).
func (d *prefixDir) child(ctx context.Context, e naming.Entry, out *fuse.EntryOut) *gofs.Inode {
	id := gofs.StableAttr{Mode: syscall.S_IFREG, Ino: d.entryIno(e)}
	if e.Dir {
		id.Mode = syscall.S_IFDIR
		d.fs.dirAttr(&out.Attr)
	} else {
		fileAttr(&out.Attr, d.view.Size, e.Obj.ModTime)
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
	return d.NewInode(ctx, &featureFile{fs: d.fs, noOpen: noOpen{d.fs}, view: d.view, prefix: d.prefix, name: e.Name, obj: e.Obj}, id)
}

// entryIno is the inode number readdir reports for an entry.
func (d *prefixDir) entryIno(e naming.Entry) uint64 {
	if e.Dir {
		return d.view.dirIno(e.Sub)
	}
	return d.view.fileIno(e.Obj.Key, e.Obj.ETag)
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
func (f *FS) lookupEntry(ctx context.Context, prefix, name string) (naming.Entry, error) {
	if !naming.ValidName(name) {
		return naming.Entry{}, fmt.Errorf("%q: %w", name, bucket.ErrNotFound)
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
			if e, found, _ := last.find(name); found || f.p.Health().Failing() {
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
	l, err := f.lists.Do(ctx, prefix, f.relist(prefix, f.cfg.RelistPages))
	if err != nil {
		return naming.Entry{}, err
	}
	if e, found, complete := l.find(name); found || complete {
		return f.answer(prefix, name, e, found)
	}
	return f.statLookup(ctx, prefix, name)
}

// answer is a lookup's result from a listing that has the name or is
// complete.
func (f *FS) answer(prefix, name string, e naming.Entry, found bool) (naming.Entry, error) {
	if !found {
		return naming.Entry{}, fmt.Errorf("%s%s: %w", prefix, name, bucket.ErrNotFound)
	}
	return e, nil
}

// statLookup answers a lookup without a complete listing: it Stats the
// keys and lists the prefixes that decide what name stands for (naming's
// probeFor) and applies the rule to what exists, as a listing would. A
// shortened name cannot be reversed: it is looked up in a complete listing.
func (f *FS) statLookup(ctx context.Context, prefix, name string) (naming.Entry, error) {
	f.stats.statLookups.Add(1)
	p, ok := f.naming.Probe(prefix, name)
	if !ok {
		return f.fullListingLookup(ctx, prefix, name)
	}
	objs, dirs, err := f.probe(ctx, p)
	if err != nil {
		return naming.Entry{}, err
	}
	if e, ok := f.naming.Resolve(prefix, name, objs, dirs, f.logRename); ok && (!e.Dir || f.dirShown(ctx, e.Sub)) {
		return e, nil
	}
	return naming.Entry{}, fmt.Errorf("%s%s: %w", prefix, name, bucket.ErrNotFound)
}

// fullListingLookup finds name in a complete listing of prefix: the cached
// one if fresh, else one read to the end now (shared by concurrent
// lookups; the caller stops waiting when ctx ends).
func (f *FS) fullListingLookup(ctx context.Context, prefix, name string) (naming.Entry, error) {
	l, err := f.lists.Do(ctx, "\x00complete\x00"+prefix, func(ctx context.Context) (*listing, error) {
		if l, ok := f.listings.Get(prefix); ok && f.fresh(l) {
			if _, complete := l.snapshot(); complete {
				return l, nil
			}
		}
		s := f.newListStream(prefix)
		if _, err := s.all(ctx, 0); err != nil {
			return nil, err
		}
		return s.l, nil
	})
	if err != nil {
		return naming.Entry{}, err
	}
	if e, found, _ := l.find(name); found {
		return e, nil
	}
	return naming.Entry{}, fmt.Errorf("%s%s: %w", prefix, name, bucket.ErrNotFound)
}

// probe Stats p.keys and lists p.dirs in parallel (bounded for all lookups
// together); it returns the objects that exist and the prefixes that hold
// anything. Any error other than not-found fails the lookup: a missing
// answer is not a negative one.
func (f *FS) probe(ctx context.Context, p naming.Probe) ([]bucket.Object, []string, error) {
	var (
		mu   sync.Mutex
		objs []bucket.Object
		dirs []string
		errs []error
		wg   sync.WaitGroup
		done = map[string]bool{}
	)
	run := func(k string, fn func(ctx context.Context) error) bool {
		if done[k] {
			return true
		}
		done[k] = true
		select {
		case f.statSem <- struct{}{}:
		case <-ctx.Done():
			return false
		}
		wg.Go(func() {
			defer func() { <-f.statSem }()
			sctx, cancel := f.listCtx(ctx)
			defer cancel()
			if err := fn(sctx); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
		return true
	}
	for _, k := range p.Keys {
		ok := run(k, func(ctx context.Context) error {
			o, err := f.bucket.Stat(ctx, k)
			f.stats.stats.Add(1)
			switch {
			case errors.Is(err, bucket.ErrNotFound):
				return nil
			case err != nil:
				return fmt.Errorf("stat %q: %w", k, err)
			}
			if o.Key == "" {
				o.Key = k
			}
			mu.Lock()
			objs = append(objs, o)
			mu.Unlock()
			return nil
		})
		if !ok {
			wg.Wait()
			return nil, nil, ctx.Err()
		}
	}
	for _, d := range p.Dirs {
		ok := run(d, func(ctx context.Context) error {
			pg, err := f.bucket.List(ctx, d, "")
			f.stats.listPages.Add(1)
			switch {
			case errors.Is(err, bucket.ErrNotFound):
				return nil
			case err != nil:
				return fmt.Errorf("listing %q: %w", d, err)
			}
			if len(pg.Prefixes)+len(pg.Objects) > 0 {
				mu.Lock()
				dirs = append(dirs, d)
				mu.Unlock()
			}
			return nil
		})
		if !ok {
			wg.Wait()
			return nil, nil, ctx.Err()
		}
	}
	wg.Wait()
	if len(errs) > 0 {
		return nil, nil, errors.Join(errs...)
	}
	return objs, dirs, nil
}

// dirHandle is one open directory: a snapshot of a complete cached listing,
// or a stream reading the bucket page by page.
type dirHandle struct {
	d *prefixDir

	mu      sync.Mutex
	entries []naming.Entry // GUARDED_BY(mu): entries to hand out from pos
	pos     int            // GUARDED_BY(mu)
	off     uint64         // GUARDED_BY(mu): entries handed out so far
	stream  *listStream    // GUARDED_BY(mu): nil when serving a cached listing
	last    naming.Entry   // GUARDED_BY(mu): the entry Readdirent returned last
	hasLast bool           // GUARDED_BY(mu)
}

var _ = (gofs.FileReaddirenter)((*dirHandle)(nil))
var _ = (gofs.FileLookuper)((*dirHandle)(nil))
var _ = (gofs.FileSeekdirer)((*dirHandle)(nil))
var _ = (gofs.FileReleasedirer)((*dirHandle)(nil))

// start (re)opens the listing: a fresh complete listing from the cache; for
// a stale one that was complete, the listing read again if the store answers
// within StaleGrace, else the stale one (see FS.refreshStale); else a stream
// reading the bucket page by page as the reader asks. Callers hold mu or own
// h.
func (h *dirHandle) start(ctx context.Context) {
	f := h.d.fs
	h.entries, h.pos, h.off, h.stream, h.hasLast = nil, 0, 0, nil, false
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
	h.last, h.hasLast = e, true
	mode := uint32(syscall.S_IFREG)
	if e.Dir {
		mode = syscall.S_IFDIR
	}
	return &fuse.DirEntry{Name: e.Name, Mode: mode, Ino: h.d.entryIno(e), Off: h.off}, 0
}

// Lookup answers READDIRPLUS's lookup of the entry Readdirent has just
// returned, from that entry: the listing is not searched again, and a
// subdirectory's own listing is not read (listing a directory lists none of
// its subdirectories). Any other name (go-fuse replaying an interrupted
// READDIRPLUS) is looked up as usual.
func (h *dirHandle) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	h.mu.Lock()
	e, ok := h.last, h.hasLast && h.last.Name == name
	h.mu.Unlock()
	if !ok {
		var err error
		if e, err = h.d.fs.lookupEntry(ctx, h.d.prefix, name); err != nil {
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
	h.entries, h.stream, h.hasLast = nil, nil, false
}
