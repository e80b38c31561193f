package fs

import (
	"context"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/featurefs/featurefs/fs/figures"
	"github.com/featurefs/featurefs/fs/views"
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
	hu, hm := f.p.HandoffMemory()
	ru, rm := f.ns.RecentMemory()
	st.Memory = st.MemoryOf(c.memoryReleases.Load(), [2]int64{hu, hm}, [2]int64{ru, rm})
	return st
}

// statsJSON renders Stats, indented, with a final newline.
func (f *FS) statsJSON() []byte { return figures.IndentJSON(f.Stats()) }

// statsFile is .featurefs/stats: a views.Padded file (fresh figures for a
// read after a pause, padded to a size that only grows). The kernel keeps
// the file's pages (noOpen), but every stat and every read(2) asks for its
// attributes again (statsAttrTimeout, with FUSE_AUTO_INVAL_DATA), and each
// answer gives a new mtime (views.Padded.ModTime), so the kernel drops its pages and
// reads fresh figures; and each read, once answered, tells the kernel to
// drop the pages it filled (the kernel keeps attributes for one of its
// clock ticks, 1-10 ms, and a second read within it would find them). The
// kernel asks for a reader's bytes in several requests, from any offset,
// and serves pages one reader's request filled to another: reads in a row
// are given one rendering (views.Padded.Served), so that no read(2) gets
// pieces of two (CI runs parsed `"get_e` and `"loaded_ "loaded_unix"`:
// the start of one rendering and the rest of a newer one).
//
// .featurefs/failures (FailuresFile) is served the same way, with its own
// content.
type statsFile struct {
	gofs.Inode
	readOnly
	noOpen
	fs   *FS
	file *views.Padded
}

// newStatsFile returns a .featurefs file whose content render makes.
func newStatsFile(f *FS, render func() []byte) *statsFile {
	return &statsFile{fs: f, noOpen: noOpen{f}, file: views.NewPadded(render)}
}

var _ = (gofs.NodeGetattrer)((*statsFile)(nil))
var _ = (gofs.NodeReader)((*statsFile)(nil))

// statsAttrTimeout is how long the kernel may keep the stats file's
// attributes: a nanosecond, so that every stat asks (go-fuse replaces a
// zero timeout with the mount's --metadata-ttl). The kernel rounds it up
// to one of its clock ticks.
const statsAttrTimeout = time.Nanosecond

// Getattr reports the file's size, grown first if the figures now need
// more.
func (sf *statsFile) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	_, size := sf.file.Snapshot()
	fileAttr(&out.Attr, size, sf.file.ModTime(sf.fs.now()))
	out.SetTimeout(statsAttrTimeout)
	return 0
}

// Read returns part of the rendering reads are given now
// (views.Padded.Served), padded to the file's size.
func (sf *statsFile) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	content, size := sf.file.Served()
	out := views.ReadPadded(content, size, dest, off)
	sf.fs.dropPagesLater(&sf.Inode, nil)
	return fuse.ReadResultData(out), 0
}
