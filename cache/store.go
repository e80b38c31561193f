package cache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/dgraph-io/badger/v4"

	"github.com/dgraph-io/badger/v4/options"
	"github.com/featurefs/featurefs/cache/codec"
	"github.com/featurefs/featurefs/extractor/spec"
)

// Lock order (outermost first): gate, a key stripe, writeGate or diskMu
// (never both: diskMu is held only around a stat and a statfs), mu.
// mu is never held across a Badger call.

// DefaultMaxBytes is the byte budget used when Options.MaxBytes is zero.
const DefaultMaxBytes int64 = 10 << 30

// Errors returned by the store; match them with errors.Is.
var (
	// ErrLocked means another process holds the cache directory.
	ErrLocked = errors.New("cache: directory locked")
	// ErrTooLarge means a value exceeds what the store accepts (the byte
	// budget, or the value-log file size).
	ErrTooLarge = errors.New("cache: value too large")
	// ErrClosed means the store was used after Close. It wraps
	// spec.ErrClosed, which every "used after Close" error matches.
	ErrClosed = fmt.Errorf("cache: store %w", spec.ErrClosed)
)

// Options configures a Store.
type Options struct {
	// Dir is the cache directory; it is created if missing. Only one
	// process at a time may open it.
	Dir string
	// MaxBytes is the budget for stored value bytes (the sum of the lengths
	// of the values Put); least recently used entries are evicted to stay
	// within it. Zero means DefaultMaxBytes. Disk use is higher until the
	// space of evicted values is reclaimed (see Stats.DiskOverheadBytes and
	// docs/RELIABILITY.md, "Cache disk use").
	MaxBytes int64
	// Logger receives the store's and Badger's messages; nil means
	// slog.Default().
	Logger *slog.Logger
	// DirIsVolume says Dir is a mount point of its own, such as a pod's
	// volume (an emptyDir is 0777): its mode is the volume's, which the
	// user cannot change, so a directory open to others is said at DEBUG,
	// not as a WARN asking for chmod 700.
	DirIsVolume bool
	// SyncWrites makes every Put fsync before returning, so even a power
	// loss loses nothing that was acknowledged. Off by default: a kill -9
	// loses nothing either way, and a power loss can only lose the most
	// recent Puts, never serve a torn one.
	SyncWrites bool
	// Compression compresses the values Put with cache/codec (S2 or zstd),
	// each chunk shuffled by the element size Key.DType names; zero stores
	// them as they are. Either way every value is read: a store holds
	// values of both kinds. The budget counts a compressed value's
	// compressed bytes.
	Compression codec.Method
	// FileThreshold is the record size (a value's bytes, or its compressed
	// blob, with 16 bytes of header and 4 per 64 KiB chunk) from which a
	// value is stored in a file of its own under Dir/files instead of
	// Badger's value log; zero means DefaultFileThreshold, negative keeps
	// every value in Badger (as before files: for comparison). Values of
	// either kind are read whatever it is.
	FileThreshold int64
	// RawFiles is the auto policy (the mount's --cache-compression auto)
	// for the values that go to files of their own (a raw record of at
	// least FileThreshold bytes): Compression applies to the small values
	// kept in Badger only, and a large value is compressed with
	// zeros-elision on the write path only where the codec's measured CPU
	// is at most 5% of the measured extraction time of a feature
	// (SetWorkload: a CPU host), else written raw (a GPU host, whose epoch
	// 1 runs out of CPU); raw files are compacted at rest, with the same
	// codec, once the store has seen no work for CompactAfter
	// (compact.go, docs/CACHE.md).
	RawFiles bool
	// CompactAfter is, with RawFiles, how long the store must see no work
	// (no read, Put, Has or Delete, no change in Workload.Activity) before
	// it compacts raw files; zero means DefaultCompactAfter, negative
	// never.
	CompactAfter time.Duration
	// Inspect opens the store for tools such as featurefs cache stats and
	// clear: nothing is evicted and no background work runs, and when
	// MaxBytes is zero the budget reported is the one the store was last
	// opened with for serving.
	Inspect bool
	// WaitClosing, if positive, makes Open wait up to this long for a
	// process holding the directory that is closing its store
	// (Store.MarkClosing, Store.Close: an unmounted mount whose process
	// has yet to exit), and lockGrace (2 s) for one not marked yet,
	// instead of failing with ErrLocked at once. OnWait, if set, is called
	// once with the holder's pid when Open starts waiting for it.
	WaitClosing time.Duration
	OnWait      func(pid int)
}

