package archive

import (
	"log/slog"
	"sync"

	"github.com/featurefs/featurefs/fs/internal/lru"
)

// indexCache is the indexes kept in memory: an LRU of those that cost at
// most Config.MaxIndexBytes together, and, beside it, one index larger
// than that whole bound (the last one kept), when it costs at most
// Config.MaxLargeIndexBytes. An index too large for the LRU is never
// dropped without a word (the LRU refuses a value over its whole bound):
// one WARN line per archive version says that it is kept on its own, or
// that it is too large to keep (each lookup then reads it again from the
// IndexStore or the archive). Memory: at most MaxIndexBytes +
// MaxLargeIndexBytes of index cost (index.cost). Safe for concurrent use.
type indexCache struct {
	lru      *lru.LRU[string, *index]
	max      int // constant: the LRU's bound
	maxLarge int // constant: the bound on the one large index
	log      *slog.Logger

	mu        sync.Mutex
	count     func(delta int64) // GUARDED_BY(mu): told of every change of Bytes; nil: none
	counted   int64             // GUARDED_BY(mu): Bytes as count was last told
	largeKey  string            // GUARDED_BY(mu)
	large     *index            // GUARDED_BY(mu): nil for none
	largeCost int               // GUARDED_BY(mu)
	warned    map[string]bool   // GUARDED_BY(mu): archive versions warned of, at most maxListed
}

func newIndexCache(max, maxLarge int, log *slog.Logger) *indexCache {
	return &indexCache{lru: lru.New[string, *index](max), max: max, maxLarge: maxLarge, log: log, warned: map[string]bool{}}
}

// Get returns the index of archive k.
func (c *indexCache) Get(k string) (*index, bool) {
	if x, ok := c.lru.Get(k); ok {
		return x, true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.large != nil && c.largeKey == k {
		return c.large, true
	}
	return nil, false
}

// Put keeps x as archive k's index, costing cost bytes: in the LRU, or
// on its own when it costs more than the LRU's whole bound (replacing the
// large index kept before), or nowhere when it costs more than
// maxLarge, with one WARN line per archive version in the last two cases.
func (c *indexCache) Put(k string, x *index, cost int) {
	c.mu.Lock()
	if cost <= c.max {
		c.lru.Put(k, x, cost)
		c.removeLargeLocked(k, nil)
		c.tellLocked()
		c.mu.Unlock()
		return
	}
	c.lru.Remove(k)
	kept := cost <= c.maxLarge
	switch {
	case kept:
		c.largeKey, c.large, c.largeCost = k, x, cost
	case c.largeKey == k:
		c.largeKey, c.large, c.largeCost = "", nil, 0
	}
	v := k + "\x00" + x.etag
	warn := !c.warned[v]
	if warn {
		if len(c.warned) >= maxListed {
			clear(c.warned)
		}
		c.warned[v] = true
	}
	c.tellLocked()
	c.mu.Unlock()
	if !warn {
		return
	}
	attrs := []any{slog.String("key", k), slog.Int("members", len(x.members)), slog.Int("index_bytes", cost),
		slog.Int("max_index_bytes", c.max), slog.Int("max_large_index_bytes", c.maxLarge)}
	if kept {
		c.log.Warn("featurefs: archive index larger than the indexes' memory bound: kept on its own (one such index at a time)", attrs...)
	} else {
		c.log.Warn("featurefs: archive index too large to keep in memory: each lookup reads it again", attrs...)
	}
}

// Remove forgets archive k's index.
func (c *indexCache) Remove(k string) { c.RemoveIf(k, nil) }

// RemoveIf forgets archive k's index if match (nil: any) says so.
func (c *indexCache) RemoveIf(k string, match func(*index) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.tellLocked()
	if match == nil {
		c.lru.Remove(k)
	} else {
		c.lru.RemoveIf(k, match)
	}
	c.removeLargeLocked(k, match)
}

// tellLocked tells count of the change of Bytes since it was last told;
// called with mu held.
func (c *indexCache) tellLocked() {
	if c.count == nil {
		return
	}
	n := c.bytesLocked()
	if d := n - c.counted; d != 0 {
		c.counted = n
		c.count(d)
	}
}

// countBytes makes count hear every change of Bytes, starting with what
// is kept now.
func (c *indexCache) countBytes(count func(delta int64)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.count, c.counted = count, 0
	c.tellLocked()
}

// removeLargeLocked drops the large index if it is k's and match (nil:
// any) says so.
func (c *indexCache) removeLargeLocked(k string, match func(*index) bool) {
	if c.large != nil && c.largeKey == k && (match == nil || match(c.large)) {
		c.largeKey, c.large, c.largeCost = "", nil, 0
	}
}

// Bytes is the cost of the indexes kept.
func (c *indexCache) Bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytesLocked()
}

func (c *indexCache) bytesLocked() int64 {
	_, n := c.lru.Size()
	return int64(n + c.largeCost)
}
