package figures

import (
	"encoding/json"
	"strconv"
	"syscall"

	"github.com/featurefs/featurefs/cache"
	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/fs/featurestore"
)

// Stats is the content of .featurefs/stats.
type Stats struct {
	// Source is the bucket's identity.
	Source string `json:"source"`
	// Device is where models run.
	Device string `json:"device"`
	// DType is the element type served.
	DType api.DType `json:"dtype"`
	// Cache is the feature store's figures.
	Cache cache.Stats `json:"cache"`
	// Extractor is the extraction service's figures.
	Extractor api.Stats `json:"extractor"`
	// FS is the tree's own figures.
	FS TreeStats `json:"fs"`
	// RecentErrors are the last errors, oldest first.
	RecentErrors []ErrorRecord `json:"recent_errors"`
	// Prefetch is background extraction's figures.
	Prefetch PrefetchStats `json:"prefetch"`

	// UptimeSeconds is the time since the pipeline (the tree, the
	// server) was created.
	UptimeSeconds float64 `json:"uptime_seconds"`
	// CPUSeconds is the CPU time the whole process has used since it
	// started, user plus system (getrusage RUSAGE_SELF): with the other
	// figures, a benchmark reads it from one place. 0 where the system
	// cannot tell.
	CPUSeconds float64 `json:"cpu_seconds"`
	// Extraction summarizes the extractions: rate, batching, outcomes.
	Extraction ExtractionStats `json:"extraction"`
	// Queue is the extraction queue's depth now, by priority.
	Queue QueueStats `json:"queue"`
	// CacheHitRatio is the share of feature lookups the cache answered:
	// fs.cache_hits / (fs.cache_hits + fs.cache_misses); 0 before any.
	// Reads the kernel answers from its page cache are not counted.
	CacheHitRatio float64 `json:"cache_hit_ratio"`
	// Store is what the object store was asked for.
	Store StoreStats `json:"store"`
	// BytesServed counts the bytes reads of feature files returned
	// (fs.read_bytes).
	BytesServed int64 `json:"bytes_served"`
	// Errors counts the errors answered to readers, by kind.
	Errors ErrorCounts `json:"errors"`
	// Models are the models served, each at its current version
	// (docs/MODELS.md: a reload replaces one).
	Models []ModelStats `json:"models"`
	// FeatureStore is the feature store's figures (--feature-store); absent
	// without one.
	FeatureStore *FeatureStoreStats `json:"feature_store,omitempty"`
	// Archives is the archive figures of a source showing archives as
	// directories (fs/archive: index lookups and builds, GETs, bytes,
	// streams); absent for one that shows none (--archives off).
	Archives *ArchiveStats `json:"archives,omitempty"`
	// Memory is where the process's memory is, and every memory bound
	// with what it holds (a mount's stats; absent from a server's).
	Memory *MemoryStats `json:"memory,omitempty"`
}

// FeatureStoreStats are the feature store's figures as this process sees
// them.
type FeatureStoreStats struct {
	// Store names the feature store.
	Store string `json:"store"`
	// StoreOnly is true when features are never computed here.
	StoreOnly bool `json:"store_only"`
	featurestore.Stats
}

// ExtractionStats summarizes the extractions since mount.
type ExtractionStats struct {
	// RatePerSecond is the extractions completed per second over the last
	// RateWindowSeconds (shorter right after mount).
	RatePerSecond float64 `json:"rate_per_second"`
	// RateWindowSeconds is the span RatePerSecond is measured over.
	RateWindowSeconds float64 `json:"rate_window_seconds"`
	// Completed counts extractions that returned a feature (reads,
	// prefetch and warm-up alike).
	Completed int64 `json:"completed"`
	// Failed counts extractions that returned an error.
	Failed int64 `json:"failed"`
	// MeanBatchSize is the mean number of images per model run:
	// BatchedItems / Batches; 0 before the first batch.
	MeanBatchSize float64 `json:"mean_batch_size"`
	// Batches counts model runs.
	Batches int64 `json:"batches"`
	// BatchedItems counts the images those runs computed.
	BatchedItems int64 `json:"batched_items"`
}

