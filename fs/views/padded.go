package views

import (
	"sync"
	"sync/atomic"
	"time"
)

// Padded is a file whose content is rendered afresh for its readers (the
// mount's .featurefs/stats and failures) yet whose size, as stat reports
// it, is what a read then returns (cat, cp and readers that trust
// st_size must not truncate): the rendering followed by spaces and a
// newline up to the file's size, a high-water mark that only grows, with
// headroom (PaddedSize). Content that changes between a stat and a read
// changes, not its length; when the rendering outgrows the size, the size
// grows (whitespace after a JSON value is still valid JSON).
//
// No read(2) may return pieces of two renderings, though the kernel asks
// for a reader's bytes in several requests, from any offset (page 0 again
// for a reader's next read(2) once the mount dropped the pages it read),
// on any of the reader's threads, and serves pages one reader's request
// filled to another. So the reads are given one rendering while they
// follow one another within PaddedContinue, for at most PaddedSnapTTL
// (Served): the pages the kernel holds and the bytes a request gets are
// then the same rendering's, whoever reads. A read after a pause gets a
// new one, as a stat does (Snapshot). Measured with a Go reader
// (io.ReadAll, its first read(2) 512 bytes) beside `cat`, 3 s: 2 to 93
// documents of 5,000-9,600 were pieces of two renderings with a
// rendering per reader and thread; 0 to 3 with this, where a reader's
// read(2) calls in a row straddled the PaddedSnapTTL bound
// (TestStatsFileWholeUnderConcurrentReaders).
type Padded struct {
	render func() []byte // the content, ending in a newline
	size   atomic.Int64  // never shrinks
	mu     sync.Mutex
	served *paddedSnap  // GUARDED_BY(mu): the rendering the last read was given
	mtime  atomic.Int64 // the last ModTime reported, in Unix nanoseconds
}

// ModTime returns now, or a nanosecond after the last time it returned if
// that is not later: every stat answers a new time, which tells the
// kernel to drop the pages it holds (FUSE_AUTO_INVAL_DATA).
func (p *Padded) ModTime(now time.Time) time.Time {
	for {
		last := p.mtime.Load()
		t := max(now.UnixNano(), last+1)
		if p.mtime.CompareAndSwap(last, t) {
			return time.Unix(0, t)
		}
	}
}

// paddedSnap is a rendering reads are given: the content (no final
// newline), the size it was padded to, and when a read was first and
// last given it (the monotonic clock).
type paddedSnap struct {
	content      []byte
	size         int64
	first, given time.Time
}

// PaddedContinue is how soon a read must follow the last to be given the
// same rendering, for at most PaddedSnapTTL (reads in a row still get new
// figures that often).
const (
	PaddedContinue = 10 * time.Millisecond
	PaddedSnapTTL  = time.Second
)

// NewPadded returns a Padded file of render's content.
func NewPadded(render func() []byte) *Padded {
	return &Padded{render: render}
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

// Served returns the rendering a read gets (its content without the final
// newline) and the size to pad it to: the one the last read was given
// while reads follow one another within PaddedContinue and it is younger
// than PaddedSnapTTL, else a new one (Snapshot).
func (p *Padded) Served() ([]byte, int64) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.served; s != nil && now.Sub(s.given) < PaddedContinue && now.Sub(s.first) < PaddedSnapTTL {
		s.given = now
		return s.content, max(s.size, p.size.Load())
	}
	content, size := p.Snapshot()
	p.served = &paddedSnap{content: content, size: size, first: now, given: now}
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
