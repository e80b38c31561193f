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

	"github.com/featurefs/featurefs/fs/figures"
	"github.com/featurefs/featurefs/fs/internal/lru"
)

// Stats returns the current figures: the pipeline's, with the tree's own
// (counters: lookups, opens, reads, listings, errors answered by kind)
// filled in.
func (f *FS) Stats() figures.Stats {
	c := &f.stats
	n := f.ns.Counts()
	st := f.p.Stats()
	t := &st.FS
	t.Lookups, t.StatLookups, t.ListPages = c.lookups.Load(), n.StatLookups, n.ListPages
	t.StatCalls, t.Opens, t.Reads, t.ReadBytes = n.StatCalls, c.opens.Load(), c.reads.Load(), c.readBytes.Load()
	t.KernelInvalidations, t.KernelPageDrops, t.IOErrors = c.invalidations.Load(), c.contentDrops.Load(), c.ioErrors.Load()
	t.RecentReads = c.recentReads.Load()
	t.PassthroughOpens = c.passthroughOpens.Load()
	t.PassthroughVerifySeconds = time.Duration(c.passthroughVerifyNanos.Load()).Seconds()
	var sizes [len(figures.ReadSizeBounds) + 1]int64
	for i := range sizes {
		sizes[i] = c.readSizes[i].Load()
	}
	t.ReadSizes = figures.ReadSizesOf(sizes)
	t.ListingsCached, t.ListingEntries = n.Listings, n.ListingEntries
	t.ListingBytes, t.ListingsDropped, t.ListedAhead = n.ListingBytes, n.ListingsDropped, n.ListedAhead
	t.CrowdedLookups = n.CrowdedLookups
	t.KernelNodes, t.KernelForgets = f.budget.nodes.Load(), f.budget.forgotten.Load()
	t.NodeBytes = t.KernelNodes * nodeBytes
	if st.Archives != nil {
		t.ArchiveIndexBytes = st.Archives.IndexBytes
	}
	t.MetadataBytes, t.MetadataMaxBytes = t.ListingBytes+t.NodeBytes+t.ArchiveIndexBytes, f.ns.MetadataBytes()
	st.BytesServed = st.FS.ReadBytes
	st.Errors = c.errors.Counts()
	st.Memory = f.memoryStats(&st)
	return st
}