// QueueStats is the extraction queue now.
type QueueStats struct {
	// Foreground is the requests readers wait on, queued for a fetch worker.
	Foreground int `json:"foreground"`
	// Background is the prefetch and warm-up requests queued for a worker.
	Background int `json:"background"`
	// DecodedWaiting is the inputs decoded and waiting for a batch.
	DecodedWaiting int `json:"decoded_waiting"`
	// Running is the inputs in the model run now.
	Running int `json:"running"`
	// InFlight is every distinct request not yet answered.
	InFlight int `json:"in_flight"`
}

// StoreStats counts the object store calls of the mount.
type StoreStats struct {
	// Gets counts object fetches.
	Gets int64 `json:"gets"`
	// GetErrors counts failed fetches.
	GetErrors int64 `json:"get_errors"`
	// BytesFetched counts the bytes fetches returned.
	BytesFetched int64 `json:"bytes_fetched"`
	// ListCalls counts listing pages asked for.
	ListCalls int64 `json:"list_calls"`
	// ListErrors counts failed listing calls.
	ListErrors int64 `json:"list_errors"`
	// StatCalls counts object metadata calls.
	StatCalls int64 `json:"stat_calls"`
	// StatErrors counts failed metadata calls other than not-found.
	StatErrors int64 `json:"stat_errors"`
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
	// Opens counts the OPEN requests of files the kernel sent: it stops
	// sending them after the first answer (files are never opened:
	// package fs, noOpen), so a mount counts one, or a few that raced it;
	// with passthrough on, one per open(2) of a file.
	Opens int64 `json:"opens"`
	// PassthroughOpens counts opens of feature files answered with the
	// cache's file of the feature (FUSE passthrough, --passthrough): the
	// kernel reads it without the mount, so its reads are not counted in
	// Reads. PassthroughVerifySeconds is the time spent verifying those
	// files' chunk checksums before handing them over.
	PassthroughOpens         int64   `json:"passthrough_opens"`
	PassthroughVerifySeconds float64 `json:"passthrough_verify_seconds"`
	// Reads counts reads of feature files that returned data.
	Reads int64 `json:"reads"`
	// ReadBytes counts the bytes those reads returned.
	ReadBytes int64 `json:"read_bytes"`
	// CacheHits counts features served from the cache: read whole, or a
	// file's read at offset 0 answered from part of a cached feature; a
	// feature still queued for its cache write counts too
	// (CacheWriteStats.WriteQueueReads).
	CacheHits int64 `json:"cache_hits"`
	// CacheMisses counts features not in the cache.
	CacheMisses int64 `json:"cache_misses"`
	// CachePartialReads counts reads of feature files answered from the
	// part of a cached feature they asked for (a file's first read after
	// a restart, pages the kernel dropped), without reading it whole.
	CachePartialReads int64 `json:"cache_partial_reads"`
	// HandoffReads counts reads of feature files answered from the
	// hand-off buffer: a feature a read or prefetch just computed, copied
	// from memory instead of decompressed from the cache.
	HandoffReads int64 `json:"handoff_reads"`
	// RecentReads counts reads of feature files answered from the tree's
	// recent features: a feature a read of the same file computed, kept
	// in memory (bounded) for the file's next reads.
	RecentReads int64 `json:"recent_reads"`
	// ReadSizes counts the FUSE READ requests of feature files by the size
	// the kernel asked for (every request, answered or failed): how many
	// requests a file takes (max_pages, readahead).
	ReadSizes ReadSizes `json:"read_sizes"`
	// Extractions counts extraction requests made.
	Extractions int64 `json:"extractions"`
	// BadObjects counts distinct bad object versions found.
	BadObjects int64 `json:"bad_objects"`
	// BadObjectHits counts reads refused by the negative cache.
	BadObjectHits int64 `json:"bad_object_hits"`
	// KernelInvalidations counts feature file entries the kernel was told
	// to drop: a new listing showed their object deleted or changed, or
	// their directory could not be listed whole to check them.
	KernelInvalidations int64 `json:"kernel_invalidations"`
	// KernelPageDrops counts feature files whose pages the kernel was told
	// to drop (FUSE_NOTIFY_INVAL_INODE): their object changed since the
	// kernel looked them up.
	KernelPageDrops int64 `json:"kernel_page_drops"`
	// IOErrors counts reads and lookups answered EIO.
	IOErrors int64 `json:"io_errors"`
	// CacheErrors counts failed or inconsistent cache reads and writes.
	CacheErrors int64 `json:"cache_errors"`
	// ListingsCached is the number of prefixes whose listing is cached.
	ListingsCached int `json:"listings_cached"`
	// ListingEntries is the number of entries in those listings.
	ListingEntries int `json:"listing_entries"`
	// MetadataBytes is what the metadata budget counts now: ListingBytes,
	// NodeBytes and ArchiveIndexBytes; MetadataMaxBytes is the budget
	// (--metadata-cache-size).
	MetadataBytes    int64 `json:"metadata_bytes"`
	MetadataMaxBytes int64 `json:"metadata_max_bytes"`
	// ListingBytes is the bytes of the cached listings.
	ListingBytes int64 `json:"listing_bytes"`
	// KernelNodes is the entries the tree holds for the kernel (go-fuse
	// inodes under the layer directories); NodeBytes what they count in
	// the budget.
	KernelNodes int64 `json:"kernel_nodes"`
	NodeBytes   int64 `json:"node_bytes"`
	// ArchiveIndexBytes is what the archive indexes kept in memory cost
	// (archives.index_bytes: fs/archive, bounded by a quarter of the
	// budget, and one larger index by half of it).
	ArchiveIndexBytes int64 `json:"archive_index_bytes"`
	// ListingsDropped counts listings dropped, coldest first, for the
	// budget.
	ListingsDropped int64 `json:"listings_dropped"`
	// CrowdedLookups counts lookups answered by Stat calls, not a listing
	// read for them, as the listings filled the budget.
	CrowdedLookups int64 `json:"crowded_lookups"`
	// KernelForgets counts the kernel's entries of feature files it was
	// told to drop for the budget (it then forgets their inodes).
	KernelForgets int64 `json:"kernel_entries_forgotten"`
	// ListedAhead counts directories listed in the background ahead of a
	// walk (the subdirectories after the one being read).
	ListedAhead int64 `json:"listings_read_ahead"`
	// BadObjectsKnown is the size of the negative cache.
	BadObjectsKnown int `json:"bad_objects_known"`
	// CacheWriteStats are the figures of the cache's write-behind queue:
	// features computed wait there for their cache write, off the read
	// path.
	CacheWriteStats
}

