package namespace

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/features"
	"github.com/featurefs/featurefs/fs/internal/inflight"
	"github.com/featurefs/featurefs/fs/internal/lifetime"
	"github.com/featurefs/featurefs/fs/internal/lru"
	"github.com/featurefs/featurefs/fs/naming"
)

// Config is the namespace's own settings: what it needs beyond the
// pipeline it lists and stats through (New). The settings it shares with
// the read path (logger, clock, MetadataTTL, ReadTimeout, image
// extensions) are the pipeline's (features.Pipeline.Config).
type Config struct {
	// ShowEmptyDirs shows directories that hold no image object and no
	// subdirectory (a folder marker, only other files); by default they are
	// hidden.
	ShowEmptyDirs bool

	// MetadataBytes is the metadata budget: the bytes of the cached
	// listings and of the entries the tree holds for the kernel together
	// (budget.go; default 256 MiB).
	MetadataBytes int64
	// MaxListingEntries bounds the listing cache in entries over all
	// prefixes too (default: none beyond MetadataBytes).
	MaxListingEntries int
	// RelistPages is how many listing pages a lookup reads before it falls
	// back to Stat calls (default 10).
	RelistPages int
	// StaleGrace is how long a lookup or directory read whose cached
	// listing is stale (older than MetadataTTL, but complete) waits for the
	// store to list the directory again before it answers from the stale
	// listing; the new listing is still read in the background. While the
	// store is failing, they wait only 50ms. Default 250ms.
	StaleGrace time.Duration
	// ListFanout is how many list requests the listings of the mount may
	// have in flight at once beyond one page at a time: a prefix of more
	// than a page read whole is read in key ranges at once (fanout.go),
	// and as many directories are listed ahead of a walk (listAhead).
	// 0 or 1: one page at a time, two directories ahead (a local
	// directory lists in one read). The mount sets it for an S3 source
	// (bucket.DefaultListFanout, at most the bucket's GET bound).
	ListFanout int
	// ListRanges enables the key ranges (with ListFanout > 1): for stores
	// where a page started at a key (StartAfter) costs what a continued
	// one does (AWS S3); a local MinIO answers each such page with a walk
	// of the prefix from its start (docs/records/scale.md).
	ListRanges bool
}

// statParallel bounds the Stat calls of all lookups together.
const statParallel = 32

// maxRefreshes bounds the stale listings being read again in the background
// (Namespace.refreshStale); a stale directory finding no slot answers from
// its stale listing and is refreshed by a later lookup.
const maxRefreshes = 8

// defaultStaleGrace is Config.StaleGrace's default.
const defaultStaleGrace = 250 * time.Millisecond

// failingGrace is how long a stale listing's refresh is waited for while the
// store is failing: enough for a store that is back to answer a small
// listing, so that the first lookup after an outage sees fresh entries.
const failingGrace = 50 * time.Millisecond

// recentBytes bounds Namespace.recent.
const recentBytes = 32 << 20

