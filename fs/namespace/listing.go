package namespace

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/featurefs/featurefs/fs/bucket"
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

	// maxBytes and maxEntries bound what the listing keeps (the listing
	// cache's bounds): past either, it keeps no entry (overflow). Constant.
	maxBytes   int64
	maxEntries int

	mu       sync.Mutex
	p        packed   // GUARDED_BY(mu): the entries, in the order decided
	overflow bool     // GUARDED_BY(mu): too large to keep; never complete
	complete bool     // GUARDED_BY(mu)
	failed   bool     // GUARDED_BY(mu): a page failed; never complete
	pages    int      // GUARDED_BY(mu): pages read
	prev     *Listing // GUARDED_BY(mu): the complete listing this one replaces; nil once complete

	// walked is whether a directory reader read it (OpenDir): a walk
	// reads a directory, then its subdirectories (listAhead).
	walked atomic.Bool

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

func (ns *Namespace) newListing(prefix string, at time.Time) *Listing {
	return &Listing{prefix: prefix, at: at, listedAt: at, p: packed{prefix: prefix},
		maxBytes: ns.listings.maxBytes, maxEntries: ns.listings.maxEntries, checked: make(chan struct{})}
}

// append adds entries and returns those added. The naming rule gives
// distinct names; a name already there (two shortened names whose hashes
// collide) is dropped, so that no listing repeats a name. A listing that
// grows past its bounds drops its entries and keeps none after (overflow):
// it still hands out the entries each page adds (without that check).
func (l *Listing) append(es []naming.Entry) []naming.Entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.overflow {
		return es
	}
	added := es[:0:0]
	for _, e := range es {
		ok, full := l.p.add(e)
		if full {
			l.overflowLocked()
			return es
		}
		if ok {
			added = append(added, e)
		}
	}
	if int64(l.p.bytes()) > l.maxBytes || l.p.len() > l.maxEntries {
		l.overflowLocked()
	}
	return added
}

// overflowLocked drops the entries of a listing past its bounds.
func (l *Listing) overflowLocked() {
	l.overflow = true
	l.p = packed{prefix: l.prefix}
}

// find returns the entry called name, and whether the listing is complete
// (so that a miss means the name does not exist).
func (l *Listing) find(name string) (e naming.Entry, found, complete bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if i, ok := l.p.index(name); ok {
		return l.p.entry(i), true, l.complete
	}
	return naming.Entry{}, false, l.complete
}

// from returns up to n entries from the i-th on, and whether the listing
// is complete.
func (l *Listing) from(i, n int) ([]naming.Entry, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	end := min(l.p.len(), i+n)
	out := make([]naming.Entry, 0, max(0, end-i))
	for ; i < end; i++ {
		out = append(out, l.p.entry(i))
	}
	return out, l.complete
}

// dirsAfter returns the prefixes of up to n subdirectories that follow the
// subdirectory of prefix sub in the listing.
func (l *Listing) dirsAfter(sub string, n int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	found := false
	for i := 0; i < l.p.len() && len(out) < n; i++ {
		s, ok := l.p.sub(i)
		switch {
		case !ok:
		case found:
			out = append(out, s)
		case s == sub:
			found = true
		}
	}
	return out
}

// snapshot returns whether the listing is complete and how many entries
// it has.
func (l *Listing) snapshot() (n int, complete bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.p.len(), l.complete
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
	return l.p.len()
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

// listingOverhead is what a listing costs beyond its entries' bytes (its
// structs, its cache element), in bytes.
const listingOverhead = 256

// cost is the listing's weight in the listing cache: its bytes and entries
// and those of the listing it still keeps (bytes at least listingOverhead,
// entries at least 1).
func (l *Listing) cost() (bytes int64, entries int) {
	l.mu.Lock()
	b, n, prev := int64(l.p.bytes()), l.p.len(), l.prev
	l.mu.Unlock()
	if prev != nil {
		pb, pn := prev.cost()
		b, n = b+pb, n+pn
	}
	return b + listingOverhead, max(1, n)
}

// markComplete makes the listing complete, dropping the one it replaces;
// a listing that overflowed its bounds stays incomplete (it has no
// entries to answer from).
func (l *Listing) markComplete() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.complete = !l.overflow
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
	// first and last are the first page's first and last names, relative
	// to the prefix (where its key ranges split: fanout.go); seen is the
	// last name read so far.
	first, last, seen string
	// reader is whether a directory reader reads the stream (OpenDir): it
	// reads its key ranges in the background (background).
	reader bool
	// bg, when not nil, hands the pages read in the background in key
	// order (the last one marked last), or the error that ended them;
	// stopBg stops that read and frees its slot.
	bg     chan rangePage
	stopBg context.CancelFunc
}