// CacheWriteStats are the figures of the cache's write-behind queue (the
// cache_write fields of the stats file's "fs" object).
type CacheWriteStats struct {
	// WriteQueued is the features waiting for, or in, their cache write
	// now; WriteQueuedBytes their bytes.
	WriteQueued      int   `json:"cache_write_queued"`
	WriteQueuedBytes int64 `json:"cache_write_queued_bytes"`
	// WriteQueuePeakBytes is the most bytes queued at once (the
	// high-water mark); WriteQueueMaxBytes the bound.
	WriteQueuePeakBytes int64 `json:"cache_write_queue_peak_bytes"`
	WriteQueueMaxBytes  int64 `json:"cache_write_queue_max_bytes"`
	// BackgroundWrites counts the cache writes done by the writers, off
	// the read path; InlineWrites those done by the producer itself,
	// because the queue had no room for a reader's feature (or the
	// feature is larger than the bound, or the queue is closed).
	BackgroundWrites int64 `json:"cache_writes_background"`
	InlineWrites     int64 `json:"cache_writes_inline"`
	// SkippedWrites counts features a read computed while the queue was
	// full: served, not cached.
	SkippedWrites int64 `json:"cache_writes_skipped"`
	// WriteWaits counts background producers (prefetch, warm-up) that
	// waited for room in the queue.
	WriteWaits int64 `json:"cache_write_waits"`
	// WriteQueueReads counts feature lookups answered from the queue: a
	// feature computed but not yet written (counted as cache hits too).
	WriteQueueReads int64 `json:"cache_write_queue_reads"`
	// DroppedWrites counts queued features never written: Close's wait
	// for the writes timed out (the cache was stuck).
	DroppedWrites int64 `json:"cache_writes_dropped"`
}