// Stats are the store's counters, for the mount's stats file and metrics.
type Stats struct {
	// Hits counts Gets that returned a value.
	Hits int64 `json:"hits"`
	// Misses counts Gets that returned no value (including checksum failures).
	Misses int64 `json:"misses"`
	// Puts counts successful Puts.
	Puts int64 `json:"puts"`
	// Evictions counts entries evicted to stay within MaxBytes.
	Evictions int64 `json:"evictions"`
	// ChecksumFailures counts values that failed verification and were deleted.
	ChecksumFailures int64 `json:"checksum_failures"`
	// Entries is the number of stored entries: features and archive
	// indexes (Entries - ArchiveIndexEntries features).
	Entries int64 `json:"entries"`
	// Bytes is the sum of the stored values' lengths (compressed lengths
	// for compressed values), archive indexes included.
	Bytes int64 `json:"bytes"`
	// ArchiveIndexEntries and ArchiveIndexBytes are the entries that hold
	// archive indexes (Key.ModelDigest ArchiveIndexDigest: an index's head
	// and each of its parts), not features, and their Bytes. Those a
	// featurefs without this count wrote count as features until rewritten.
	ArchiveIndexEntries int64 `json:"archive_index_entries"`
	ArchiveIndexBytes   int64 `json:"archive_index_bytes"`
	// Policy is the mount's --cache-compression as the store applies it:
	// "auto" (RawFiles), a codec method's name, or "off".
	Policy string `json:"policy"`
	// Compression names the codec method values are Put with ("" for
	// none); under the auto policy (RawFiles), the small values' only.
	Compression string `json:"compression,omitempty"`
	// RawFiles: Compression applies to the values kept in Badger only;
	// those in files of their own (large features) follow the auto
	// policy: raw, or zeros-elision where the codec is a small share of
	// the extraction, raw files compacted at rest.
	RawFiles bool `json:"raw_files,omitempty"`
	// AutoCompressedPuts counts the large values the auto policy
	// compressed on the write path; ExtractSecondsPerFeature and
	// CodecSecondsPerMB are what it last measured: the extraction's
	// compute time per feature (0: not known) and zeros-elision's CPU per
	// MB of raw bytes on this host (0: not measured yet).
	AutoCompressedPuts       int64   `json:"auto_compressed_puts,omitempty"`
	ExtractSecondsPerFeature float64 `json:"extract_seconds_per_feature,omitempty"`
	CodecSecondsPerMB        float64 `json:"codec_seconds_per_mb,omitempty"`
	// Compactions counts raw files compacted at rest, CompactionSavedBytes
	// the bytes that saved, CompactionsAbandoned the compactions given up
	// because work appeared.
	Compactions          int64 `json:"compactions,omitempty"`
	CompactionSavedBytes int64 `json:"compaction_saved_bytes,omitempty"`
	CompactionsAbandoned int64 `json:"compactions_abandoned,omitempty"`
	// PutRawBytes and PutStoredBytes are the bytes Put since the store was
	// opened, before and after compression; CompressionRatio is their
	// ratio (0 before any Put).
	PutRawBytes      int64   `json:"put_raw_bytes"`
	PutStoredBytes   int64   `json:"put_stored_bytes"`
	CompressionRatio float64 `json:"compression_ratio"`
	// CompressSeconds is the time Puts spent compressing; DecompressSeconds
	// the time reads spent checking and decompressing compressed values.
	CompressSeconds   float64 `json:"compress_seconds"`
	DecompressSeconds float64 `json:"decompress_seconds"`
	// MaxBytes is the byte budget.
	MaxBytes int64 `json:"max_bytes"`
	// DiskBytes is the space the cache directory occupies on disk.
	DiskBytes int64 `json:"disk_bytes"`
	// DiskOverheadBytes is DiskBytes beyond Bytes (0 when less): evicted
	// values whose space is not reclaimed yet, the value log's active file
	// (Badger never collects it, so up to ValueLogFileBytes of it may be
	// dead values), value-log files less than half dead, and Badger's index.
	DiskOverheadBytes int64 `json:"disk_overhead_bytes"`
	// ValueLogFileBytes is the size of one of Badger's value-log files,
	// chosen from the budget (an eighth of it, at least what the largest
	// value accepted needs, at most 256 MiB).
	ValueLogFileBytes int64 `json:"value_log_file_bytes"`
	// ReclaimAfterBytes is how many bytes of evictions make the background
	// cleaner reclaim disk space (flush and compact the index, then value-log
	// GC); it also reclaims ReclaimIntervalSeconds after any eviction.
	ReclaimAfterBytes int64 `json:"reclaim_after_bytes"`
	// ReclaimIntervalSeconds is the longest evicted space waits to be
	// reclaimed while the store is open.
	ReclaimIntervalSeconds float64 `json:"reclaim_interval_seconds"`
	// EvictedSinceReclaimBytes is the bytes evicted since the last reclaim
	// (0 for a store opened with Options.Inspect, which never reclaims).
	EvictedSinceReclaimBytes int64 `json:"evicted_since_reclaim_bytes"`
	// GCRewrites counts value-log files rewritten by GC.
	GCRewrites int64 `json:"gc_rewrites"`
	// DiskFreeBytes is the free space of the cache's filesystem (what an
	// unprivileged user may still write there).
	DiskFreeBytes int64 `json:"disk_free_bytes"`
	// DiskReserveBytes is the free space the store keeps for Badger's own
	// files (a memtable flush, a compaction of its index, 4 MiB): a Put
	// that would leave less is refused with ErrDiskFull.
	DiskReserveBytes int64 `json:"disk_reserve_bytes"`
	// DiskFullRefusals counts writes refused for want of space
	// (ErrDiskFull).
	DiskFullRefusals int64 `json:"disk_full_refusals"`
	// ReadOnly is set when the store was opened on a filesystem too full
	// to open it for writing: it serves what it holds and stores nothing.
	ReadOnly bool `json:"read_only,omitempty"`
	// DirRemoved is set once the cache directory was found removed (or
	// replaced) while the store had it open: it serves what it holds and
	// stores nothing.
	DirRemoved bool `json:"dir_removed,omitempty"`
	// IndexMemoryBytes is the memory of the in-memory index of entries
	// (about 40 bytes an entry, its slices grown by doubling).
	IndexMemoryBytes int64 `json:"index_memory_bytes"`
	// BadgerMemoryMaxBytes bounds what Badger holds in memory: its
	// memtables (NumMemtables+1 of MemTableSize) and its block and index
	// caches. Badger's SST files and value log are mapped files, which
	// the kernel may drop: they are not in it.
	BadgerMemoryMaxBytes int64 `json:"badger_memory_max_bytes"`
}

// Tuning constants.
const (
	numStripes          = 64
	valueThreshold      = 1 << 10
	memTableSize        = 8 << 20
	maxValueFloor       = 31 << 20 // the largest value any budget that holds it accepts
	vlogSlack           = 1 << 20  // value-log file bytes beyond the largest value
	maxVlogFileSize     = 256 << 20
	accessFlushInterval = 30 * time.Second
	accessFlushDirty    = 1 << 16
	reclaimInterval     = 5 * time.Minute
	tickInterval        = time.Second
	gcDiscardRatio      = 0.5
)

// fileThreshold is Options.FileThreshold's effect: 0 stores nothing in
// files.
func fileThreshold(t int64) int64 {
	switch {
	case t == 0:
		return DefaultFileThreshold
	case t < 0:
		return 0
	}
	return t
}

// vlogFileSize returns the size of Badger's value-log files for a budget:
// an eighth of the budget, but at least what the largest value accepted
// needs (min(budget, 31 MiB) plus 1 MiB of slack) and at most 256 MiB.
// Badger never collects the value log's active file, so the file size bounds
// the dead bytes a reclaim leaves behind; before, every budget under 256 MiB
// got 32 MiB files, three times a 10 MiB budget.
func vlogFileSize(budget int64) int64 {
	return min(max(budget/8, min(budget, maxValueFloor)+vlogSlack), maxVlogFileSize)
}

// reclaimThreshold returns the evicted bytes after which the cleaner
// reclaims disk space: one value-log file or an eighth of the budget,
// whichever is more (a reclaim can free nothing of the active file).
func reclaimThreshold(budget int64) int64 {
	return max(vlogFileSize(budget), budget/8)
}