// background starts reading the rest of the stream in key ranges for a
// directory reader, if a slot is free (streamFanOuts), and reports whether
// it did.
func (s *listStream) background() bool {
	select {
	case s.ns.streamSlots <- struct{}{}:
	default:
		return false
	}
	ctx, cancel := context.WithCancel(s.ns.owner.Context())
	bg := make(chan rangePage)
	prefix, token, first, last, seen := s.l.prefix, s.token, s.first, s.last, s.seen
	ok := s.ns.owner.Go(func() {
		defer func() { <-s.ns.streamSlots }()
		err := s.ns.fanOut(ctx, prefix, token, first, last, seen, func(p bucket.Page, complete bool) error {
			select {
			case bg <- rangePage{p: p, last: complete}:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		if err != nil {
			select {
			case bg <- rangePage{err: err}:
			case <-ctx.Done():
			}
		}
	})
	if !ok {
		cancel()
		<-s.ns.streamSlots
		return false
	}
	s.bg, s.stopBg = bg, cancel
	return true
}

// nextBackground takes the next page read in the background.
func (s *listStream) nextBackground(ctx context.Context) ([]naming.Entry, error) {
	var rp rangePage
	select {
	case rp = <-s.bg:
	case <-ctx.Done():
		return nil, fmt.Errorf("listing %q: %w", s.l.prefix, ctx.Err())
	}
	if rp.err != nil {
		s.close()
		return s.fail(rp.err)
	}
	if rp.last {
		s.close()
	}
	return s.take(ctx, rp.p, rp.last), nil
}

// close stops a background read of the stream, if any.
func (s *listStream) close() {
	if s.stopBg != nil {
		s.stopBg()
		s.stopBg = nil
	}
}

// newListStream starts reading prefix again; the listing it publishes keeps
// the last complete listing of prefix until it is complete itself.
func (ns *Namespace) newListStream(prefix string) *listStream {
	l := ns.newListing(prefix, ns.now())
	if o, ok := ns.listings.Get(prefix); ok {
		l.prev = o.lastComplete()
	}
	ns.listings.Put(prefix, l)
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
	pages, _ := old.size()
	r := s.ns.newListing(s.l.prefix, s.ns.now())
	r.listedAt = old.listedAt
	old.mu.Lock()
	r.p = old.p // a complete listing's entries never change: shared
	old.mu.Unlock()
	r.pages = pages
	r.markComplete()
	// What the kernel holds came from this listing or an older one: nothing
	// to check.
	r.CheckOnce(func() {})
	if cur, ok := s.ns.listings.Get(s.l.prefix); !ok || cur == s.l {
		s.ns.listings.Put(s.l.prefix, r)
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
	if s.bg != nil {
		return s.nextBackground(ctx)
	}
	if s.reader && s.ns.ranges() && s.last != "" && s.pagesRead() >= 2 && s.background() {
		return s.nextBackground(ctx)
	}
	lctx, cancel := s.ns.listCtx(ctx)
	p, err := s.ns.bucket.List(lctx, s.l.prefix, s.token)
	cancel()
	s.ns.counts.listPages.Add(1)
	if err == nil && p.Next != "" && p.Next == s.token {
		err = fmt.Errorf("the bucket returned the same continuation token twice")
	}
	if err != nil {
		return s.fail(fmt.Errorf("listing %q: %w", s.l.prefix, err))
	}
	s.token = p.Next
	if f, l, ok := firstLast(s.l.prefix, p); ok {
		if s.first == "" && s.last == "" {
			s.first, s.last = f, l
		}
		s.seen = l
	}
	return s.take(ctx, p, p.Next == ""), nil
}

// fail ends the stream after the store failed a page with err: see next.
func (s *listStream) fail(err error) ([]naming.Entry, error) {
	if r := s.revive(err); r != nil {
		s.l = r
		if !s.handedOut {
			s.done, s.handedOut = true, true
			es, _ := r.from(0, r.len())
			return es, nil
		}
		s.err = err // entries of the failed read are out: no mixing
	}
	return nil, err
}

// take records a page read from the store (the last one when complete)
// and returns the entries it newly decided.
func (s *listStream) take(ctx context.Context, p bucket.Page, complete bool) []naming.Entry {
	s.l.mu.Lock()
	s.l.pages++
	s.l.mu.Unlock()
	es := s.l.append(s.ns.shownOnly(ctx, s.r.Add(p, complete)))
	if complete {
		s.done = true
		s.l.markComplete()
		if s.ns.listed != nil && s.l.Complete() {
			s.ns.listed(s.l)
		}
	}
	s.handedOut = s.handedOut || len(es) > 0
	// Re-publish with the new cost; a listing larger than the whole cache
	// bound is dropped from it (lookups then Stat) but still streams.
	if cur, ok := s.ns.listings.Get(s.l.prefix); ok && cur == s.l {
		s.ns.listings.Put(s.l.prefix, s.l)
	}
	return es
}

// all reads the stream to the end, or up to maxPages more pages (0: no
// bound); it returns whether the listing is complete. Read to the end, a
// prefix of more than two pages is read in key ranges at once after its
// second where the store allows (fanout.go): the second page is read on
// its own, as a prefix of exactly one page's entries often ends in a
// truncated page and an empty one (MinIO), which ranges would multiply.
func (s *listStream) all(ctx context.Context, maxPages int) (bool, error) {
	for i := 0; !s.done && (maxPages <= 0 || i < maxPages); i++ {
		if maxPages <= 0 && i > 1 && s.ns.ranges() && s.last != "" {
			return s.rest(ctx)
		}
		if _, err := s.next(ctx); err != nil {
			return false, err
		}
	}
	return s.done, nil
}

// rest reads the rest of the stream in key ranges at once (fanOut).
func (s *listStream) rest(ctx context.Context) (bool, error) {
	err := s.ns.fanOut(ctx, s.l.prefix, s.token, s.first, s.last, s.seen, func(p bucket.Page, complete bool) error {
		s.take(ctx, p, complete)
		return nil
	})
	if err != nil {
		if _, err := s.fail(err); err != nil {
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

// dirBatch is how many entries of a cached listing a DirReader decodes
// at a time.
const dirBatch = 256

// A directory read whose parent was read too (a walk: os.walk,
// DatasetFolder's scan, find, which read a directory, then each of its
// subdirectories) lists the aheadDirs subdirectories that follow it in its
// parent's listing ahead, in the background, as the walk reads them next
// (a path walk through the parent reads no subdirectory ahead); aheadRuns bounds those
// listings in flight for the whole mount (with Config.ListFanout set, that
// many of them, and twice as many subdirectories ahead) (a directory finding no slot
// free lists nothing ahead). None is started when listings of the cached
// ones' mean size, as many as are read ahead, would take more than an
// eighth of what the listings may take (listingCache.Roomy: a listing read
// ahead must stay until the walk reads it), or for a parent of more than
// aheadParent entries (finding the directory in it would cost more than it
// saves). A full budget does not stop it: what a listing read ahead evicts
// is the coldest, in a walk a directory it has read (at 10,000,000 entries,
// where the listings fill the budget, a walk that stopped reading ahead
// read each directory while the reader waited: docs/records/scale.md).
const (
	aheadDirs   = 4
	aheadRuns   = 2
	aheadParent = 1 << 16
)

// listAhead starts listing, in the background, the subdirectories that
// follow prefix in its parent's complete listing and are not cached.
func (ns *Namespace) listAhead(prefix string) {
	if prefix == "" {
		return
	}
	parent := prefix[:strings.LastIndexByte(prefix[:len(prefix)-1], '/')+1]
	// Get, not Peek: the walk uses its parent's listing, which stays warm
	// while it goes on (the kernel, its entries cached, may look up none of
	// the subdirectories in the parent).
	pl, ok := ns.listings.Get(parent)
	if !ok || !pl.walked.Load() || !pl.Complete() || pl.len() > aheadParent {
		return
	}
	if !ns.listings.Roomy(ns.aheadDirs) {
		return
	}
	for _, sub := range pl.dirsAfter(prefix, ns.aheadDirs) {
		if l, ok := ns.listings.Peek(sub); ok && ns.fresh(l) {
			continue
		}
		ns.lists.Start(context.Background(), sub, ns.aheadSlot, func(ctx context.Context) (*Listing, error) {
			defer func() { <-ns.ahead }()
			ns.counts.listedAhead.Add(1)
			return ns.relist(sub, 0)(ctx)
		})
	}
}

// aheadSlot takes one of the slots of the listings read ahead, if one is
// free.
func (ns *Namespace) aheadSlot() bool {
	select {
	case ns.ahead <- struct{}{}:
		return true
	default:
		return false
	}
}

// Each reads prefix's whole directory (OpenDir), calling fn on each entry
// as its page comes: a caller that keeps only some (directories) holds no
// more.
func (ns *Namespace) Each(ctx context.Context, prefix string, fn func(naming.Entry)) error {
	r := ns.OpenDir(ctx, prefix)
	defer r.Close()
	for !r.Done() {
		es, err := r.Next(ctx)
		if err != nil {
			return err
		}
		for _, e := range es {
			fn(e)
		}
	}
	return nil
}

// DirReader reads one directory for a reader: a complete cached listing,
// decoded dirBatch entries at a time, or a stream reading the bucket page
// by page as the reader asks. Not safe for concurrent use.
type DirReader struct {
	l      *Listing    // the complete listing served; nil when streaming
	pos    int         // the next entry of l to hand out
	stream *listStream // nil when serving a listing
}

// OpenDir starts reading prefix's directory: a fresh complete listing from
// the cache; for a stale one that was complete, the listing read again if
// the store answers within StaleGrace, else the stale one (see
// refreshStale); else a stream reading the bucket page by page.
func (ns *Namespace) OpenDir(ctx context.Context, prefix string) *DirReader {
	ns.listAhead(prefix)
	l, ok := ns.listings.Get(prefix)
	if ok && ns.fresh(l) && l.Complete() {
		return ns.reader(l)
	}
	if !ok || (ns.fresh(l) && l.lastComplete() == nil) {
		// A listing of it in flight (read ahead, or a lookup's): its end,
		// rather than a second read of the same pages. Not where a complete
		// listing is kept: that one is served after at most the grace
		// (below), as a store that stalls would keep the reader waiting
		// for the run's whole timeout.
		if c := ns.lists.Start(ctx, prefix, func() bool { return false }, nil); c != nil {
			if l, err := c.Wait(ctx); err == nil && l.Complete() {
				return ns.reader(l)
			}
			l, ok = ns.listings.Get(prefix)
		}
	}
	if ok {
		// Stale, or being read again: the last complete listing, unless the
		// new one comes within the grace.
		if old := l.lastComplete(); old != nil {
			if nl := ns.refreshStale(ctx, prefix); nl != nil && nl.Complete() {
				return ns.reader(nl)
			}
			return ns.reader(old)
		}
	}
	s := ns.newListStream(prefix)
	s.l.walked.Store(true)
	s.reader = true
	return &DirReader{stream: s}
}

// Close stops what the reader reads in the background (a stream's key
// ranges). The reader is not used after.
func (r *DirReader) Close() {
	if r.stream != nil {
		r.stream.close()
	}
}

// InWalk reports whether prefix's parent directory was read by a directory
// reader (OpenDir) while its listing is cached: a read of prefix's
// directory is then likely a step of a walk (os.walk, DatasetFolder's
// scan, find, ls -R), which reads a directory, then each of its
// subdirectories. The root ("") is never in a walk.
func (ns *Namespace) InWalk(prefix string) bool {
	if prefix == "" {
		return false
	}
	parent := prefix[:strings.LastIndexByte(prefix[:len(prefix)-1], '/')+1]
	pl, ok := ns.listings.Peek(parent)
	return ok && pl.walked.Load()
}

// reader returns a reader of the complete listing l, marked walked.
func (ns *Namespace) reader(l *Listing) *DirReader {
	l.walked.Store(true)
	return &DirReader{l: l}
}

// Done reports whether the reader has handed out every entry.
func (r *DirReader) Done() bool {
	if r.stream != nil {
		return r.stream.done
	}
	return r.pos >= r.l.len()
}

// Next returns the next entries: the listing's next dirBatch, or those a
// page newly decided (possibly none while the directory is not done; see
// listStream).
func (r *DirReader) Next(ctx context.Context) ([]naming.Entry, error) {
	if r.stream != nil {
		return r.stream.next(ctx)
	}
	es, _ := r.l.from(r.pos, dirBatch)
	r.pos += len(es)
	return es, nil
}