// PrefetchStats are prefetch's figures (the "prefetch" object of
// .featurefs/stats).
type PrefetchStats struct {
	// Mode is off, dir or tree.
	Mode string `json:"mode"`
	// Walks counts walks started; WalksDone those finished (cancelled ones
	// included).
	Walks     int64 `json:"walks"`
	WalksDone int64 `json:"walks_done"`
	// WalksDropped counts touches dropped because the walk queue was full.
	WalksDropped int64 `json:"walks_dropped"`
	// WalksLimited counts walks stopped by the limit or the cache size.
	WalksLimited int64 `json:"walks_limited"`
	// Queued is the walks waiting now; PeakQueued the most seen.
	Queued     int `json:"queued"`
	PeakQueued int `json:"peak_queued"`
	// ListPages counts listing pages walks read.
	ListPages int64 `json:"list_pages"`
	// Objects counts image objects walks found; Cached those skipped as
	// already cached; Bad those skipped as known bad.
	Objects int64 `json:"objects"`
	Cached  int64 `json:"cached"`
	Bad     int64 `json:"bad"`
	// Extracted, Failed and Cancelled count extractions prefetch finished.
	Extracted int64 `json:"extracted"`
	Failed    int64 `json:"failed"`
	Cancelled int64 `json:"cancelled"`
	// InFlight is the extractions in flight now, PeakInFlight the most
	// seen, InFlightLimit the current bound.
	InFlight      int `json:"in_flight"`
	PeakInFlight  int `json:"peak_in_flight"`
	InFlightLimit int `json:"in_flight_limit"`
	// InFlightBytes is the bytes they hold (estimated), PeakInFlightBytes
	// the most seen, MaxBytes the bound.
	InFlightBytes     int64 `json:"in_flight_bytes"`
	PeakInFlightBytes int64 `json:"peak_in_flight_bytes"`
	MaxBytes          int64 `json:"max_bytes"`
}

// ReadSizes is a histogram of READ request sizes: each request counts in
// the first bucket its size fits.
type ReadSizes struct {
	// Le4K counts requests of at most 4 KiB.
	Le4K int64 `json:"le_4k"`
	// Le32K counts requests of more than 4 KiB and at most 32 KiB.
	Le32K int64 `json:"le_32k"`
	// Le128K counts requests of more than 32 KiB and at most 128 KiB.
	Le128K int64 `json:"le_128k"`
	// Le512K counts requests of more than 128 KiB and at most 512 KiB.
	Le512K int64 `json:"le_512k"`
	// Le1M counts requests of more than 512 KiB and at most 1 MiB.
	Le1M int64 `json:"le_1m"`
	// Over1M counts requests of more than 1 MiB.
	Over1M int64 `json:"gt_1m"`
}

// ReadSizeBounds are ReadSizes' upper bounds in bytes, bucket by bucket;
// the last bucket (Over1M) has none.
var ReadSizeBounds = [...]int64{4 << 10, 32 << 10, 128 << 10, 512 << 10, 1 << 20}

// ReadSizeBucket returns the index of the bucket a request of size bytes
// counts in: 0 for Le4K through len(ReadSizeBounds) for Over1M.
func ReadSizeBucket(size int) int {
	for i, b := range ReadSizeBounds {
		if int64(size) <= b {
			return i
		}
	}
	return len(ReadSizeBounds)
}

