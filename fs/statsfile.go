package fs

import (
	"context"
	"encoding/json"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/featurefs/featurefs/cache"
	"github.com/featurefs/featurefs/extractor"
)

// Stats is the content of .featurefs/stats.
type Stats struct {
	// Source is the bucket's identity.
	Source string `json:"source"`
	// Device is where models run.
	Device string `json:"device"`
	// DType is the element type served.
	DType extractor.DType `json:"dtype"`
	// Cache is the feature store's figures.
	Cache cache.Stats `json:"cache"`
	// Extractor is the extraction service's figures.
	Extractor extractor.Stats `json:"extractor"`
	// FS is the tree's own figures.
	FS TreeStats `json:"fs"`
	// RecentErrors are the last errors, oldest first.
	RecentErrors []ErrorRecord `json:"recent_errors"`
}

// TreeStats counts what the tree did since mount.
type TreeStats struct {
	// Lookups counts name lookups in feature directories.
	Lookups int64 `json:"lookups"`
	// StatLookups counts lookups answered by Stat calls (no complete listing).
	StatLookups int64 `json:"stat_lookups"`
	// ListPages counts bucket List calls.
	ListPages int64 `json:"list_pages"`
	// StatCalls counts bucket Stat calls.
	StatCalls int64 `json:"stat_calls"`
	// Opens counts opens of feature files.
	Opens int64 `json:"opens"`
	// Reads counts reads of feature files that returned data.
	Reads int64 `json:"reads"`
	// ReadBytes counts the bytes those reads returned.
	ReadBytes int64 `json:"read_bytes"`
	// CacheHits counts features served from the cache.
	CacheHits int64 `json:"cache_hits"`
	// CacheMisses counts features not in the cache.
	CacheMisses int64 `json:"cache_misses"`
	// Extractions counts extraction requests made.
	Extractions int64 `json:"extractions"`
	// BadObjects counts distinct bad object versions found.
	BadObjects int64 `json:"bad_objects"`
	// BadObjectHits counts reads refused by the negative cache.
	BadObjectHits int64 `json:"bad_object_hits"`
	// IOErrors counts reads and lookups answered EIO.
	IOErrors int64 `json:"io_errors"`
	// CacheErrors counts failed or inconsistent cache reads and writes.
	CacheErrors int64 `json:"cache_errors"`
	// ListingsCached is the number of prefixes whose listing is cached.
	ListingsCached int `json:"listings_cached"`
	// ListingEntries is the number of entries in those listings.
	ListingEntries int `json:"listing_entries"`
	// BadObjectsKnown is the size of the negative cache.
	BadObjectsKnown int `json:"bad_objects_known"`
}

// ErrorRecord is one recent error.
type ErrorRecord struct {
	// Time is when it happened (RFC 3339, UTC).
	Time string `json:"time"`
	// Key is the object key or prefix concerned.
	Key string `json:"key"`
	// Error is the reason.
	Error string `json:"error"`
}

// Stats returns the current figures.
func (f *FS) Stats() Stats {
	c := &f.stats
	nl, ne := f.listings.size()
	nb, _ := f.bad.size()
	f.errMu.Lock()
	recent := append([]ErrorRecord{}, f.recent...)
	f.errMu.Unlock()
	return Stats{
		Source:    f.identity,
		Device:    f.cfg.Extractor.Device(),
		DType:     f.dtype,
		Cache:     f.cfg.Cache.Stats(),
		Extractor: f.cfg.Extractor.Stats(),
		FS: TreeStats{
			Lookups: c.lookups.Load(), StatLookups: c.statLookups.Load(), ListPages: c.listPages.Load(),
			StatCalls: c.stats.Load(), Opens: c.opens.Load(), Reads: c.reads.Load(), ReadBytes: c.readBytes.Load(),
			CacheHits: c.cacheHits.Load(), CacheMisses: c.cacheMisses.Load(), Extractions: c.extractions.Load(),
			BadObjects: c.badObjects.Load(), BadObjectHits: c.badHits.Load(), IOErrors: c.ioErrors.Load(),
			CacheErrors: c.cacheErrors.Load(), ListingsCached: nl, ListingEntries: ne, BadObjectsKnown: nb,
		},
		RecentErrors: recent,
	}
}

// statsJSON renders Stats, indented, with a final newline.
func (f *FS) statsJSON() []byte {
	b, err := json.MarshalIndent(f.Stats(), "", "  ")
	if err != nil {
		b = []byte(`{"error": "` + err.Error() + `"}`)
	}
	return append(b, '\n')
}

// statsFile is .featurefs/stats. Each open reads a snapshot; it is served
// with direct I/O so that every open sees fresh figures.
type statsFile struct {
	gofs.Inode
	readOnly
	fs *FS
}

var _ = (gofs.NodeGetattrer)((*statsFile)(nil))
var _ = (gofs.NodeOpener)((*statsFile)(nil))
var _ = (gofs.NodeReader)((*statsFile)(nil))

// statsHandle is one open's snapshot.
type statsHandle struct{ data []byte }

// Getattr reports the size of a fresh snapshot.
func (sf *statsFile) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	size := 0
	if h, ok := fh.(*statsHandle); ok {
		size = len(h.data)
	} else {
		size = len(sf.fs.statsJSON())
	}
	fileAttr(&out.Attr, int64(size), sf.fs.now())
	out.SetTimeout(0)
	return 0
}

// Open takes a snapshot.
func (sf *statsFile) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if openForWrite(flags) {
		return nil, 0, syscall.EROFS
	}
	return &statsHandle{data: sf.fs.statsJSON()}, fuse.FOPEN_DIRECT_IO, 0
}

// Read returns part of the open's snapshot.
func (sf *statsFile) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h, ok := fh.(*statsHandle)
	if !ok {
		h = &statsHandle{data: sf.fs.statsJSON()}
	}
	return fuse.ReadResultData(sliceAt(h.data, dest, off)), 0
}