// Store is a persistent, checksummed, byte-bounded LRU cache of feature
// bytes. All methods are safe for concurrent use.
type Store struct {
	// Constant after Open.
	dir          string
	ident        dirIdentity
	maxBytes     int64
	maxValue     int64
	reclaimAfter int64
	memTable     int64
	vlogSize     int64
	compression  codec.Method
	inspect      bool
	syncWrites   bool
	fileThresh   int64 // records of at least this many bytes go to files; 0: none
	rawFiles     bool  // Options.RawFiles
	fds          fdCache
	wrote        wroteFiles
	fileVerifies atomic.Int64 // OpenFile's CRC passes (tests)
	auto         autoState    // the auto policy and the compactor (compact.go)
	log          *slog.Logger
	bopts        badger.Options
	lock         *dirLock
	db           *badger.DB // GUARDED_BY(gate) once open: Clear may reopen it

	// gate is held shared by every operation for its whole duration and
	// exclusively by Clear and Close (Badger's DropAll must not overlap
	// reads).
	gate     sync.RWMutex
	closed   bool        // GUARDED_BY(gate)
	readOnly atomic.Bool // Badger opened read-only, the filesystem being full (Clear may reopen it)

	// diskMu guards the space admitted to writes in flight (a leaf lock).
	diskMu   sync.Mutex
	inflight int64 // GUARDED_BY(diskMu)
	// reserve is the free space kept for Badger's own files (memtable
	// flush, compaction), updated by the cleaner.
	reserve    atomic.Int64
	gone       *atomic.Bool // the directory was removed while open (shared with badgerLogger)
	fullWarned atomic.Bool

	// stripes serialize writers of the same key (Put, Delete, eviction,
	// access-order flushes), so an eviction never deletes a value that was
	// just Put again.
	stripes [numStripes]sync.Mutex

	// writeGate is held shared around every Badger write transaction and
	// exclusively by reclaim while it forces a flush (Badger refuses writes
	// then) and while value-log GC rewrites a file.
	writeGate sync.RWMutex

	mu                  sync.Mutex
	idx                 *index       // GUARDED_BY(mu)
	bytes               int64        // GUARDED_BY(mu)
	pins                map[id]int32 // GUARDED_BY(mu); entries being read
	seq                 uint64       // GUARDED_BY(mu); last access sequence number
	evictedSinceReclaim int64        // GUARDED_BY(mu)
	lastFlush           time.Time    // GUARDED_BY(mu)
	lastReclaim         time.Time    // GUARDED_BY(mu)

	hits, misses, puts, evictions, checksumFailures, gcRewrites atomic.Int64
	diskFullRefusals                                            atomic.Int64
	putRaw, putStored, compressNanos, decompressNanos           atomic.Int64

	// testAfterPin, when set by a test, runs in Get after the entry is
	// pinned and before its value is read.
	testAfterPin func(id)

	closeOnce sync.Once
	kick      chan struct{}
	quit      chan struct{}
	done      chan struct{}
}

