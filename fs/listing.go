package fs

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// listing is what featurefs knows of one bucket prefix: the entries decided
// so far and whether they are all of them. A listing being read grows page
// by page; readers of the cache see the entries decided so far (good for
// positive answers only) until it is complete.
type listing struct {
	prefix string    // constant
	at     time.Time // constant: when listing started

	mu       sync.Mutex
	entries  []dirEntry     // GUARDED_BY(mu), in the order decided
	byName   map[string]int // GUARDED_BY(mu), index into entries
	complete bool           // GUARDED_BY(mu)
	failed   bool           // GUARDED_BY(mu): a page failed; never complete
	pages    int            // GUARDED_BY(mu): pages read
}

func newListing(prefix string, at time.Time) *listing {
	return &listing{prefix: prefix, at: at, byName: map[string]int{}}
}

// append adds entries and returns those added. The naming rule gives
// distinct names; a name already there (two shortened names whose hashes
// collide) is dropped, so that no listing repeats a name.
func (l *listing) append(es []dirEntry) []dirEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	added := es[:0:0]
	for _, e := range es {
		if _, dup := l.byName[e.name]; dup {
			continue
		}
		l.byName[e.name] = len(l.entries)
		l.entries = append(l.entries, e)
		added = append(added, e)
	}
	return added
}

// find returns the entry called name, and whether the listing is complete
// (so that a miss means the name does not exist).
func (l *listing) find(name string) (e dirEntry, found, complete bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if i, ok := l.byName[name]; ok {
		return l.entries[i], true, l.complete
	}
	return dirEntry{}, false, l.complete
}

// snapshot returns the entries and whether they are complete.
func (l *listing) snapshot() ([]dirEntry, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.entries, l.complete
}

// size returns the pages read and whether the listing is complete.
func (l *listing) size() (pages int, complete bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pages, l.complete
}

func (l *listing) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.entries)
}

// listStream reads a prefix page by page and records what it decides in a
// listing, publishing it in the listing cache as it grows. Not safe for
// concurrent use.
type listStream struct {
	fs    *FS
	l     *listing
	r     *resolver
	token string
	done  bool
	// old is the listing this one replaces, if it was complete: served
	// again when the store fails the first page (stale while unreachable).
	old *listing
	// buf holds entries decided but not yet handed out.
	buf []dirEntry
}

func (f *FS) newListStream(prefix string) *listStream {
	var old *listing
	if o, ok := f.listings.Get(prefix); ok {
		if _, complete := o.snapshot(); complete {
			old = o
		}
	}
	l := newListing(prefix, f.now())
	f.listings.Put(prefix, l, 1)
	return &listStream{fs: f, l: l, r: newResolver(f.naming, prefix, f.logRename), old: old}
}

// listCtx bounds one List or Stat call by ReadTimeout (a stalled store
// fails the lookup or readdir with EIO then, not after the SDK's own
// timeouts and retries).
func (f *FS) listCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if f.cfg.ReadTimeout > 0 {
		return context.WithTimeout(ctx, f.cfg.ReadTimeout)
	}
	return ctx, func() {}
}

// reviveOld serves the replaced complete listing again after the store
// failed the first page: the entries the mount already knew stay
// reachable (and cached features readable) while the store is down. The
// revived listing counts as fresh for another MetadataTTL, after which the
// store is asked again.
func (s *listStream) reviveOld(err error) ([]dirEntry, bool) {
	if s.old == nil || s.token != "" || s.l.len() > 0 {
		return nil, false
	}
	es, _ := s.old.snapshot()
	pages, _ := s.old.size()
	s.l.append(es)
	s.done = true
	s.l.mu.Lock()
	s.l.pages = pages
	s.l.complete = true
	s.l.mu.Unlock()
	s.fs.listings.Put(s.l.prefix, s.l, max(1, len(es)))
	s.fs.logOnce(s.l.prefix, "listing failed; serving the last complete listing, from "+
		s.fs.now().Sub(s.old.at).Round(time.Second).String()+" ago", err)
	return es, true
}

// next reads one more page; it returns the entries newly decided, or done
// when the listing is complete.
func (s *listStream) next(ctx context.Context) ([]dirEntry, error) {
	if s.done {
		return nil, nil
	}
	lctx, cancel := s.fs.listCtx(ctx)
	p, err := s.fs.cfg.Bucket.List(lctx, s.l.prefix, s.token)
	cancel()
	s.fs.stats.listPages.Add(1)
	if err != nil {
		if es, ok := s.reviveOld(err); ok {
			return es, nil
		}
		s.l.mu.Lock()
		s.l.failed = true
		s.l.mu.Unlock()
		s.fs.listings.RemoveIf(s.l.prefix, func(l *listing) bool { return l == s.l })
		return nil, fmt.Errorf("listing %q: %w", s.l.prefix, err)
	}
	if p.Next != "" && p.Next == s.token {
		return nil, fmt.Errorf("listing %q: the bucket returned the same continuation token twice", s.l.prefix)
	}
	s.token = p.Next
	complete := p.Next == ""
	s.l.mu.Lock()
	s.l.pages++
	s.l.mu.Unlock()
	es := s.l.append(s.r.add(p, complete))
	n := s.l.len()
	if complete {
		s.done = true
		s.l.mu.Lock()
		s.l.complete = true
		s.l.mu.Unlock()
	}
	// Re-publish with the new cost; a listing larger than the whole cache
	// bound is dropped from it (lookups then Stat) but still streams.
	if cur, ok := s.fs.listings.Get(s.l.prefix); ok && cur == s.l {
		s.fs.listings.Put(s.l.prefix, s.l, n)
	}
	return es, nil
}

// all reads the stream to the end, or up to maxPages more pages; it returns
// whether the listing is complete.
func (s *listStream) all(ctx context.Context, maxPages int) (bool, error) {
	for i := 0; !s.done && (maxPages <= 0 || i < maxPages); i++ {
		if _, err := s.next(ctx); err != nil {
			return false, err
		}
	}
	return s.done, nil
}

// fresh reports whether a listing started less than MetadataTTL ago.
func (f *FS) fresh(l *listing) bool {
	return f.now().Sub(l.at) < f.cfg.MetadataTTL
}
