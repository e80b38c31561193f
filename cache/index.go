package cache

import "encoding/binary"

// index is the in-memory LRU index of every stored entry: a doubly linked
// list threaded through a slice of fixed-size slots (most recently used at
// the head) and an open-addressing hash table of slot numbers. It costs about
// 40 bytes per entry. It is not safe for concurrent use; Store guards it with
// Store.mu.
type index struct {
	slots []slot
	table []int32 // slot+1, 0 = empty; linear probing
	count int     // live entries
	// indexCount and indexBytes are the live entries with
	// flagArchiveIndex and their sizes.
	indexCount int
	indexBytes int64
	free       int32 // head of the free-slot list (chained through next), -1 = none
	head       int32 // most recently used, -1 = empty
	tail       int32 // least recently used, -1 = empty
	dirty      int   // entries with flagDirty set
}

// slot is one entry: 32 bytes.
type slot struct {
	id         id
	size       uint32
	prev, next int32
	flags      uint32
}

const (
	flagLive         = 1 << iota // slot holds an entry
	flagDirty                    // accessed since its access order was last persisted
	flagArchiveIndex             // holds an archive index (kindArchiveIndex), not a feature
)

// kindFlags are the slot flags of an entry of kind k.
func kindFlags(k entryKind) uint32 {
	if k == kindArchiveIndex {
		return flagArchiveIndex
	}
	return 0
}

// slotKind is the kind of the entry in slot e.
func slotKind(e *slot) entryKind {
	if e.flags&flagArchiveIndex != 0 {
		return kindArchiveIndex
	}
	return kindFeature
}

const nilSlot = -1

func newIndex() *index {
	return &index{table: make([]int32, 1024), free: nilSlot, head: nilSlot, tail: nilSlot}
}

func (x *index) home(i id) int {
	return int(binary.LittleEndian.Uint64(i[:8]) & uint64(len(x.table)-1))
}

// lookup returns the slot holding id.
func (x *index) lookup(i id) (int32, bool) {
	mask := len(x.table) - 1
	for p := x.home(i); ; p = (p + 1) & mask {
		s := x.table[p]
		if s == 0 {
			return nilSlot, false
		}
		if x.slots[s-1].id == i {
			return s - 1, true
		}
	}
}

// insert adds id (which must not be present), of kind k, at the head of
// the list.
func (x *index) insert(i id, size uint32, k entryKind) int32 {
	if (x.count+1)*10 > len(x.table)*7 {
		x.grow()
	}
	var s int32
	if x.free != nilSlot {
		s = x.free
		x.free = x.slots[s].next
	} else {
		s = int32(len(x.slots))
		x.slots = append(x.slots, slot{})
	}
	x.slots[s] = slot{id: i, size: size, prev: nilSlot, next: nilSlot, flags: flagLive | kindFlags(k)}
	x.place(s)
	x.count++
	if k == kindArchiveIndex {
		x.indexCount++
		x.indexBytes += int64(size)
	}
	x.pushFront(s)
	return s
}

func (x *index) place(s int32) {
	mask := len(x.table) - 1
	p := x.home(x.slots[s].id)
	for x.table[p] != 0 {
		p = (p + 1) & mask
	}
	x.table[p] = s + 1
}

func (x *index) grow() {
	old := x.table
	x.table = make([]int32, 2*len(old))
	for _, s := range old {
		if s != 0 {
			x.place(s - 1)
		}
	}
}

// remove deletes slot s from the list and the table and frees it.
func (x *index) remove(s int32) {
	x.unlink(s)
	mask := len(x.table) - 1
	p := x.home(x.slots[s].id)
	for x.table[p] != s+1 {
		p = (p + 1) & mask
	}
	// Backward-shift deletion keeps every probe chain unbroken.
	for {
		x.table[p] = 0
		q := p
		for {
			q = (q + 1) & mask
			t := x.table[q]
			if t == 0 {
				goto done
			}
			h := x.home(x.slots[t-1].id)
			// t may move to p unless its home lies cyclically in (p, q].
			if (p <= q && (h <= p || h > q)) || (p > q && h <= p && h > q) {
				x.table[p] = t
				p = q
				break
			}
		}
	}
done:
	if x.slots[s].flags&flagDirty != 0 {
		x.dirty--
	}
	if x.slots[s].flags&flagArchiveIndex != 0 {
		x.indexCount--
		x.indexBytes -= int64(x.slots[s].size)
	}
	x.slots[s] = slot{prev: nilSlot, next: x.free}
	x.free = s
	x.count--
}

func (x *index) unlink(s int32) {
	e := &x.slots[s]
	if e.prev != nilSlot {
		x.slots[e.prev].next = e.next
	} else {
		x.head = e.next
	}
	if e.next != nilSlot {
		x.slots[e.next].prev = e.prev
	} else {
		x.tail = e.prev
	}
	e.prev, e.next = nilSlot, nilSlot
}

func (x *index) pushFront(s int32) {
	e := &x.slots[s]
	e.prev, e.next = nilSlot, x.head
	if x.head != nilSlot {
		x.slots[x.head].prev = s
	}
	x.head = s
	if x.tail == nilSlot {
		x.tail = s
	}
}

// touch makes s the most recently used entry and marks it dirty.
func (x *index) touch(s int32) {
	if x.head != s {
		x.unlink(s)
		x.pushFront(s)
	}
	x.markDirty(s)
}

func (x *index) markDirty(s int32) {
	if x.slots[s].flags&flagDirty == 0 {
		x.slots[s].flags |= flagDirty
		x.dirty++
	}
}