// Open opens (creating if needed) the cache in opts.Dir. If another process
// has the directory open it fails at once with an error matching ErrLocked.
func Open(opts Options) (*Store, error) {
	if opts.Dir == "" {
		return nil, errors.New("cache: Options.Dir is empty")
	}
	if opts.MaxBytes < 0 {
		return nil, fmt.Errorf("cache: MaxBytes %d is negative", opts.MaxBytes)
	}
	budgetGiven := opts.MaxBytes != 0
	if !budgetGiven {
		opts.MaxBytes = DefaultMaxBytes
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	open, err := makeDir(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("cache: create %s: %w", opts.Dir, err)
	}
	switch {
	case open && opts.DirIsVolume:
		log.Debug("cache: the cache directory is a volume open to other users (its mode is the volume's)", "dir", opts.Dir)
	case open:
		log.Warn("cache: the cache directory is open to other users (features derive from the images): chmod 700 it",
			"dir", opts.Dir)
	}
	lk, err := lockDirWait(opts.Dir, opts.WaitClosing, opts.OnWait)
	if err != nil {
		return nil, err
	}
	if err := refuseLinks(opts.Dir); err != nil {
		lk.release()
		return nil, err
	}
	ident, err := identify(opts.Dir)
	if err != nil {
		lk.release()
		return nil, fmt.Errorf("cache: %s: %w", opts.Dir, err)
	}
	// Opening for writing makes Badger write: a new value-log file and
	// write-ahead log (a header page each), the tables of write-ahead logs
	// left by a crash, a compaction. With less free than that, open
	// read-only: what is cached is served, nothing is stored.
	free, ferr := freeBytes(opts.Dir)
	memTable := int64(memTableSize)
	if ferr == nil && free < smallDiskFree {
		memTable = smallMemTableSize
	}
	tables, wals := badgerFiles(opts.Dir)
	openNeed := memTable + tables + wals + reserveSlack
	if _, err := os.Stat(filepath.Join(opts.Dir, "MANIFEST")); errors.Is(err, fs.ErrNotExist) {
		// A new cache: Badger writes headers and 1 MiB of discard
		// statistics at most, and there is nothing to open read-only.
		if openNeed = newCacheNeed; ferr == nil && free < openNeed {
			lk.release()
			return nil, fmt.Errorf("%w: %s has %d bytes free, less than the %d bytes creating a cache needs",
				ErrDiskFull, opts.Dir, free, openNeed)
		}
	}
	readOnly := ferr == nil && free < openNeed
	if readOnly && wals > 0 {
		// Write-ahead logs left by a crash: even a read-only open replays
		// them, reading past their end into holes, which on tmpfs
		// allocates pages and so faults on a full filesystem.
		lk.release()
		return nil, fmt.Errorf("%w: %s has %d bytes free, less than the %d bytes opening the cache needs (it holds write-ahead logs from a crash); free space on its filesystem or run featurefs cache clear",
			ErrDiskFull, opts.Dir, free, openNeed)
	}
	vlogSize := vlogFileSize(opts.MaxBytes)
	gone := new(atomic.Bool)
	bo := badger.DefaultOptions(opts.Dir).
		WithLogger(badgerLogger{log: log, gone: gone}).
		WithSyncWrites(opts.SyncWrites).
		WithNumVersionsToKeep(1).
		WithValueThreshold(valueThreshold).
		WithCompression(options.None).
		WithBlockCacheSize(8 << 20).
		WithIndexCacheSize(32 << 20).
		WithMemTableSize(memTable).
		WithValueLogFileSize(vlogSize).
		WithNumCompactors(2).
		WithNumGoroutines(2).
		WithMetricsEnabled(false).
		WithDetectConflicts(false)
	db, err := badger.Open(bo.WithReadOnly(readOnly))
	if err != nil {
		lk.release()
		if strings.Contains(err.Error(), "Another process is using this Badger database") {
			return nil, fmt.Errorf("%w: cache directory %s is in use by another process: %w", ErrLocked, opts.Dir, err)
		}
		if readOnly {
			return nil, fmt.Errorf("%w: %s has %d bytes free, less than the %d bytes opening the cache for writing needs, and it cannot be opened read-only (%w); free space on its filesystem or run featurefs cache clear",
				ErrDiskFull, opts.Dir, free, openNeed, err)
		}
		return nil, fmt.Errorf("cache: open %s: %w", opts.Dir, err)
	}
	s := &Store{
		dir:          opts.Dir,
		ident:        ident,
		maxBytes:     opts.MaxBytes,
		inspect:      opts.Inspect,
		maxValue:     min(opts.MaxBytes, vlogSize-(1<<20)),
		memTable:     memTable,
		vlogSize:     vlogSize,
		compression:  opts.Compression,
		syncWrites:   opts.SyncWrites,
		fileThresh:   fileThreshold(opts.FileThreshold),
		rawFiles:     opts.RawFiles,
		auto:         autoState{on: opts.RawFiles && fileThreshold(opts.FileThreshold) > 0, after: opts.CompactAfter},
		reclaimAfter: reclaimThreshold(opts.MaxBytes),
		log:          log,
		bopts:        bo,
		db:           db,
		lock:         lk,
		idx:          newIndex(),
		pins:         make(map[id]int32),
		lastFlush:    time.Now(),
		lastReclaim:  time.Now(),
		kick:         make(chan struct{}, 1),
		quit:         make(chan struct{}),
		done:         make(chan struct{}),
	}
	s.gone = gone
	s.readOnly.Store(readOnly)
	if err := privatizeFiles(opts.Dir, log); err != nil {
		log.Warn("cache: make the cache files private", "dir", opts.Dir, "err", err)
	}
	s.updateReserve()
	if !readOnly && !opts.Inspect {
		if err := s.recoverCompaction(); err != nil {
			db.Close()
			lk.release()
			return nil, err
		}
	}
	if err := s.loadIndex(); err != nil {
		db.Close()
		lk.release()
		return nil, err
	}
	if err := s.syncBudget(budgetGiven); err != nil {
		db.Close()
		lk.release()
		return nil, err
	}
	if !readOnly && !opts.Inspect {
		if err := makeFilesDir(opts.Dir); err != nil {
			db.Close()
			lk.release()
			return nil, fmt.Errorf("cache: create %s: %w", filepath.Join(opts.Dir, filesDir), err)
		}
		s.sweepFiles()
	}
	switch {
	case readOnly:
		s.fullWarned.Store(true)
		log.Warn("cache: cache filesystem full: serving the cached features read-only, caching no new ones until space is freed",
			"dir", opts.Dir, "free_bytes", free, "needed_bytes", openNeed, "entries", s.idx.count)
	case ferr == nil && !opts.Inspect:
		// What Puts may still use before they are refused.
		room := max(free-s.reserve.Load()-s.memTable, 0)
		if s.maxBytes > s.bytes+room {
			log.Warn("cache: the cache budget is larger than the free space of the cache's filesystem: the cache holds at most the effective bound, then new features are served but not cached",
				"dir", opts.Dir, "budget_bytes", s.maxBytes, "free_bytes", free, "stored_bytes", s.bytes,
				"effective_bound_bytes", s.bytes+room)
		}
	}
	if s.inspect {
		close(s.done)
		return s, nil
	}
	go s.loop()
	if s.auto.on && !readOnly {
		if s.auto.after == 0 {
			s.auto.after = DefaultCompactAfter
		}
		if s.auto.after > 0 {
			s.auto.pending.Store(1) // raw files of earlier mounts may wait
			s.auto.done = make(chan struct{})
			go s.compactLoop()
		}
	}
	s.mu.Lock()
	over := s.bytes > s.maxBytes
	s.mu.Unlock()
	if over {
		s.kickCleaner()
	}
	return s, nil
}

// loadIndex rebuilds the in-memory index from the metadata records, oldest
// access first, without reading any value.
func (s *Store) loadIndex() error {
	type rec struct {
		id   id
		size uint32
		seq  uint64
		kind entryKind
	}
	var all []rec
	var bad [][]byte
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixMeta}, PrefetchValues: false})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			k := item.Key()
			var m metaRecord
			var derr error
			if err := item.Value(func(b []byte) error {
				m, derr = decodeMeta(b)
				return nil
			}); err != nil {
				return err
			}
			if len(k) != 1+IDLen || derr != nil {
				bad = append(bad, item.KeyCopy(nil))
				continue
			}
			all = append(all, rec{id: id(k[1:]), size: m.size, seq: m.seq, kind: m.kind})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("cache: load index of %s: %w", s.dir, err)
	}
	slices.SortFunc(all, func(a, b rec) int {
		switch {
		case a.seq < b.seq:
			return -1
		case a.seq > b.seq:
			return 1
		}
		return 0
	})
	for _, r := range all {
		s.idx.insert(r.id, r.size, r.kind)
		s.bytes += int64(r.size)
		s.seq = max(s.seq, r.seq)
	}
	for _, k := range bad {
		if s.readOnly.Load() {
			s.log.Warn("cache: skipping unreadable metadata record (read-only)", "key", fmt.Sprintf("%x", k))
			continue
		}
		s.log.Warn("cache: dropping unreadable metadata record", "key", fmt.Sprintf("%x", k))
		var i id
		copy(i[:], k[1:])
		if err := s.commit(func(txn *badger.Txn) error {
			if err := txn.Delete(k); err != nil {
				return err
			}
			if len(k) == 1+IDLen {
				return txn.Delete(dbKey(prefixValue, i))
			}
			return nil
		}); err != nil {
			return fmt.Errorf("cache: drop bad metadata in %s: %w", s.dir, err)
		}
		if len(k) == 1+IDLen {
			s.removeFile(i)
		}
	}
	return nil
}

// budgetKey holds the MaxBytes the store was last opened with for serving
// (8 bytes, little endian), for Options.Inspect.
var budgetKey = []byte{prefixSetting, 'b', 'u', 'd', 'g', 'e', 't'}

// syncBudget records the budget of a serving store, or for an inspecting
// store without a budget of its own reads the recorded one.
func (s *Store) syncBudget(given bool) error {
	if s.inspect {
		if given {
			return nil
		}
		return s.db.View(func(txn *badger.Txn) error {
			item, err := txn.Get(budgetKey)
			if errors.Is(err, badger.ErrKeyNotFound) {
				return nil
			}
			if err != nil {
				return err
			}
			return item.Value(func(b []byte) error {
				if len(b) == 8 {
					s.maxBytes = int64(binary.LittleEndian.Uint64(b))
				}
				return nil
			})
		})
	}
	if s.readOnly.Load() {
		return nil
	}
	return s.recordBudget()
}

