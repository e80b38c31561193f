// Package fakes holds the in-memory test doubles that the tests of fs,
// fs/namespace, fs/features and fs/remote share: a bucket (bucket.go), a
// feature store, a clock and an extractor (extractor.go), each defined
// once. Only tests import it.
package fakes

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/featurefs/featurefs/cache"
)

// Cache is an in-memory feature store (the Cache of fs, fs/features and
// fs/remote's server). Safe for concurrent use.
type Cache struct {
	mu sync.Mutex
	m  map[string][]byte // GUARDED_BY(mu)

	// Hits counts Gets that found the key; Puts counts Puts; PartReads
	// counts ReadAts that found it.
	Hits, Puts, PartReads atomic.Int64
}

// NewCache returns an empty store.
func NewCache() *Cache { return &Cache{m: map[string][]byte{}} }

// Get returns a stored feature; a miss is (nil, false, nil).
func (c *Cache) Get(k cache.Key) ([]byte, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[string(k.ID())]
	if ok {
		c.Hits.Add(1)
	}
	return v, ok, nil
}

// ReadAt copies part of a stored feature from off into dst, as
// cache.Store.ReadAt does; a miss is (0, 0, false, nil).
func (c *Cache) ReadAt(k cache.Key, dst []byte, off int64) (int, int64, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[string(k.ID())]
	if !ok {
		return 0, 0, false, nil
	}
	c.PartReads.Add(1)
	if off >= int64(len(v)) {
		return 0, int64(len(v)), true, nil
	}
	return copy(dst, v[off:]), int64(len(v)), true, nil
}

// Has reports whether k is stored. It is Get without the value, and
// counts a found key in Hits as Get does.
func (c *Cache) Has(k cache.Key) bool {
	_, ok, _ := c.Get(k)
	return ok
}

// Put stores a feature.
func (c *Cache) Put(k cache.Key, v []byte) error {
	c.Puts.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[string(k.ID())] = v
	return nil
}

// Stats reports the hits, puts and entries.
func (c *Cache) Stats() cache.Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return cache.Stats{Hits: c.Hits.Load(), Puts: c.Puts.Load(), Entries: int64(len(c.m))}
}

// Clock is a settable clock, starting at a fixed time (2023-11-14). Safe
// for concurrent use.
type Clock struct{ t atomic.Int64 }

// NewClock returns a clock at its start.
func NewClock() *Clock {
	c := &Clock{}
	c.t.Store(time.Unix(1700000000, 0).UnixNano())
	return c
}

// Now is the clock's time.
func (c *Clock) Now() time.Time { return time.Unix(0, c.t.Load()) }

// Advance moves the clock on by d.
func (c *Clock) Advance(d time.Duration) { c.t.Add(int64(d)) }