// ReadSizesOf returns the histogram of counts, indexed as ReadSizeBucket.
func ReadSizesOf(counts [len(ReadSizeBounds) + 1]int64) ReadSizes {
	return ReadSizes{Le4K: counts[0], Le32K: counts[1], Le128K: counts[2], Le512K: counts[3], Le1M: counts[4], Over1M: counts[5]}
}

// Counts returns the buckets in order, indexed as ReadSizeBucket.
func (r ReadSizes) Counts() [len(ReadSizeBounds) + 1]int64 {
	return [...]int64{r.Le4K, r.Le32K, r.Le128K, r.Le512K, r.Le1M, r.Over1M}
}

// ReadSizeLabels are the buckets' names (their JSON keys), indexed as
// ReadSizeBucket.
var ReadSizeLabels = [...]string{"le_4k", "le_32k", "le_128k", "le_512k", "le_1m", "gt_1m"}

// ProcessCPUSeconds returns the process's user plus system CPU seconds, or
// 0 when getrusage fails.
func ProcessCPUSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

// ArchiveStats are an archive source's figures (fs/archive
// Bucket.Stats; .featurefs/stats "archives", Prometheus featurefs_archive_*).
type ArchiveStats struct {
	// IndexMemoryHits counts index lookups answered by the indexes kept in
	// memory.
	IndexMemoryHits int64 `json:"index_memory_hits"`
	// IndexStoreHits counts indexes read from the IndexStore (the feature
	// cache: Badger) instead of the archive.
	IndexStoreHits int64 `json:"index_store_hits"`
	// IndexBuilds counts indexes read from archives with ranged GETs (a
	// tar header walk, a zip central directory).
	IndexBuilds int64 `json:"index_builds"`
	// IndexStreamBuilds counts tar indexes built in the pass of a
	// streaming read (Stream).
	IndexStreamBuilds int64 `json:"index_stream_builds"`
	// RangedGets counts the ranged GETs of archives (indexes, members,
	// read-ahead chunks).
	RangedGets int64 `json:"ranged_gets"`
	// StreamGets counts the streaming GETs of archives (Stream: one per
	// archive read by warm or prefetch).
	StreamGets int64 `json:"stream_gets"`
	// BytesRead counts the archive bytes those GETs returned.
	BytesRead int64 `json:"bytes_read"`
	// StreamedMembers counts the members Stream handed over with their
	// bytes.
	StreamedMembers int64 `json:"streamed_members"`
	// StreamBreaks counts streams that broke part way (the members left
	// were read with ranged GETs).
	StreamBreaks int64 `json:"stream_breaks"`
	// BadArchives counts archives found bad (each with one log line).
	BadArchives int64 `json:"bad_archives"`
	// IndexBytes is what the archive indexes kept in memory cost now;
	// fs.metadata_bytes counts it (as FSStats.ArchiveIndexBytes).
	IndexBytes int64 `json:"index_bytes"`
}

// ModelStats is one model's version in the stats.
type ModelStats struct {
	// Name is the model's directory name.
	Name string `json:"name"`
	// Digest is the SHA-256 of the model file served.
	Digest string `json:"digest"`
	// LoadedAt is when that version was loaded (RFC 3339); empty for a
	// model feature servers run.
	LoadedAt string `json:"loaded_at,omitempty"`
	// LoadedUnix is LoadedAt in seconds since 1970; 0 when empty.
	LoadedUnix float64 `json:"loaded_unix"`
}

// IndentJSON renders v indented with a final newline, or an object naming
// the error when v cannot be rendered: the content of the files under
// .featurefs (stats, failures).
func IndentJSON(v any) []byte {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		b = []byte(`{"error": ` + strconv.Quote(err.Error()) + `}`)
	}
	return append(b, '\n')
}
