package fs

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/featurefs/featurefs/fs/naming"
)

// listing is what featurefs knows of one bucket prefix: the entries decided
// so far and whether they are all of them. A listing being read grows page
// by page; readers of the cache see the entries decided so far (good for
// positive answers only) until it is complete. While it is incomplete, it
// keeps the complete listing it replaces (prev), so that lookups and
// directory reads can still answer from the last known state.
type listing struct {
	prefix string    // constant
	at     time.Time // constant: when listing started (freshness)
	// listedAt is when its entries were read from the store: at, or for a
	// listing served again while the store fails, the original's. Constant.
	listedAt time.Time

	mu       sync.Mutex
	entries  []naming.Entry // GUARDED_BY(mu), in the order decided
	byName   map[string]int // GUARDED_BY(mu), index into entries
	complete bool           // GUARDED_BY(mu)
	failed   bool           // GUARDED_BY(mu): a page failed; never complete
	pages    int            // GUARDED_BY(mu): pages read
	prev     *listing       // GUARDED_BY(mu): the complete listing this one replaces; nil once complete

	// checked is closed once the kernel's entries of feature files in this
	// directory agree with the listing (FS.checkKernel, run once).
	checkOnce sync.Once
	checked   chan struct{}
}

func newListing(prefix string, at time.Time) *listing {
	return &listing{prefix: prefix, at: at, listedAt: at, byName: map[string]int{}, checked: make(chan struct{})}
}

// append adds entries and returns those added. The naming rule gives
// distinct names; a name already there (two shortened names whose hashes
// collide) is dropped, so that no listing repeats a name.
func (l *listing) append(es []naming.Entry) []naming.Entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	added := es[:0:0]
	for _, e := range es {
		if _, dup := l.byName[e.Name]; dup {
			continue
		}
		l.byName[e.Name] = len(l.entries)
		l.entries = append(l.entries, e)
		added = append(added, e)
	}
	return added
}

// find returns the entry called name, and whether the listing is complete
// (so that a miss means the name does not exist).
func (l *listing) find(name string) (e naming.Entry, found, complete bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if i, ok := l.byName[name]; ok {
		return l.entries[i], true, l.complete
	}
	return naming.Entry{}, false, l.complete
}

// snapshot returns the entries and whether they are complete.
func (l *listing) snapshot() ([]naming.Entry, bool) {
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

// lastComplete returns l if it is complete, else the complete listing it
// replaces, if any.
func (l *listing) lastComplete() *listing {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.complete {
		return l
	}
	return l.prev
}

// cost is the listing's weight in the listing cache: its entries and those
// of the listing it still keeps.
func (l *listing) cost() int {
	l.mu.Lock()
	n, prev := len(l.entries), l.prev
	l.mu.Unlock()
	if prev != nil {
		n += prev.len()
	}
	return max(1, n)
}

// markComplete makes the listing complete, dropping the one it replaces.
func (l *listing) markComplete() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.complete = true
	l.prev = nil
}

// listStream reads a prefix page by page and records what it decides in a
// listing, publishing it in the listing cache as it grows. Not safe for
// concurrent use.
type listStream struct {
	fs    *FS
	l     *listing
	r     *naming.Resolver
	token string
	done  bool
	// handedOut is whether next has returned any entry yet.
	handedOut bool
	// err is the failure that ended a stream after it had handed out
	// entries and its listing was revived: every later next returns it.
	err error
}

// newListStream starts reading prefix again; the listing it publishes keeps
// the last complete listing of prefix until it is complete itself.
func (f *FS) newListStream(prefix string) *listStream {
	l := newListing(prefix, f.now())
	if o, ok := f.listings.Get(prefix); ok {
		l.prev = o.lastComplete()
	}
	f.listings.Put(prefix, l, l.cost())
	return &listStream{fs: f, l: l, r: naming.NewResolver(f.naming, prefix, f.logRename)}
}

// listCtx bounds one List or Stat call, or one whole lookup, by ReadTimeout
// (a stalled store fails the lookup or readdir with EIO then, not after the
// SDK's own timeouts and retries).
func (f *FS) listCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if f.readTimeout > 0 {
		return context.WithTimeout(ctx, f.readTimeout)
	}
	return ctx, func() {}
}

