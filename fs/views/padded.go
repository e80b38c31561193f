package views

import (
	"sync/atomic"
	"time"

	"github.com/featurefs/featurefs/fs/internal/lru"
)

// Padded is a file whose content is rendered afresh for each reader (the
// mount's .featurefs/stats and failures) yet whose size, as stat reports
// it, is what a read then returns (cat, cp and readers that trust
// st_size must not truncate): the rendering followed by spaces and a
// newline up to the file's size, a high-water mark that only grows, with
// headroom (PaddedSize). Content that changes between a stat and a read
// changes, not its length; when the rendering outgrows the size, the size
// grows (whitespace after a JSON value is still valid JSON). A reader's
// read at offset 0 takes a snapshot, and its reads further on within
// PaddedSnapTTL get the rest of that snapshot, not of a new one, so that
// no read(2) returns the halves of two.
type Padded struct {
	render func() []byte // the content, ending in a newline
	clock  func() time.Time
	size   atomic.Int64 // never shrinks
	// snaps is the snapshot each recent reader read from offset 0, for
	// its reads further on: at most paddedSnapReaders, each kept
	// PaddedSnapTTL.
	snaps *lru.LRU[uint32, paddedSnap]
}

// paddedSnap is one reader's snapshot: the content (no final newline),
// the size it was padded to, and when it was taken.
type paddedSnap struct {
	content []byte
	size    int64
	at      time.Time
}

// Bounds on the snapshots kept for readers part way through the file.
const (
	paddedSnapReaders = 64
	PaddedSnapTTL     = time.Second
)

// NewPadded returns a Padded file of render's content.
func NewPadded(render func() []byte, clock func() time.Time) *Padded {
	return &Padded{render: render, clock: clock, snaps: lru.New[uint32, paddedSnap](paddedSnapReaders)}
}

// PaddedSize returns the padded size for content of n bytes: n plus a
// quarter (at least 1 KiB) of headroom, rounded up to 1 KiB, so that the
// size changes only when the content grows by that much, not when a
// counter gains a digit.
func PaddedSize(n int) int64 {
	const kib = 1024
	return int64((n+max(n/4, kib)+kib-1)/kib) * kib
}

// Snapshot renders the content and grows the file's size when it
// outgrew it. It returns the content without its final newline and the
// size.
func (p *Padded) Snapshot() ([]byte, int64) {
	b := p.render()
	for {
		cur := p.size.Load()
		if int64(len(b)) <= cur || p.size.CompareAndSwap(cur, PaddedSize(len(b))) {
			break
		}
	}
	return b[:len(b)-1], p.size.Load()
}

// ReaderSnapshot returns the snapshot a read at off by reader (known:
// whether the reader is known) gets: a new one at offset 0 (kept for the
// reader), the reader's own from offset 0 further on while it is recent,
// else a new one.
func (p *Padded) ReaderSnapshot(reader uint32, known bool, off int64) ([]byte, int64) {
	if known && off > 0 {
		if s, kept := p.snaps.Get(reader); kept && p.clock().Sub(s.at) < PaddedSnapTTL {
			return s.content, s.size
		}
	}
	content, size := p.Snapshot()
	if known {
		p.snaps.Put(reader, paddedSnap{content: content, size: size, at: p.clock()}, 1)
	}
	return content, size
}

// ReadPadded fills dest from off with content padded to size: the
// content, spaces, and a newline as the last byte; it returns what it
// filled.
func ReadPadded(content []byte, size int64, dest []byte, off int64) []byte {
	if off < 0 || off >= size {
		return nil
	}
	n := min(int64(len(dest)), size-off)
	out := dest[:n]
	c := 0
	if off < int64(len(content)) {
		c = copy(out, content[off:])
	}
	for i := c; i < len(out); i++ {
		out[i] = ' '
	}
	if off+n == size {
		out[n-1] = '\n'
	}
	return out
}
