package cache

import (
	"encoding/binary"
	"math/rand/v2"
	"runtime"
	"testing"
)

func idOf(n uint64) id {
	var i id
	// splitmix64 of n and n+1: random-looking, distinct ids.
	for h := range 2 {
		z := n*2 + uint64(h) + 0x9e3779b97f4a7c15
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		binary.LittleEndian.PutUint64(i[8*h:], z^(z>>31))
	}
	return i
}

// TestIndexMatchesModel runs random operations against the index and a
// map-and-slice model of an LRU list.
func TestIndexMatchesModel(t *testing.T) {
	x := newIndex()
	var order []id // least recently used first
	sizes := map[id]uint32{}
	rng := rand.New(rand.NewPCG(1, 2))
	find := func(i id) int {
		for p, o := range order {
			if o == i {
				return p
			}
		}
		return -1
	}
	for step := range 20000 {
		i := idOf(uint64(rng.IntN(3000)))
		switch op := rng.IntN(4); {
		case op == 0 || op == 1: // insert or touch
			if s, ok := x.lookup(i); ok {
				x.touch(s)
				p := find(i)
				order = append(append(order[:p:p], order[p+1:]...), i)
			} else {
				sz := uint32(rng.IntN(1000))
				x.insert(i, sz, kindFeature)
				sizes[i] = sz
				order = append(order, i)
			}
		case op == 2: // remove
			if s, ok := x.lookup(i); ok {
				x.remove(s)
				p := find(i)
				order = append(order[:p:p], order[p+1:]...)
				delete(sizes, i)
			}
		case op == 3: // evict the least recently used
			if x.tail != nilSlot {
				if x.slots[x.tail].id != order[0] {
					t.Fatalf("step %d: tail is not the least recently used entry", step)
				}
				delete(sizes, order[0])
				x.remove(x.tail)
				order = order[1:]
			}
		}
		if x.count != len(order) {
			t.Fatalf("step %d: count %d, model %d", step, x.count, len(order))
		}
	}
	// Walk the list from the tail: it must be the model's order.
	p := x.tail
	for k, want := range order {
		if p == nilSlot || x.slots[p].id != want || x.slots[p].size != sizes[want] {
			t.Fatalf("list position %d differs from the model", k)
		}
		if s, ok := x.lookup(want); !ok || s != p {
			t.Fatalf("lookup of list entry %d failed", k)
		}
		p = x.slots[p].prev
	}
	if p != nilSlot {
		t.Fatal("list longer than the model")
	}
	if _, ok := x.lookup(idOf(99999)); ok {
		t.Fatal("lookup of an absent id succeeded")
	}
}

// TestIndexMemoryPerEntry checks that the index of a million entries stays
// in tens of megabytes.
func TestIndexMemoryPerEntry(t *testing.T) {
	const n = 1_000_000
	ids := make([]id, n)
	for k := range ids {
		ids[k] = idOf(uint64(k))
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	x := newIndex()
	for k := range ids {
		x.insert(ids[k], 800_000, kindFeature)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perEntry := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("index of %d entries: %.1f MB, %.1f bytes per entry", n, float64(after.HeapAlloc-before.HeapAlloc)/1e6, perEntry)
	if perEntry > 64 {
		t.Fatalf("index uses %.1f bytes per entry; want <= 64", perEntry)
	}
	runtime.KeepAlive(x)
	runtime.KeepAlive(ids)
}