func (s *Store) recordBudget() error {
	b := binary.LittleEndian.AppendUint64(nil, uint64(s.maxBytes))
	if err := s.commit(func(txn *badger.Txn) error { return txn.Set(budgetKey, b) }); err != nil {
		return fmt.Errorf("cache: record budget in %s: %w", s.dir, err)
	}
	return nil
}

func (s *Store) stripe(i id) *sync.Mutex { return &s.stripes[i[IDLen-1]%numStripes] }

// commit runs fn in a Badger write transaction that writes no value (a
// delete, metadata), if the filesystem has room for it (admit).
func (s *Store) commit(fn func(txn *badger.Txn) error) error {
	release, err := s.admit(smallWrite, 0)
	if err != nil {
		return err
	}
	defer release()
	return s.update(fn)
}

// update runs fn in a Badger write transaction.
func (s *Store) update(fn func(txn *badger.Txn) error) error {
	s.writeGate.RLock()
	defer s.writeGate.RUnlock()
	return s.db.Update(fn)
}

func (s *Store) kickCleaner() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Get returns the value stored under k. A miss, including a value that
// failed its checksum (which is then deleted), returns nil, false, nil. The
// returned slice belongs to the caller.
func (s *Store) Get(k Key) ([]byte, bool, error) {
	var data []byte
	ok, err := s.read(k, func(rec []byte, owned bool) (err error) {
		if owned { // a file's bytes read into a fresh buffer: verify in place
			data, err = decodeValue(k.id(), rec)
			return err
		}
		data, err = copyVerified(k.id(), rec)
		return err
	}, nil)
	if !ok {
		return nil, false, err
	}
	return data, true, nil
}

// ReadAt copies the bytes of the value stored under k from off into dst,
// verifying only the part it reads where the value allows (values written
// before per-chunk checksums are verified whole), and returns how many it
// copied (fewer than len(dst) only at the value's end) and the value's
// size. A miss, or a damaged value (then deleted), returns false and a nil
// error, as Get does.
func (s *Store) ReadAt(k Key, dst []byte, off int64) (n int, size int64, ok bool, err error) {
	ok, err = s.read(k, func(rec []byte, _ bool) error {
		c, sz, err := readAtVerified(k.id(), rec, dst, off)
		n, size = c, int64(sz)
		return err
	}, func(f *os.File, p filePtr) error {
		c, sz, err := fileReadAt(k.id(), f, p, dst, off)
		n, size = c, int64(sz)
		return err
	})
	if !ok {
		return 0, 0, false, err
	}
	return n, size, true, nil
}

// read runs fn on the stored record of k (Badger's mapping of the value
// log, which fn must not keep; or, owned, its file read into a fresh
// buffer; or, when partial is set and the value is in a file, partial on
// the open file instead), pinning the entry against eviction meanwhile,
// and keeps the hit, miss and recency accounting. An error matching
// errChecksum drops the entry and is a miss, unless the entry verifies
// under its stripe lock (its file was replaced meanwhile: a compaction at
// rest, a Put of the same bytes): then it is read once more.
func (s *Store) read(k Key, fn func(rec []byte, owned bool) error, partial func(*os.File, filePtr) error) (bool, error) {
	i := k.id()
	s.auto.ops.Add(1)
	s.gate.RLock()
	defer s.gate.RUnlock()
	if s.closed {
		return false, ErrClosed
	}
	for try := 0; ; try++ {
		found, again, err := s.readOnce(k, i, fn, partial, try == 0)
		if !again {
			return found, err
		}
	}
}

// readOnce is one try of read; again asks for another (retry allowed and
// the entry was replaced under the read).
func (s *Store) readOnce(k Key, i id, fn func(rec []byte, owned bool) error, partial func(*os.File, filePtr) error, retry bool) (ok, again bool, err error) {
	s.mu.Lock()
	if _, ok := s.idx.lookup(i); !ok {
		s.mu.Unlock()
		s.misses.Add(1)
		return false, false, nil
	}
	s.pins[i]++
	s.mu.Unlock()
	if s.testAfterPin != nil {
		s.testAfterPin(i)
	}

	found, err := s.readValue(i, func(rec []byte, owned bool) error {
		if len(rec) < headerLen || binary.LittleEndian.Uint32(rec[12:]) != flagsCodec {
			return fn(rec, owned)
		}
		t0 := time.Now()
		err := fn(rec, owned)
		s.decompressNanos.Add(int64(time.Since(t0)))
		return err
	}, partial)

	s.mu.Lock()
	if s.pins[i]--; s.pins[i] <= 0 {
		delete(s.pins, i)
	}
	if err == nil && found {
		if sl, ok := s.idx.lookup(i); ok {
			s.idx.touch(sl)
		}
	}
	over := s.bytes > s.maxBytes
	s.mu.Unlock()
	if over {
		s.kickCleaner()
	}

	switch {
	case err == nil && found:
		s.hits.Add(1)
		return true, false, nil
	case err == nil:
		// Indexed but not stored: the index was stale (a concurrent
		// Delete, or an earlier failed write). Forget it.
		s.dropIfBad(k, i, nil)
		s.misses.Add(1)
		return false, false, nil
	case errors.Is(err, errChecksum):
		if s.dropIfBad(k, i, err) && retry {
			return false, true, nil
		}
		s.misses.Add(1)
		return false, false, nil
	}
	return false, false, fmt.Errorf("cache: get %s: %w", i, err)
}

// readValue runs fn on the stored record for i: in Badger (owned false),
// or read whole from its file (owned true), or partial on its open file
// where partial is set. A missing value (or file) is false, nil; a damaged
// one an error matching errChecksum.
func (s *Store) readValue(i id, fn func(rec []byte, owned bool) error, partial func(*os.File, filePtr) error) (bool, error) {
	var ptr filePtr
	inFile := false
	err := s.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(dbKey(prefixValue, i))
		if err != nil {
			return err
		}
		return item.Value(func(rec []byte) error {
			if isPtr(rec) {
				p, err := parsePtr(i, rec)
				ptr, inFile = p, true
				return err
			}
			return fn(rec, false)
		})
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !inFile {
		return true, nil
	}
	if partial != nil {
		e, err := s.acquireFile(i, ptr)
		if e == nil {
			return false, err
		}
		defer s.releaseFile(e)
		return true, partial(e.f, ptr)
	}
	rec, err := s.readWholeFile(i, ptr)
	if rec == nil {
		return false, err
	}
	return true, fn(rec, true)
}

