package lru

import "testing"

func TestEvictsLeastRecentlyUsedByCost(t *testing.T) {
	c := New[string, int](3)
	c.Put("a", 1, 1)
	c.Put("b", 2, 1)
	c.Put("c", 3, 1)
	if _, ok := c.Get("a"); !ok { // a is now the most recently used
		t.Fatal("a missing")
	}
	c.Put("d", 4, 2) // evicts b then c
	for k, want := range map[string]bool{"a": true, "b": false, "c": false, "d": true} {
		if _, ok := c.Get(k); ok != want {
			t.Errorf("%s present = %v, want %v", k, ok, want)
		}
	}
	if n, cost := c.Size(); n != 2 || cost != 3 {
		t.Errorf("size = %d entries, cost %d; want 2, 3", n, cost)
	}
	c.Put("huge", 5, 4) // costs more than the bound: not stored, nothing evicted
	if _, ok := c.Get("huge"); ok {
		t.Error("over-cost value stored")
	}
	if n, _ := c.Size(); n != 2 {
		t.Errorf("size after over-cost put = %d, want 2", n)
	}
}

func TestRemoveIfMatchesValue(t *testing.T) {
	c := New[string, int](10)
	c.Put("k", 1, 1)
	c.RemoveIf("k", func(v int) bool { return v == 2 })
	if _, ok := c.Get("k"); !ok {
		t.Fatal("RemoveIf removed a value that did not match")
	}
	c.RemoveIf("k", func(v int) bool { return v == 1 })
	if _, ok := c.Get("k"); ok {
		t.Fatal("RemoveIf kept a matching value")
	}
	c.Put("k", 1, 1)
	c.Remove("k")
	if n, cost := c.Size(); n != 0 || cost != 0 {
		t.Errorf("size after Remove = %d, %d", n, cost)
	}
}