// Namespace is what the tree knows of the bucket, without FUSE: the
// listings of its prefixes, the names in them (fs/naming's rule), which
// directories are shown, what a name stands for, the newest version of an
// object a read should serve, the features and slow failures of recent
// reads, and the record of failed files. Create it with New; Close it
// after its last use.
type Namespace struct {
	// Constant after New.
	cfg         Config
	log         *slog.Logger
	clock       func() time.Time // the pipeline's clock
	metadataTTL time.Duration    // the pipeline's MetadataTTL
	readTimeout time.Duration    // the pipeline's ReadTimeout (listings too)
	naming      naming.Rule
	// listed, if not nil, is called with every listing read completely
	// from the store, before anything answers from it (the tree keeps the
	// kernel's cache true with it).
	listed  func(*Listing)
	statSem chan struct{}
	// refreshing holds a token per background listing refresh.
	refreshing chan struct{}
	// ahead holds a token per listing read ahead (listAhead).
	ahead chan struct{}
	// aheadDirs is how many subdirectories a walk's directory read lists
	// ahead (listAhead).
	aheadDirs int
	// rangeSlots holds a token per list request of a key range in flight
	// (fanout.go): Config.ListFanout of them.
	rangeSlots chan struct{}
	// streamSlots holds a token per directory reader reading key ranges in
	// the background (fanout.go): streamFanOuts of them.
	streamSlots chan struct{}

	// p is the read path: its bucket (which counts every call), the store's
	// health, the log-once set and the newer versions reads found; its
	// owner closes it. bucket is p.Bucket().
	p      *features.Pipeline
	bucket bucket.Bucket

	listings *listingCache            // prefix -> listing, within the metadata budget
	lists    inflight.Group[*Listing] // lookups' listings in flight

	counts counts
	failed *failedFiles // feature files whose last read failed
	// recent holds the features reads computed (and slow failures, for
	// failMemo), for the same file's next reads: they usually find the
	// feature in the cache, but not when it could not be stored there.
	recent *lru.LRU[FileKey, recentFeature]
	failMu sync.Mutex // orders the slow failures put in recent

	// owner owns the detached listings (lists); closed by Close.
	owner *lifetime.Owner
}

// counts are the namespace's figures of the store's use.
type counts struct {
	statLookups, listPages, stats, listedAhead atomic.Int64
	// crowdedLookups counts the lookups answered by Stat calls because
	// the listings filled the budget (Listing.Crowded).
	crowdedLookups atomic.Int64
}

// Counts are the namespace's figures (the tree's stats file shows them).
type Counts struct {
	// StatLookups counts lookups answered without a complete listing.
	StatLookups int64
	// ListPages counts List calls (listings, empty-directory looks, probes).
	ListPages int64
	// StatCalls counts Stat calls of lookups.
	StatCalls int64
	// Listings and ListingEntries are the listing cache's size;
	// ListingBytes its bytes.
	Listings, ListingEntries int
	ListingBytes             int64
	// ListingsDropped counts listings dropped from the cache for the
	// metadata budget (coldest first).
	ListingsDropped int64
	// CrowdedLookups counts lookups answered by Stat calls because the
	// listings filled the budget (no listing read for one name).
	CrowdedLookups int64
	// ListedAhead counts directories listed ahead of a walk (listAhead).
	ListedAhead int64
}

// RecentMemory returns the bytes of the features reads computed that the
// namespace keeps (recent) and their bound.
func (n *Namespace) RecentMemory() (used, max int64) {
	_, b := n.recent.Size()
	return int64(b), recentBytes
}

// New fills cfg's defaults and returns the namespace over p's bucket.
// listed, if not nil, is called with every listing read completely from
// the store (see Namespace.listed); dropped, if not nil, with the prefix of
// every listing dropped for the metadata budget (the tree then tells the
// kernel to forget the entries it holds there), from the goroutine that
// stored or trimmed listings, without a lock held. The caller owns p and
// closes it after the namespace.
func New(p *features.Pipeline, cfg Config, listed func(*Listing), dropped func(prefix string)) *Namespace {
	pc := p.Config()
	if cfg.MetadataBytes <= 0 {
		cfg.MetadataBytes = defaultMetadataBytes
	}
	if cfg.MaxListingEntries <= 0 {
		cfg.MaxListingEntries = math.MaxInt
	}
	if cfg.RelistPages <= 0 {
		cfg.RelistPages = 10
	}
	if cfg.StaleGrace <= 0 {
		cfg.StaleGrace = defaultStaleGrace
	}
	ns := &Namespace{
		cfg:         cfg,
		log:         pc.Logger,
		clock:       pc.Now,
		metadataTTL: pc.MetadataTTL,
		readTimeout: pc.ReadTimeout,
		naming:      naming.New(pc.ImageExtensions).WithArchives(pc.Archives),
		listed:      listed,
		statSem:     make(chan struct{}, statParallel),
		refreshing:  make(chan struct{}, maxRefreshes),
		ahead:       make(chan struct{}, max(aheadRuns, cfg.ListFanout)),
		aheadDirs:   max(aheadDirs, 2*cfg.ListFanout),
		rangeSlots:  make(chan struct{}, max(1, cfg.ListFanout)),
		streamSlots: make(chan struct{}, streamFanOuts),
		p:           p,
		bucket:      p.Bucket(),
		listings:    newListingCache(cfg.MetadataBytes, cfg.MaxListingEntries, dropped),
		failed:      newFailedFiles(maxFailedFiles),
		recent:      lru.New[FileKey, recentFeature](recentBytes),
		owner:       lifetime.New(),
	}
	ns.lists.Owner = ns.owner
	return ns
}

