package namespace

import (
	"container/list"
	"sync"
	"sync/atomic"
)

// The metadata budget (Config.MetadataBytes) bounds what the mount keeps
// of the bucket's names, whatever the bucket's size: the cached listings
// (their packed bytes, packed.go) and the entries the tree holds for the
// kernel (go-fuse inodes, reported by the tree with AddHeld). Listings are
// dropped coldest first while the two together pass the budget, but keep
// at least listingShare of it: a mount whose kernel holds more entries
// than the budget allows answers lookups from listings still, and the tree
// tells the kernel to forget entries (the dropped callback of New, for the
// directories whose listing was dropped, and a sweep of the directories
// with no listing cached when that is not enough).

// defaultMetadataBytes is Config.MetadataBytes's default.
const defaultMetadataBytes = 256 << 20

// listingShare is the part of the budget (1/listingShare) kept for
// listings however many entries the kernel holds.
const listingShare = 4

// listingCache is the listings by prefix, least recently used first out,
// bounded by bytes (the budget less what the tree holds, at least
// 1/listingShare of it) and by entries (Config.MaxListingEntries). Safe for
// concurrent use.
type listingCache struct {
	maxBytes   int64 // constant: Config.MetadataBytes
	maxEntries int   // constant: Config.MaxListingEntries
	// dropped, if not nil, is called, without the lock, with the prefix of
	// every listing evicted for the bounds (not replaced ones).
	dropped func(prefix string)
	// held is the bytes the tree holds for the kernel's entries.
	held atomic.Int64
	// drops counts listings evicted for the bounds.
	drops atomic.Int64
	// total mirrors bytes, for reads without the lock.
	total atomic.Int64

	mu      sync.Mutex
	ll      *list.List               // GUARDED_BY(mu): front = most recently used
	m       map[string]*list.Element // GUARDED_BY(mu)
	bytes   int64                    // GUARDED_BY(mu)
	entries int                      // GUARDED_BY(mu)
}

type cached struct {
	prefix  string
	l       *Listing
	bytes   int64
	entries int
}

func newListingCache(maxBytes int64, maxEntries int, dropped func(string)) *listingCache {
	return &listingCache{maxBytes: maxBytes, maxEntries: maxEntries, dropped: dropped, ll: list.New(), m: map[string]*list.Element{}}
}

// limit is the bytes listings may take now.
func (c *listingCache) limit() int64 {
	return max(c.maxBytes/listingShare, c.maxBytes-c.held.Load())
}

// crowdedShare: the listings are crowded once they take more than
// (crowdedShare-1)/crowdedShare of what they may take.
const crowdedShare = 8

// Crowded reports whether the listings (nearly) fill what they may take
// now: a listing read now would evict others (lookup.go reads none for
// one name then).
func (c *listingCache) Crowded() bool {
	lim := c.limit()
	return c.total.Load() > lim-lim/crowdedShare
}

// Roomy reports whether n more listings of the cached ones' mean size
// (bytes per listing; none cached: room) take at most 1/crowdedShare of
// what the listings may take: listings read ahead that evict only the
// coldest, not each other or the one being read.
func (c *listingCache) Roomy(n int) bool {
	cnt, _, b := c.Size()
	if cnt == 0 {
		return true
	}
	return int64(n)*(b/int64(cnt)) <= c.limit()/crowdedShare
}

// Get returns prefix's listing and marks it used.
func (c *listingCache) Get(prefix string) (*Listing, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[prefix]
	if !ok {
		return nil, false
	}
	c.ll.MoveToFront(e)
	return e.Value.(*cached).l, true
}

// Put stores l under prefix, costing its bytes and entries (l.cost), and
// evicts the least recently used listings beyond the bounds. A listing
// costing more than a bound on its own is not stored.
func (c *listingCache) Put(prefix string, l *Listing) {
	b, n := l.cost()
	c.mu.Lock()
	if e, ok := c.m[prefix]; ok {
		c.removeLocked(e)
	}
	if b <= c.limit() && n <= c.maxEntries {
		c.m[prefix] = c.ll.PushFront(&cached{prefix: prefix, l: l, bytes: b, entries: n})
		c.bytes += b
		c.entries += n
		c.total.Store(c.bytes)
	}
	out := c.evictLocked()
	c.mu.Unlock()
	c.tell(out)
}

// Trim evicts the least recently used listings beyond the bounds (the
// tree holds more than when they were stored).
func (c *listingCache) Trim() {
	c.mu.Lock()
	out := c.evictLocked()
	c.mu.Unlock()
	c.tell(out)
}

func (c *listingCache) evictLocked() []string {
	var out []string
	for lim := c.limit(); c.ll.Len() > 0 && (c.bytes > lim || c.entries > c.maxEntries); {
		e := c.ll.Back()
		out = append(out, e.Value.(*cached).prefix)
		c.removeLocked(e)
	}
	return out
}

func (c *listingCache) tell(prefixes []string) {
	c.drops.Add(int64(len(prefixes)))
	if c.dropped != nil {
		for _, p := range prefixes {
			c.dropped(p)
		}
	}
}

// Peek returns prefix's listing without marking it used.
func (c *listingCache) Peek(prefix string) (*Listing, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[prefix]
	if !ok {
		return nil, false
	}
	return e.Value.(*cached).l, true
}

// Has reports whether prefix's listing is cached, without marking it used.
func (c *listingCache) Has(prefix string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.m[prefix]
	return ok
}

// RemoveIf deletes prefix's listing if match says so.
func (c *listingCache) RemoveIf(prefix string, match func(*Listing) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[prefix]; ok && match(e.Value.(*cached).l) {
		c.removeLocked(e)
	}
}

func (c *listingCache) removeLocked(e *list.Element) {
	it := e.Value.(*cached)
	c.ll.Remove(e)
	delete(c.m, it.prefix)
	c.bytes -= it.bytes
	c.entries -= it.entries
	c.total.Store(c.bytes)
}

// Size returns the listings cached, their entries and their bytes.
func (c *listingCache) Size() (n, entries int, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ll.Len(), c.entries, c.bytes
}
