// Package lru is a map bounded by the total cost of its values, evicting the
// least recently used; fs and fs/remote keep their listings, negative
// entries and log deduplication in it.
package lru

import (
	"container/list"
	"sync"
)

// LRU is a map bounded by the total cost of its values, evicting the least
// recently used. Safe for concurrent use.
type LRU[K comparable, V any] struct {
	max int // constant

	mu    sync.Mutex
	total int                 // GUARDED_BY(mu)
	ll    *list.List          // GUARDED_BY(mu); front = most recently used
	m     map[K]*list.Element // GUARDED_BY(mu)
}

type lruItem[K comparable, V any] struct {
	k    K
	v    V
	cost int
}

// New returns an empty LRU bounded by max total cost.
func New[K comparable, V any](max int) *LRU[K, V] {
	return &LRU[K, V]{max: max, ll: list.New(), m: make(map[K]*list.Element)}
}

// Get returns the value of k and marks it used.
func (c *LRU[K, V]) Get(k K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok {
		var zero V
		return zero, false
	}
	c.ll.MoveToFront(e)
	return e.Value.(*lruItem[K, V]).v, true
}

// Put stores v under k with a cost (at least 1) and evicts the least
// recently used entries beyond the bound. A value costing more than the whole
// bound is not stored.
func (c *LRU[K, V]) Put(k K, v V, cost int) {
	cost = max(cost, 1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[k]; ok {
		c.removeLocked(e)
	}
	if cost > c.max {
		return
	}
	c.m[k] = c.ll.PushFront(&lruItem[K, V]{k: k, v: v, cost: cost})
	c.total += cost
	for c.total > c.max {
		c.removeLocked(c.ll.Back())
	}
}

// Remove deletes k.
func (c *LRU[K, V]) Remove(k K) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[k]; ok {
		c.removeLocked(e)
	}
}

// RemoveIf deletes k if its value is v (compared by the caller's eq).
func (c *LRU[K, V]) RemoveIf(k K, match func(V) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[k]; ok && match(e.Value.(*lruItem[K, V]).v) {
		c.removeLocked(e)
	}
}

func (c *LRU[K, V]) removeLocked(e *list.Element) {
	it := e.Value.(*lruItem[K, V])
	c.ll.Remove(e)
	delete(c.m, it.k)
	c.total -= it.cost
}

// Size returns the number of entries and their total cost.
func (c *LRU[K, V]) Size() (n, cost int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ll.Len(), c.total
}
