package fs

import (
	"context"
	"encoding/json"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Stats returns the current figures: the pipeline's, with the tree's own
// (lookups, opens, reads, listings) filled in.
func (f *FS) Stats() Stats {
	c := &f.stats
	nl, ne := f.listings.Size()
	st := f.p.Stats()
	t := &st.FS
	t.Lookups, t.StatLookups, t.ListPages = c.lookups.Load(), c.statLookups.Load(), c.listPages.Load()
	t.StatCalls, t.Opens, t.Reads, t.ReadBytes = c.stats.Load(), c.opens.Load(), c.reads.Load(), c.readBytes.Load()
	t.KernelInvalidations, t.IOErrors = c.invalidations.Load(), c.ioErrors.Load()
	t.ListingsCached, t.ListingEntries = nl, ne
	st.BytesServed = st.FS.ReadBytes
	return st
}

// statsJSON renders Stats, indented, with a final newline.
func (f *FS) statsJSON() []byte { return indentJSON(f.Stats()) }

// indentJSON renders v indented with a final newline, or an object naming
// the error when v cannot be rendered: the content of the files under
// .featurefs (stats, failures).
func indentJSON(v any) []byte {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		b = []byte(`{"error": ` + strconv.Quote(err.Error()) + `}`)
	}
	return append(b, '\n')
}

// statsFile is .featurefs/stats. Each open reads a snapshot, served with
// direct I/O so that every open sees fresh figures. So that the size stat
// reports is the size a read then returns (cat, cp and readers that trust
// st_size must not truncate), the file is the snapshot's JSON followed by
// spaces and a newline up to the file's size: a high-water mark that only
// grows, with headroom (statsSize). Figures that change between a stat and
// an open change the content, not its length; when the JSON outgrows the
// size, the size grows and every handle's content with it (whitespace after
// a JSON value is still valid JSON). The kernel never caches the
// attributes (statsAttrTimeout).
//
// .featurefs/failures (FailuresFile) is served the same way, with its own
// content (render).
type statsFile struct {
	gofs.Inode
	readOnly
	fs     *FS
	render func() []byte // the content, ending in a newline
	size   atomic.Int64  // the file's size; never shrinks
}

var _ = (gofs.NodeGetattrer)((*statsFile)(nil))
var _ = (gofs.NodeOpener)((*statsFile)(nil))
var _ = (gofs.NodeReader)((*statsFile)(nil))

// statsAttrTimeout is how long the kernel may keep the stats file's
// attributes: a nanosecond, so that every stat asks (go-fuse replaces a
// zero timeout with the mount's --metadata-ttl).
const statsAttrTimeout = time.Nanosecond

// statsSize returns the padded size for JSON of n bytes: n plus a quarter
// (at least 1 KiB) of headroom, rounded up to 1 KiB, so that the size
// changes only when the figures grow by that much (new lanes, recent
// errors), not when a counter gains a digit.
func statsSize(n int) int64 {
	const kib = 1024
	return int64((n+max(n/4, kib)+kib-1)/kib) * kib
}

// statsHandle is one open's snapshot: the JSON without its final newline.
type statsHandle struct{ json []byte }

// snapshot renders the stats and grows the file's size when the JSON
// outgrew it. It returns the JSON without its final newline and the size.
func (sf *statsFile) snapshot() ([]byte, int64) {
	b := sf.render()
	for {
		cur := sf.size.Load()
		if int64(len(b)) <= cur || sf.size.CompareAndSwap(cur, statsSize(len(b))) {
			break
		}
	}
	return b[:len(b)-1], sf.size.Load()
}

// Getattr reports the file's size, grown first if the figures now need
// more. It is the same for every handle (go-fuse may pass any open handle
// to a path's stat).
func (sf *statsFile) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	_, size := sf.snapshot()
	fileAttr(&out.Attr, size, sf.fs.now())
	out.SetTimeout(statsAttrTimeout)
	return 0
}

// Open takes a snapshot.
func (sf *statsFile) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if openForWrite(flags) {
		return nil, 0, syscall.EROFS
	}
	b, _ := sf.snapshot()
	return &statsHandle{json: b}, fuse.FOPEN_DIRECT_IO, 0
}

// Read returns part of the open's snapshot padded to the file's size: the
// JSON, spaces, and a newline as the last byte.
func (sf *statsFile) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h, ok := fh.(*statsHandle)
	if !ok {
		b, _ := sf.snapshot()
		h = &statsHandle{json: b}
	}
	size := sf.size.Load()
	if off < 0 || off >= size {
		return fuse.ReadResultData(nil), 0
	}
	n := min(int64(len(dest)), size-off)
	out := dest[:n]
	c := 0
	if off < int64(len(h.json)) {
		c = copy(out, h.json[off:])
	}
	for i := c; i < len(out); i++ {
		out[i] = ' '
	}
	if off+n == size {
		out[n-1] = '\n'
	}
	return fuse.ReadResultData(out), 0
}