// dropIfBad deletes the entry for i if, under its stripe lock, its value is
// still missing or still fails verification, and reports whether it found
// it intact instead. A checksum failure is counted and logged once, by the
// caller that deletes it.
func (s *Store) dropIfBad(k Key, i id, cause error) (intact bool) {
	st := s.stripe(i)
	st.Lock()
	defer st.Unlock()
	found, err := s.readValue(i, func(rec []byte, _ bool) error {
		_, err := decodeValue(i, rec)
		return err
	}, nil)
	switch {
	case err == nil && found:
		return true // replaced by a good value meanwhile
	case err != nil && !errors.Is(err, errChecksum):
		return false // cannot tell; leave it
	case err != nil:
		cause = err
	}
	if err := s.commit(func(txn *badger.Txn) error {
		if err := txn.Delete(dbKey(prefixValue, i)); err != nil {
			return err
		}
		return txn.Delete(dbKey(prefixMeta, i))
	}); err != nil {
		s.log.Warn("cache: delete bad entry", "key", k.Object, "layer", k.Layer, "id", i.String(), "err", err)
	} else {
		s.removeFile(i)
	}
	s.mu.Lock()
	sl, ok := s.idx.lookup(i)
	if ok {
		s.bytes -= int64(s.idx.slots[sl].size)
		s.idx.remove(sl)
	}
	s.mu.Unlock()
	if ok && cause != nil {
		s.checksumFailures.Add(1)
		s.log.Warn("cache: checksum failure, entry deleted", "key", k.Object, "model", k.ModelDigest, "layer", k.Layer, "id", i.String(), "err", cause)
	}
	return false
}