// Close stops the detached listings and waits for them. Safe to call more
// than once.
func (ns *Namespace) Close() { ns.owner.Close() }

func (ns *Namespace) now() time.Time { return ns.clock() }

// Counts returns the namespace's figures.
func (ns *Namespace) Counts() Counts {
	n, e, b := ns.listings.Size()
	return Counts{
		StatLookups:     ns.counts.statLookups.Load(),
		ListPages:       ns.counts.listPages.Load(),
		StatCalls:       ns.counts.stats.Load(),
		Listings:        n,
		ListingEntries:  e,
		ListingBytes:    b,
		ListingsDropped: ns.listings.drops.Load(),
		CrowdedLookups:  ns.counts.crowdedLookups.Load(),
		ListedAhead:     ns.counts.listedAhead.Load(),
	}
}

// MetadataBytes is the metadata budget (Config.MetadataBytes).
func (ns *Namespace) MetadataBytes() int64 { return ns.cfg.MetadataBytes }

// AddHeld adds delta to the bytes the tree holds for the kernel's entries
// (its inodes), counted in the metadata budget with the listings, and
// returns the new total. Listings beyond what is left are dropped by
// Trim, or by the next listing stored.
func (ns *Namespace) AddHeld(delta int64) int64 { return ns.listings.held.Add(delta) }

// NodeShare is the part of the metadata budget the tree's entries may
// take before listings give way to them no more: all but the quarter kept
// for listings.
func (ns *Namespace) NodeShare() int64 {
	return ns.cfg.MetadataBytes - ns.cfg.MetadataBytes/listingShare
}

// Over reports whether the listings and what the tree holds pass the
// metadata budget (without taking a lock).
func (ns *Namespace) Over() bool {
	return ns.listings.total.Load()+ns.listings.held.Load() > ns.cfg.MetadataBytes
}

// Trim drops the coldest listings while the listings and what the tree
// holds pass the metadata budget (listings keep at least a quarter of it).
func (ns *Namespace) Trim() { ns.listings.Trim() }

// Cached reports whether prefix's listing is cached (without marking it
// used).
func (ns *Namespace) Cached(prefix string) bool { return ns.listings.Has(prefix) }

// listCtx bounds one List or Stat call, or one whole lookup, by ReadTimeout
// (a stalled store fails the lookup or readdir with EIO then, not after the
// SDK's own timeouts and retries).
func (ns *Namespace) listCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if ns.readTimeout > 0 {
		return context.WithTimeout(ctx, ns.readTimeout)
	}
	return ctx, func() {}
}

// logRename logs once (a bounded set) that an object or prefix is shown
// under a name other than the plain rule's, and why (fs/naming).
func (ns *Namespace) logRename(key, name, why string) {
	if !ns.p.Journal().FirstLog("rename\x00" + key + "\x00" + name) {
		return
	}
	ns.log.Warn("featurefs: renamed to avoid a collision or an unusable name", slog.String("key", key), slog.String("name", name), slog.String("why", why))
}
