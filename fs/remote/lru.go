package remote

// A copy of fs/lru.go (unexported there).

import (
	"container/list"
	"sync"
)

// lru is a map bounded by the total cost of its values, evicting the least
// recently used. Safe for concurrent use.
type lru[K comparable, V any] struct {
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

func newLRU[K comparable, V any](max int) *lru[K, V] {
	return &lru[K, V]{max: max, ll: list.New(), m: make(map[K]*list.Element)}
}

// get returns the value of k and marks it used.
func (c *lru[K, V]) get(k K) (V, bool) {
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

// put stores v under k with a cost (at least 1) and evicts the least
// recently used entries beyond the bound. A value costing more than the whole
// bound is not stored.
func (c *lru[K, V]) put(k K, v V, cost int) {
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

// remove deletes k.
func (c *lru[K, V]) remove(k K) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[k]; ok {
		c.removeLocked(e)
	}
}

// removeIf deletes k if its value is v (compared by the caller's eq).
func (c *lru[K, V]) removeIf(k K, match func(V) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[k]; ok && match(e.Value.(*lruItem[K, V]).v) {
		c.removeLocked(e)
	}
}

func (c *lru[K, V]) removeLocked(e *list.Element) {
	it := e.Value.(*lruItem[K, V])
	c.ll.Remove(e)
	delete(c.m, it.k)
	c.total -= it.cost
}

// size returns the number of entries and their total cost.
func (c *lru[K, V]) size() (n, cost int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ll.Len(), c.total
}
