package namespace

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/featurefs/featurefs/fs/naming"
)

// Listing is what featurefs knows of one bucket prefix: the entries decided
// so far and whether they are all of them. A listing being read grows page
// by page; readers of the cache see the entries decided so far (good for
// positive answers only) until it is complete. While it is incomplete, it
// keeps the complete listing it replaces (prev), so that lookups and
// directory reads can still answer from the last known state.
type Listing struct {
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
	prev     *Listing       // GUARDED_BY(mu): the complete listing this one replaces; nil once complete

	// checked is closed once the check the tree runs on a listing read from
	// the store (CheckOnce: the kernel's entries of feature files in this
	// directory made to agree with it) is done.
	checkOnce sync.Once
	checked   chan struct{}
}

// Prefix is the bucket prefix the listing is of ("" or "a/b/").
func (l *Listing) Prefix() string { return l.prefix }

// Find returns the entry called name, and whether the listing is complete
// (so that a miss means the name does not exist).
func (l *Listing) Find(name string) (e naming.Entry, found, complete bool) { return l.find(name) }

// Complete reports whether the listing has all the prefix's entries.
func (l *Listing) Complete() bool {
	_, complete := l.snapshot()
	return complete
}

// CheckOnce runs check the first time it is called on l (the tree's check
// of the kernel's cache against a listing read from the store), and
// closes Checked when it returns. A listing revived while the store fails
// comes already checked.
func (l *Listing) CheckOnce(check func()) {
	l.checkOnce.Do(func() {
		defer close(l.checked)
		check()
	})
}

// Checked is closed once CheckOnce's check is done.
func (l *Listing) Checked() <-chan struct{} { return l.checked }

func newListing(prefix string, at time.Time) *Listing {
	return &Listing{prefix: prefix, at: at, listedAt: at, byName: map[string]int{}, checked: make(chan struct{})}
}

// append adds entries and returns those added. The naming rule gives
// distinct names; a name already there (two shortened names whose hashes
// collide) is dropped, so that no listing repeats a name.
func (l *Listing) append(es []naming.Entry) []naming.Entry {
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
func (l *Listing) find(name string) (e naming.Entry, found, complete bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if i, ok := l.byName[name]; ok {
		return l.entries[i], true, l.complete
	}
	return naming.Entry{}, false, l.complete
}

// snapshot returns the entries and whether they are complete.
func (l *Listing) snapshot() ([]naming.Entry, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.entries, l.complete
}

// size returns the pages read and whether the listing is complete.
func (l *Listing) size() (pages int, complete bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pages, l.complete
}

func (l *Listing) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.entries)
}

// lastComplete returns l if it is complete, else the complete listing it
// replaces, if any.
func (l *Listing) lastComplete() *Listing {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.complete {
		return l
	}
	return l.prev
}

// cost is the listing's weight in the listing cache: its entries and those
// of the listing it still keeps.
func (l *Listing) cost() int {
	l.mu.Lock()
	n, prev := len(l.entries), l.prev
	l.mu.Unlock()
	if prev != nil {
		n += prev.len()
	}
	return max(1, n)
}

// markComplete makes the listing complete, dropping the one it replaces.
func (l *Listing) markComplete() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.complete = true
	l.prev = nil
}