// Has reports whether k is stored, without reading or verifying the value
// and without counting a hit or miss.
func (s *Store) Has(k Key) bool {
	i := k.id()
	s.auto.ops.Add(1)
	s.gate.RLock()
	defer s.gate.RUnlock()
	if s.closed {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.idx.lookup(i)
	return ok
}

// Put stores v under k, replacing any previous value, and evicts least
// recently used entries if the store goes over its budget. A value larger
// than the budget is refused with an error matching ErrTooLarge.
func (s *Store) Put(k Key, v []byte) error {
	if int64(len(v)) > s.maxValue {
		return fmt.Errorf("%w: %d bytes for %s (limit %d bytes, cache budget %d bytes)", ErrTooLarge, len(v), k.Object, s.maxValue, s.maxBytes)
	}
	i := k.id()
	s.auto.ops.Add(1)
	auto := false
	if s.fileThresh > 0 && (s.compression == 0 || s.rawFiles) && int64(headerLen+4*numChunks(len(v))+len(v)) >= s.fileThresh {
		// A file of its own. Under auto (compact.go), compressed where
		// the codec is a small share of the extraction, else raw.
		if auto = s.auto.on && k.kind() == kindFeature && s.autoCompresses(len(v)); !auto {
			return s.putRawFile(k, i, v)
		}
	}
	bp := recordBuf(recordCap(len(v)))
	var rec []byte
	defer func() { // Badger has copied rec by then (db.Update commits before it returns)
		if cap(rec) == cap(*bp) {
			*bp = rec[:0]
			recPool.Put(bp)
		}
	}()
	if auto {
		var err error
		rec, err = s.encodeAuto(*bp, i, v, int(spec.DType(k.DType).Size()))
		if err != nil || len(rec)-headerLen >= len(v) {
			return s.putRawFile(k, i, v) // it does not shrink
		}
		s.auto.autoPuts.Add(1)
	} else {
		rec = s.encode(*bp, i, k, v)
	}
	stored := storedLen(rec, len(v))
	s.gate.RLock()
	defer s.gate.RUnlock()
	if s.closed {
		return ErrClosed
	}
	// Room for the record, and for a memtable more than other writes get,
	// so that deletes and access-order records still fit once Puts stop.
	release, err := s.admit(int64(len(rec))+writeSlack, s.memTable)
	if err != nil {
		return fmt.Errorf("cache: put %s: %w", k.Object, err)
	}
	defer release()
	if s.fileThresh > 0 && int64(len(rec)) >= s.fileThresh {
		return s.commitFile(k, i, v, stored, encodePtr(i, rec, len(rec)), rec)
	}
	return s.commitPut(k, i, v, stored, rec, tmpFile{})
}

// putRawFile is putFile, under auto noting a raw file for the compactor.
func (s *Store) putRawFile(k Key, i id, v []byte) error {
	if s.auto.on {
		s.auto.pending.Add(1)
	}
	return s.putFile(k, i, v)
}

// putFile is Put of an uncompressed value to a file: its header and chunk
// table, then its bytes as they are (no copy).
func (s *Store) putFile(k Key, i id, v []byte) error {
	head := encodeHead(i, v)
	s.gate.RLock()
	defer s.gate.RUnlock()
	if s.closed {
		return ErrClosed
	}
	release, err := s.admit(int64(len(head)+len(v))+writeSlack, s.memTable)
	if err != nil {
		return fmt.Errorf("cache: put %s: %w", k.Object, err)
	}
	defer release()
	// The file holds exactly v; the header and table go into the pointer.
	return s.commitFile(k, i, v, len(v), encodeRawPtr(i, head, len(v)), v)
}

// commitFile writes the record parts to i's file, outside the stripe lock
// (writers of different keys write at once), then commits a pointer to it.
// The caller holds gate and has admitted the write.
func (s *Store) commitFile(k Key, i id, v []byte, stored int, ptr []byte, parts ...[]byte) error {
	tmp, err := s.writeFile(i, parts...)
	if err != nil {
		return fmt.Errorf("cache: put %s: %w", k.Object, err)
	}
	return s.commitPut(k, i, v, stored, ptr, tmp)
}

// commitPut commits val (a record, or with tmp set the pointer to the file
// tmp, renamed into place first) under i and updates the index. The caller
// holds gate and has admitted the write.
func (s *Store) commitPut(k Key, i id, v []byte, stored int, val []byte, tmp tmpFile) error {
	inFile := tmp.path != ""
	st := s.stripe(i)
	st.Lock()
	if inFile {
		if err := s.placeFile(i, tmp); err != nil {
			st.Unlock()
			return fmt.Errorf("cache: put %s: %w", k.Object, err)
		}
	}
	s.mu.Lock()
	s.seq++
	meta := metaRecord{size: uint32(stored), seq: s.seq, kind: k.kind()}
	_, had := s.idx.lookup(i)
	s.mu.Unlock()
	err := s.update(func(txn *badger.Txn) error {
		if err := txn.Set(dbKey(prefixValue, i), val); err != nil {
			return err
		}
		return txn.Set(dbKey(prefixMeta, i), meta.encode())
	})
	if err != nil {
		if inFile && !had {
			s.removeFile(i)
		}
		st.Unlock()
		return fmt.Errorf("cache: put %s: %w", k.Object, err)
	}
	if !inFile && had {
		s.removeFile(i) // the value it replaces may have been in a file
	}
	s.mu.Lock()
	if sl, ok := s.idx.lookup(i); ok {
		s.bytes -= int64(s.idx.slots[sl].size)
		s.idx.remove(sl)
	}
	s.idx.insert(i, meta.size, meta.kind)
	s.bytes += int64(meta.size)
	victims := s.pickVictimsLocked(&i)
	s.mu.Unlock()
	st.Unlock()
	s.puts.Add(1)
	s.putRaw.Add(int64(len(v)))
	s.putStored.Add(int64(stored))
	s.deleteVictims(victims)
	return nil
}

// encode frames v for storage: compressed (Options.Compression) when it
// shrinks, else chunked.
func (s *Store) encode(dst []byte, i id, k Key, v []byte) []byte {
	if s.compression != 0 {
		t0 := time.Now()
		rec, err := encodeCompressedTo(dst, i, v, int(spec.DType(k.DType).Size()), s.compression)
		s.compressNanos.Add(int64(time.Since(t0)))
		if err == nil && len(rec)-headerLen < len(v) {
			return rec
		}
	}
	return encodeValueTo(dst, i, v)
}

type victim struct {
	id   id
	size uint32
}

// pickVictimsLocked removes least recently used, unpinned entries (other
// than keep) from the index until the store is within budget, and returns
// them for deletion from Badger.
func (s *Store) pickVictimsLocked(keep *id) []victim {
	if s.inspect || s.readOnly.Load() || s.gone.Load() {
		return nil
	}
	var vs []victim
	for p := s.idx.tail; p != nilSlot && s.bytes > s.maxBytes; {
		e := s.idx.slots[p]
		prev := e.prev
		if (keep == nil || e.id != *keep) && s.pins[e.id] == 0 {
			vs = append(vs, victim{id: e.id, size: e.size})
			s.bytes -= int64(e.size)
			s.idx.remove(p)
		}
		p = prev
	}
	return vs
}

// deleteVictims deletes evicted entries from Badger, unless one was Put
// again since it was picked.
func (s *Store) deleteVictims(vs []victim) {
	if len(vs) == 0 {
		return
	}
	var freed int64
	for _, v := range vs {
		inFile := false
		st := s.stripe(v.id)
		st.Lock()
		s.mu.Lock()
		_, back := s.idx.lookup(v.id)
		s.mu.Unlock()
		if !back {
			if err := s.commit(func(txn *badger.Txn) error {
				if err := txn.Delete(dbKey(prefixValue, v.id)); err != nil {
					return err
				}
				return txn.Delete(dbKey(prefixMeta, v.id))
			}); err != nil {
				s.log.Warn("cache: delete evicted entry", "id", v.id.String(), "err", err)
			} else if s.removeFile(v.id) {
				// After the index entry (a kill -9 between leaves an
				// orphan, swept at open). Its disk space is free now:
				// nothing for a reclaim to do.
				inFile = true
			}
		}
		st.Unlock()
		if !inFile {
			freed += int64(v.size)
		}
	}
	s.evictions.Add(int64(len(vs)))
	s.mu.Lock()
	s.evictedSinceReclaim += freed
	due := s.evictedSinceReclaim >= s.reclaimAfter
	s.mu.Unlock()
	if due {
		s.kickCleaner()
	}
}

// Delete removes k. Deleting a missing key is not an error.
func (s *Store) Delete(k Key) error {
	i := k.id()
	s.auto.ops.Add(1)
	s.gate.RLock()
	defer s.gate.RUnlock()
	if s.closed {
		return ErrClosed
	}
	st := s.stripe(i)
	st.Lock()
	defer st.Unlock()
	if err := s.commit(func(txn *badger.Txn) error {
		if err := txn.Delete(dbKey(prefixValue, i)); err != nil {
			return err
		}
		return txn.Delete(dbKey(prefixMeta, i))
	}); err != nil {
		return fmt.Errorf("cache: delete %s: %w", k.Object, err)
	}
	s.removeFile(i)
	s.mu.Lock()
	if sl, ok := s.idx.lookup(i); ok {
		s.bytes -= int64(s.idx.slots[sl].size)
		s.idx.remove(sl)
	}
	s.mu.Unlock()
	return nil
}

// Clear deletes every entry. It waits for operations in progress. On a
// store opened read-only (its filesystem full) it closes Badger, deletes
// Badger's files and opens the directory again for writing if the space
// freed allows; if not, the store is closed.
func (s *Store) Clear() error {
	s.gate.Lock()
	defer s.gate.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.gone.Load() {
		return fmt.Errorf("%w: %s", ErrDirRemoved, s.dir)
	}
	if s.readOnly.Load() {
		return s.clearFilesLocked()
	}
	if err := s.db.DropAll(); err != nil {
		return fmt.Errorf("cache: clear %s: %w", s.dir, err)
	}
	s.forgetAllFiles()
	if err := s.removeFilesDir(); err != nil {
		return fmt.Errorf("cache: clear %s: %w", s.dir, err)
	}
	if err := makeFilesDir(s.dir); err != nil {
		return fmt.Errorf("cache: clear %s: %w", s.dir, err)
	}
	if err := s.recordBudget(); err != nil {
		return err
	}
	s.resetLocked()
	return nil
}

func (s *Store) resetLocked() {
	s.mu.Lock()
	s.idx = newIndex()
	s.bytes = 0
	s.evictedSinceReclaim = 0
	s.pins = make(map[id]int32)
	s.mu.Unlock()
}

// clearFilesLocked clears a read-only store by deleting Badger's files.
func (s *Store) clearFilesLocked() error {
	if err := s.db.Close(); err != nil {
		s.log.Warn("cache: close read-only store", "dir", s.dir, "err", err)
	}
	s.db = nil
	s.closed = true // until it is open again
	s.resetLocked()
	s.forgetAllFiles()
	if err := removeBadgerFiles(s.dir); err != nil {
		return fmt.Errorf("cache: clear %s: %w", s.dir, err)
	}
	if err := s.removeFilesDir(); err != nil {
		return fmt.Errorf("cache: clear %s: %w", s.dir, err)
	}
	free, err := freeBytes(s.dir)
	if err != nil || free < s.memTable+reserveSlack {
		s.log.Warn("cache: cleared; the filesystem is still too full to open the cache for writing", "dir", s.dir, "free_bytes", free)
		return nil
	}
	db, err := badger.Open(s.bopts)
	if err != nil {
		return fmt.Errorf("cache: clear %s: reopen: %w", s.dir, err)
	}
	s.db, s.closed = db, false
	s.readOnly.Store(false)
	if err := makeFilesDir(s.dir); err != nil {
		return fmt.Errorf("cache: clear %s: %w", s.dir, err)
	}
	s.fullWarned.Store(false) // writable again: the next refusal is news
	if err := privatizeFiles(s.dir, s.log); err != nil {
		s.log.Warn("cache: make the cache files private", "dir", s.dir, "err", err)
	}
	s.updateReserve()
	return s.recordBudget()
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	st := Stats{
		Hits:              s.hits.Load(),
		Misses:            s.misses.Load(),
		Puts:              s.puts.Load(),
		Evictions:         s.evictions.Load(),
		ChecksumFailures:  s.checksumFailures.Load(),
		MaxBytes:          s.maxBytes,
		GCRewrites:        s.gcRewrites.Load(),
		PutRawBytes:       s.putRaw.Load(),
		PutStoredBytes:    s.putStored.Load(),
		CompressSeconds:   time.Duration(s.compressNanos.Load()).Seconds(),
		DecompressSeconds: time.Duration(s.decompressNanos.Load()).Seconds(),
	}
	st.Policy = "off"
	if s.compression != 0 {
		st.Compression = s.compression.String()
		st.RawFiles = s.rawFiles && s.fileThresh > 0
		st.Policy = st.Compression
		if st.RawFiles {
			st.Policy = "auto"
		}
	}
	if a := &s.auto; a.on {
		st.AutoCompressedPuts = a.autoPuts.Load()
		st.ExtractSecondsPerFeature = time.Duration(a.extractNs.Load()).Seconds()
		st.CodecSecondsPerMB = float64(a.codecPs.Load()) * 1e6 / 1e12
		st.Compactions, st.CompactionSavedBytes = a.compactions.Load(), a.compactSaved.Load()
		st.CompactionsAbandoned = a.compactAborts.Load()
	}
	if st.PutStoredBytes > 0 {
		st.CompressionRatio = float64(st.PutRawBytes) / float64(st.PutStoredBytes)
	}
	s.mu.Lock()
	st.Entries = int64(s.idx.count)
	st.IndexMemoryBytes = int64(cap(s.idx.slots))*int64(unsafe.Sizeof(slot{})) + int64(cap(s.idx.table))*4
	st.ArchiveIndexEntries, st.ArchiveIndexBytes = int64(s.idx.indexCount), s.idx.indexBytes
	st.Bytes = s.bytes
	st.EvictedSinceReclaimBytes = s.evictedSinceReclaim
	s.mu.Unlock()
	// From the budget, not the files opened: an inspecting store reports
	// what a mount with the recorded budget uses.
	st.ValueLogFileBytes = vlogFileSize(st.MaxBytes)
	st.BadgerMemoryMaxBytes = int64(s.bopts.NumMemtables+1)*s.bopts.MemTableSize + s.bopts.BlockCacheSize + s.bopts.IndexCacheSize
	st.ReclaimAfterBytes = reclaimThreshold(st.MaxBytes)
	st.ReclaimIntervalSeconds = reclaimInterval.Seconds()
	if du, err := DiskUsage(s.dir); err == nil {
		st.DiskBytes = du
		st.DiskOverheadBytes = max(du-st.Bytes, 0)
	}
	if free, err := freeBytes(s.dir); err == nil {
		st.DiskFreeBytes = free
	}
	st.DiskReserveBytes = s.reserve.Load()
	st.DiskFullRefusals = s.diskFullRefusals.Load()
	st.DirRemoved = s.gone.Load()
	st.ReadOnly = s.readOnly.Load()
	return st
}

// Dir returns the cache directory.
func (s *Store) Dir() string { return s.dir }

// MarkClosing says in the directory's lock file that this process is
// closing the store (a mount once unmounted, before it closes the rest): a
// featurefs cache command run meanwhile waits for it (Options.WaitClosing)
// instead of failing. Close marks it too.
func (s *Store) MarkClosing() { s.lock.markClosing() }

// Close persists the access order, closes the database and releases the
// directory lock. Further calls return ErrClosed; a second Close returns nil.
//
// Badger's Close flushes its memtable into a table file. In a directory
// removed while open it would retry that forever, and on a filesystem without
// room for the table it would fault; then Close leaves Badger as it is (its
// write-ahead log, if it still exists, keeps the latest writes for the next
// open) and only releases the lock: the process is expected to exit.
func (s *Store) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.lock.markClosing()
		close(s.quit)
		<-s.done
		if s.auto.done != nil {
			<-s.auto.done
		}
		s.gate.Lock()
		defer s.gate.Unlock()
		s.forgetAllFiles()
		if s.db == nil { // a read-only store cleared on a full filesystem
			s.closed = true
			err = s.lock.release()
			return
		}
		s.checkDir()
		if s.gone.Load() {
			s.closed = true
			s.log.Debug("cache: closing a store whose directory was removed: Badger left open", "dir", s.dir)
			err = s.lock.release()
			return
		}
		if !s.readOnly.Load() {
			s.flushAccess()
		}
		s.closed = true
		if !s.readOnly.Load() {
			need := s.reserve.Load() - reserveSlack + writeSlack
			if free, ferr := freeBytes(s.dir); ferr == nil && free < need {
				s.log.Warn("cache: too little free space to close the cache cleanly; its write-ahead log keeps the latest writes",
					"dir", s.dir, "free_bytes", free, "needed_bytes", need)
				err = s.lock.release()
				return
			}
		}
		err = s.db.Close()
		if perr := privatizeFiles(s.dir, s.log); perr != nil {
			s.log.Warn("cache: make the cache files private", "dir", s.dir, "err", perr)
		}
		if lerr := s.lock.release(); err == nil {
			err = lerr
		}
		if err != nil {
			err = fmt.Errorf("cache: close %s: %w", s.dir, err)
		}
	})
	return err
}

// badgerLogger sends Badger's messages to slog, one level lower than Badger
// rates them (its Info is chatty).
// Once the cache directory is gone its messages are Debug: the store has
// said so once.
type badgerLogger struct {
	log  *slog.Logger
	gone *atomic.Bool
}

func (l badgerLogger) msg(format string, args []any) string {
	return "badger: " + strings.TrimSpace(fmt.Sprintf(format, args...))
}
func (l badgerLogger) Errorf(f string, a ...any) {
	if l.gone.Load() {
		l.log.Debug(l.msg(f, a))
		return
	}
	l.log.Error(l.msg(f, a))
}
func (l badgerLogger) Warningf(f string, a ...any) {
	if l.gone.Load() {
		l.log.Debug(l.msg(f, a))
		return
	}
	l.log.Warn(l.msg(f, a))
}
func (l badgerLogger) Infof(f string, a ...any) { l.log.Debug(l.msg(f, a)) }
func (l badgerLogger) Debugf(string, ...any)    {}