// memoryStats is the stats file's "memory": the process's figures and
// every bound the mount has, with what it holds now (docs/RELIABILITY.md,
// "Memory bounds", lists them with their defaults; the names here are
// that table's).
func (f *FS) memoryStats(st *figures.Stats) *figures.MemoryStats {
	m := &figures.MemoryStats{}
	figures.ReadProcessMemory(m)
	m.IdleReleases = f.stats.memoryReleases.Load()
	t := &st.FS
	add := func(name, flag string, max int64, used *int64) {
		m.Bounds = append(m.Bounds, figures.MemoryBound{Name: name, Flag: flag, MaxBytes: max, UsedBytes: used})
		m.BoundsTotalBytes += max
	}
	add("metadata", "--metadata-cache-size", t.MetadataMaxBytes, figures.Used(t.MetadataBytes))
	if xm := st.Extractor.Memory; xm != nil {
		m.CHeapInUseBytes, m.CHeapFreeBytes = xm.CHeapInUseBytes, xm.CHeapFreeBytes
		m.SessionBytes, m.BusyTrims = xm.SessionBytes, xm.BusyTrims
		add("decode", "--decode-memory", xm.DecodeMaxBytes, figures.Used(xm.DecodeBytes))
		add("fetched_objects", "--fetch-memory", xm.FetchMaxBytes, figures.Used(xm.FetchedBytes))
		if xm.GPUPixelMaxBytes > 0 {
			add("gpu_decoded_pixels", "--decode-memory", xm.GPUPixelMaxBytes, figures.Used(xm.GPUPixelBytes))
		}
	}
	add("prefetch", "", st.Prefetch.MaxBytes, figures.Used(st.Prefetch.InFlightBytes))
	hu, hm := f.p.HandoffMemory()
	add("handoff", "", hm, figures.Used(hu))
	add("cache_write_queue", "", t.WriteQueueMaxBytes, figures.Used(t.WriteQueuedBytes))
	ru, rm := f.ns.RecentMemory()
	add("recent_reads", "", rm, figures.Used(ru))
	add("badger", "", st.Cache.BadgerMemoryMaxBytes, nil)
	return m
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

// statsFile is .featurefs/stats. Each read the kernel sends takes a
// snapshot. The kernel keeps the file's pages (noOpen), but every stat and
// every read(2) asks for its attributes again (statsAttrTimeout, with
// FUSE_AUTO_INVAL_DATA), and each answer gives a new mtime (mtime), so the
// kernel drops its pages and reads fresh figures; and each read, once
// answered, tells the kernel to drop the pages it filled (the kernel keeps
// attributes for one of its clock ticks, 1-10 ms, and a second read within
// it would find them). So that the
// size stat reports is the size a read then returns (cat, cp and readers
// that trust st_size must not truncate), the file is the snapshot's JSON
// followed by spaces and a newline up to the file's size: a high-water mark
// that only grows, with headroom (statsSize). Figures that change between a
// stat and a read change the content, not its length; when the JSON
// outgrows the size, the size grows (whitespace after a JSON value is
// still valid JSON). The file is a few kilobytes, and the kernel may read
// it in more than one request (a page, then the rest): a read at offset 0
// takes the snapshot, and the reads after it from the same thread (the
// request's caller) within statsSnapTTL get the rest of that snapshot,
// not of a new one, so that no read(2) returns the halves of two.
//
// .featurefs/failures (FailuresFile) is served the same way, with its own
// content (render).
type statsFile struct {
	gofs.Inode
	readOnly
	noOpen
	fs     *FS
	render func() []byte // the content, ending in a newline
	size   atomic.Int64  // the file's size; never shrinks
	last   atomic.Int64  // the last mtime reported, in Unix nanoseconds
	// snaps is the snapshot each recent reader (by the thread id FUSE
	// gives) read from offset 0, for its reads further on: at most
	// statsSnapReaders, each kept statsSnapTTL.
	snaps *lru.LRU[uint32, statsSnap]
}

// statsSnap is one reader's snapshot: the JSON (no final newline), the
// size it was padded to, and when it was taken.
type statsSnap struct {
	json []byte
	size int64
	at   time.Time
}

// Bounds on the snapshots kept for readers part way through the file.
const (
	statsSnapReaders = 64
	statsSnapTTL     = time.Second
)

// newStatsFile returns a .featurefs file whose content render makes.
func newStatsFile(f *FS, render func() []byte) *statsFile {
	return &statsFile{fs: f, noOpen: noOpen{f}, render: render, snaps: lru.New[uint32, statsSnap](statsSnapReaders)}
}

var _ = (gofs.NodeGetattrer)((*statsFile)(nil))
var _ = (gofs.NodeReader)((*statsFile)(nil))

// statsAttrTimeout is how long the kernel may keep the stats file's
// attributes: a nanosecond, so that every stat asks (go-fuse replaces a
// zero timeout with the mount's --metadata-ttl). The kernel rounds it up
// to one of its clock ticks.
const statsAttrTimeout = time.Nanosecond

// statsSize returns the padded size for JSON of n bytes: n plus a quarter
// (at least 1 KiB) of headroom, rounded up to 1 KiB, so that the size
// changes only when the figures grow by that much (new lanes, recent
// errors), not when a counter gains a digit.
func statsSize(n int) int64 {
	const kib = 1024
	return int64((n+max(n/4, kib)+kib-1)/kib) * kib
}

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

// mtime returns the mount's clock, or a nanosecond after the last mtime
// reported if that is not later: every answer differs from the one
// before, which tells the kernel to drop the pages it holds.
func (sf *statsFile) mtime() time.Time {
	now := sf.fs.now().UnixNano()
	for {
		last := sf.last.Load()
		t := max(now, last+1)
		if sf.last.CompareAndSwap(last, t) {
			return time.Unix(0, t)
		}
	}
}

// readerSnapshot returns the snapshot a read at off gets: a new one at
// offset 0 (kept for the caller), the caller's own from offset 0 further
// on while it is recent, else a new one.
func (sf *statsFile) readerSnapshot(ctx context.Context, off int64) ([]byte, int64) {
	caller, ok := fuse.FromContext(ctx)
	if ok && off > 0 {
		if s, kept := sf.snaps.Get(caller.Pid); kept && sf.fs.now().Sub(s.at) < statsSnapTTL {
			return s.json, s.size
		}
	}
	json, size := sf.snapshot()
	if ok {
		sf.snaps.Put(caller.Pid, statsSnap{json: json, size: size, at: sf.fs.now()}, 1)
	}
	return json, size
}

// Getattr reports the file's size, grown first if the figures now need
// more.
func (sf *statsFile) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	_, size := sf.snapshot()
	fileAttr(&out.Attr, size, sf.mtime())
	out.SetTimeout(statsAttrTimeout)
	return 0
}

// Read returns part of a new snapshot padded to the file's size: the JSON,
// spaces, and a newline as the last byte.
func (sf *statsFile) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	json, size := sf.readerSnapshot(ctx, off)
	if off < 0 || off >= size {
		return fuse.ReadResultData(nil), 0
	}
	n := min(int64(len(dest)), size-off)
	out := dest[:n]
	c := 0
	if off < int64(len(json)) {
		c = copy(out, json[off:])
	}
	for i := c; i < len(out); i++ {
		out[i] = ' '
	}
	if off+n == size {
		out[n-1] = '\n'
	}
	sf.fs.dropPagesLater(&sf.Inode, nil)
	return fuse.ReadResultData(out), 0
}