// listStream reads a prefix page by page and records what it decides in a
// listing, publishing it in the listing cache as it grows. Not safe for
// concurrent use.
type listStream struct {
	ns    *Namespace
	l     *Listing
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
func (ns *Namespace) newListStream(prefix string) *listStream {
	l := newListing(prefix, ns.now())
	if o, ok := ns.listings.Get(prefix); ok {
		l.prev = o.lastComplete()
	}
	ns.listings.Put(prefix, l, l.cost())
	return &listStream{ns: ns, l: l, r: naming.NewResolver(ns.naming, prefix, ns.logRename)}
}

// revive publishes the replaced complete listing again after the store
// failed a page: the entries the mount already knew stay reachable (and
// cached features readable) while the store is down. The revived listing
// counts as fresh for another MetadataTTL, after which the store is asked
// again. It returns the revived listing, or nil when there is none.
func (s *listStream) revive(err error) *Listing {
	s.l.mu.Lock()
	old := s.l.prev
	s.l.failed = true
	s.l.prev = nil
	s.l.mu.Unlock()
	if old == nil {
		s.ns.listings.RemoveIf(s.l.prefix, func(l *Listing) bool { return l == s.l })
		return nil
	}
	es, _ := old.snapshot()
	pages, _ := old.size()
	r := newListing(s.l.prefix, s.ns.now())
	r.listedAt = old.listedAt
	r.append(es)
	r.pages = pages
	r.markComplete()
	// What the kernel holds came from this listing or an older one: nothing
	// to check.
	r.CheckOnce(func() {})
	if cur, ok := s.ns.listings.Get(s.l.prefix); !ok || cur == s.l {
		s.ns.listings.Put(s.l.prefix, r, r.cost())
	}
	s.ns.p.Journal().LogOnce(s.l.prefix, "listing failed; serving the last complete listing, read "+
		s.ns.now().Sub(old.listedAt).Round(time.Second).String()+" ago", err)
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
	lctx, cancel := s.ns.listCtx(ctx)
	p, err := s.ns.bucket.List(lctx, s.l.prefix, s.token)
	cancel()
	s.ns.counts.listPages.Add(1)
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
	es := s.l.append(s.ns.shownOnly(ctx, s.r.Add(p, complete)))
	if complete {
		s.done = true
		s.l.markComplete()
		if s.ns.listed != nil {
			s.ns.listed(s.l)
		}
	}
	s.handedOut = s.handedOut || len(es) > 0
	// Re-publish with the new cost; a listing larger than the whole cache
	// bound is dropped from it (lookups then Stat) but still streams.
	if cur, ok := s.ns.listings.Get(s.l.prefix); ok && cur == s.l {
		s.ns.listings.Put(s.l.prefix, s.l, s.l.cost())
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
func (ns *Namespace) fresh(l *Listing) bool {
	return ns.now().Sub(l.at) < ns.metadataTTL
}

// relist reads prefix's listing again, up to pages pages (0: all), in a run
// shared by concurrent lookups and directory reads (Namespace.lists). It returns
// the listing published at its end: the new one (complete, or partial when
// pages ran out), or, when the store failed, the last complete listing
// revived.
func (ns *Namespace) relist(prefix string, pages int) func(context.Context) (*Listing, error) {
	return func(ctx context.Context) (*Listing, error) {
		if l, ok := ns.listings.Get(prefix); ok && ns.fresh(l) {
			return l, nil // another lookup or readdir has just started one
		}
		s := ns.newListStream(prefix)
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
func (ns *Namespace) refreshStale(ctx context.Context, prefix string) *Listing {
	return ns.refreshListing(ctx, prefix, 0)
}

// refreshListing is refreshStale reading at most pages pages (0: all).
func (ns *Namespace) refreshListing(ctx context.Context, prefix string, pages int) *Listing {
	c := ns.lists.Start(ctx, prefix, ns.refreshSlot, func(ctx context.Context) (*Listing, error) {
		defer func() { <-ns.refreshing }()
		return ns.relist(prefix, pages)(ctx)
	})
	if c == nil {
		return nil
	}
	wait := ns.cfg.StaleGrace
	if ns.p.Health().Failing() {
		wait = min(wait, failingGrace)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	l, err := c.Wait(wctx)
	if err != nil {
		if ctx.Err() == nil && wctx.Err() != nil {
			ns.p.Health().Slow()
		}
		return nil
	}
	return l
}

// refreshSlot takes one of the background refresh slots, if one is free.
func (ns *Namespace) refreshSlot() bool {
	select {
	case ns.refreshing <- struct{}{}:
		return true
	default:
		return false
	}
}

// Revalidate returns prefix's listing no older than MetadataTTL: the cached
// one if fresh, else one read again now (all of it when a complete one was
// cached, else RelistPages pages), waited for up to StaleGrace as stale
// lookups wait. It returns nil when the store did not answer in time.
func (ns *Namespace) Revalidate(ctx context.Context, prefix string) *Listing {
	l, ok := ns.listings.Get(prefix)
	if ok && ns.fresh(l) {
		return l
	}
	pages := ns.cfg.RelistPages
	if ok && l.lastComplete() != nil {
		pages = 0
	}
	return ns.refreshListing(ctx, prefix, pages)
}

// DirReader reads one directory for a reader: a snapshot of a complete
// cached listing, or a stream reading the bucket page by page as the
// reader asks. Not safe for concurrent use.
type DirReader struct {
	entries []naming.Entry // the snapshot, handed out by the first Next
	stream  *listStream    // nil when serving a snapshot
	done    bool
}

// OpenDir starts reading prefix's directory: a fresh complete listing from
// the cache; for a stale one that was complete, the listing read again if
// the store answers within StaleGrace, else the stale one (see
// refreshStale); else a stream reading the bucket page by page.
func (ns *Namespace) OpenDir(ctx context.Context, prefix string) *DirReader {
	l, ok := ns.listings.Get(prefix)
	if ok && ns.fresh(l) {
		if es, complete := l.snapshot(); complete {
			return &DirReader{entries: es}
		}
	}
	if ok {
		// Stale, or being read again: the last complete listing, unless the
		// new one comes within the grace.
		if old := l.lastComplete(); old != nil {
			if nl := ns.refreshStale(ctx, prefix); nl != nil {
				if es, complete := nl.snapshot(); complete {
					return &DirReader{entries: es}
				}
			}
			es, _ := old.snapshot()
			return &DirReader{entries: es}
		}
	}
	return &DirReader{stream: ns.newListStream(prefix)}
}

// Done reports whether the reader has handed out every entry.
func (r *DirReader) Done() bool {
	if r.stream != nil {
		return r.stream.done
	}
	return r.done
}

// Next returns the next entries: the snapshot, or those a page newly
// decided (possibly none while the directory is not done; see listStream).
func (r *DirReader) Next(ctx context.Context) ([]naming.Entry, error) {
	if r.stream != nil {
		return r.stream.next(ctx)
	}
	if r.done {
		return nil, nil
	}
	r.done = true
	return r.entries, nil
}