// revive publishes the replaced complete listing again after the store
// failed a page: the entries the mount already knew stay reachable (and
// cached features readable) while the store is down. The revived listing
// counts as fresh for another MetadataTTL, after which the store is asked
// again. It returns the revived listing, or nil when there is none.
func (s *listStream) revive(err error) *listing {
	s.l.mu.Lock()
	old := s.l.prev
	s.l.failed = true
	s.l.prev = nil
	s.l.mu.Unlock()
	if old == nil {
		s.fs.listings.RemoveIf(s.l.prefix, func(l *listing) bool { return l == s.l })
		return nil
	}
	es, _ := old.snapshot()
	pages, _ := old.size()
	r := newListing(s.l.prefix, s.fs.now())
	r.listedAt = old.listedAt
	r.append(es)
	r.pages = pages
	r.markComplete()
	// What the kernel holds came from this listing or an older one: nothing
	// to check.
	r.checkOnce.Do(func() { close(r.checked) })
	if cur, ok := s.fs.listings.Get(s.l.prefix); !ok || cur == s.l {
		s.fs.listings.Put(s.l.prefix, r, r.cost())
	}
	s.fs.journal.LogOnce(s.l.prefix, "listing failed; serving the last complete listing, read "+
		s.fs.now().Sub(old.listedAt).Round(time.Second).String()+" ago", err)
	return r
}

// next reads one more page; it returns the entries newly decided, or none
// when the listing is complete. When the store fails and the listing this
// one replaces was complete, that listing is served again (revive): next
// returns its entries if it had handed out none yet, else the error.
func (s *listStream) next(ctx context.Context) ([]naming.Entry, error) {
	if s.err != nil {
		return nil, s.err
	}
	if s.done {
		return nil, nil
	}
	lctx, cancel := s.fs.listCtx(ctx)
	p, err := s.fs.bucket.List(lctx, s.l.prefix, s.token)
	cancel()
	s.fs.stats.listPages.Add(1)
	if err == nil && p.Next != "" && p.Next == s.token {
		err = fmt.Errorf("the bucket returned the same continuation token twice")
	}
	if err != nil {
		err = fmt.Errorf("listing %q: %w", s.l.prefix, err)
		if r := s.revive(err); r != nil {
			s.l = r
			if !s.handedOut {
				s.done, s.handedOut = true, true
				es, _ := r.snapshot()
				return es, nil
			}
			s.err = err // entries of the failed read are out: no mixing
		}
		return nil, err
	}
	s.token = p.Next
	complete := p.Next == ""
	s.l.mu.Lock()
	s.l.pages++
	s.l.mu.Unlock()
	es := s.l.append(s.fs.shownOnly(ctx, s.r.Add(p, complete)))
	if complete {
		s.done = true
		s.l.markComplete()
		s.fs.listed(s.l)
	}
	s.handedOut = s.handedOut || len(es) > 0
	// Re-publish with the new cost; a listing larger than the whole cache
	// bound is dropped from it (lookups then Stat) but still streams.
	if cur, ok := s.fs.listings.Get(s.l.prefix); ok && cur == s.l {
		s.fs.listings.Put(s.l.prefix, s.l, s.l.cost())
	}
	return es, nil
}

// all reads the stream to the end, or up to maxPages more pages (0: no
// bound); it returns whether the listing is complete.
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
	return f.now().Sub(l.at) < f.metadataTTL
}

// relist reads prefix's listing again, up to pages pages (0: all), in a run
// shared by concurrent lookups and directory reads (FS.lists). It returns
// the listing published at its end: the new one (complete, or partial when
// pages ran out), or, when the store failed, the last complete listing
// revived.
func (f *FS) relist(prefix string, pages int) func(context.Context) (*listing, error) {
	return func(ctx context.Context) (*listing, error) {
		if l, ok := f.listings.Get(prefix); ok && f.fresh(l) {
			return l, nil // another lookup or readdir has just started one
		}
		s := f.newListStream(prefix)
		if _, err := s.all(ctx, pages); err != nil {
			return nil, err
		}
		return s.l, nil
	}
}

// refreshStale starts reading again a prefix whose cached listing is stale
// but was complete (the caller answers from that one otherwise), and waits
// for the new listing up to Config.StaleGrace, or, while the store is
// failing, only long enough for a store that is back to answer
// (failingGrace). Background refreshes are bounded (maxRefreshes); the read
// goes on after the caller stops waiting and publishes its result in the
// cache. It returns the new listing if it came in time, else nil.
func (f *FS) refreshStale(ctx context.Context, prefix string) *listing {
	return f.refreshListing(ctx, prefix, 0)
}

// refreshListing is refreshStale reading at most pages pages (0: all).
func (f *FS) refreshListing(ctx context.Context, prefix string, pages int) *listing {
	c := f.lists.Start(ctx, prefix, f.refreshSlot, func(ctx context.Context) (*listing, error) {
		defer func() { <-f.refreshing }()
		return f.relist(prefix, pages)(ctx)
	})
	if c == nil {
		return nil
	}
	wait := f.cfg.StaleGrace
	if f.p.Health().Failing() {
		wait = min(wait, failingGrace)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	l, err := c.Wait(wctx)
	if err != nil {
		if ctx.Err() == nil && wctx.Err() != nil {
			f.p.Health().Slow()
		}
		return nil
	}
	return l
}

// refreshSlot takes one of the background refresh slots, if one is free.
func (f *FS) refreshSlot() bool {
	select {
	case f.refreshing <- struct{}{}:
		return true
	default:
		return false
	}
}
