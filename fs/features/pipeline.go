package features

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/featurefs/featurefs/cache"
	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/extractor/augment"
	"github.com/featurefs/featurefs/extractor/spec"
	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/featurestore"
	"github.com/featurefs/featurefs/fs/figures"
	"github.com/featurefs/featurefs/fs/internal/inflight"
	"github.com/featurefs/featurefs/fs/internal/lifetime"
	"github.com/featurefs/featurefs/fs/internal/lru"
	"github.com/featurefs/featurefs/fs/naming"
)

// Extractor is what the pipeline needs of the extraction service
// (*extractor.Service implements it).
type Extractor interface {
	// Models returns the models served, in order.
	Models() []*api.Model
	// Model returns the model called name.
	Model(name string) (*api.Model, bool)
	// Extract returns the whole .npy file of one feature.
	Extract(ctx context.Context, req api.Request) ([]byte, error)
	// DType is the element type of the .npy files.
	DType() api.DType
	// Stats returns the service's figures, for .featurefs/stats.
	Stats() api.Stats
	// Device names where models run, e.g. "cpu" or "cuda:0".
	Device() string
}

// Cache is what the pipeline needs of the feature store (*cache.Store
// implements it).
type Cache interface {
	// Get returns a stored feature; a miss is (nil, false, nil).
	Get(k cache.Key) ([]byte, bool, error)
	// ReadAt copies the stored feature from off into dst, verifying only
	// the part it reads, and returns the bytes copied and the feature's
	// size; a miss is (0, 0, false, nil). The tree's reads that the
	// kernel's page cache cannot serve use it (ReadCachedAt).
	ReadAt(k cache.Key, dst []byte, off int64) (n int, size int64, ok bool, err error)
	// Has reports whether a feature is stored, without reading it
	// (prefetch and warm-up skip what is cached).
	Has(k cache.Key) bool
	// Put stores a feature.
	Put(k cache.Key, v []byte) error
	// Stats returns the store's figures, for .featurefs/stats.
	Stats() cache.Stats
}

var _ Cache = (*cache.Store)(nil)

// Config is what New needs. Bucket, Extractor and Cache are required.
type Config struct {
	// Bucket is the object store features are computed from.
	Bucket bucket.Bucket
	// Extractor computes features.
	Extractor Extractor
	// Cache stores computed features.
	Cache Cache
	// Logger receives errors and bad objects; nil discards.
	Logger *slog.Logger

	// NegativeTTL is how long a bad object keeps failing without a retry;
	// 0 retries on every read.
	NegativeTTL time.Duration
	// ReadTimeout bounds the fetch and extraction behind a read; 0: none.
	ReadTimeout time.Duration
	// MaxObjectSize is the largest object fetched; 0 leaves the bound to
	// the bucket (a Get with maxBytes 0: bucket.S3Options.MaxObjectBytes).
	// A mount passes --max-object-size (mountopts).
	MaxObjectSize int64
	// MaxBadObjects bounds the negative cache of bad objects (default 65536).
	MaxBadObjects int
	// MetadataTTL is how long the tree keeps listings; prefetch walks a
	// directory again no sooner than this (and at least 30s).
	MetadataTTL time.Duration
	// ImageExtensions are the extensions (lower case, no dot) of the
	// objects whose features are served, in any ASCII case (nil:
	// spec.DefaultImageExtensions): walks (prefetch, Warm) visit only those,
	// Feature refuses others (ErrNotImage), and the feature store's names
	// split them (spec.SplitImage). The tree shows the same ones.
	ImageExtensions []string
	// Archives are the archive formats the bucket shows as prefixes
	// (fs/archive; "tar", "zip"): the naming rule shows "NAME.tar/" as
	// NAME (naming.Rule.WithArchives). None: archives are objects.
	Archives []string
	// Labels are the class names of models whose last layer is class
	// scores, by model name (--labels): predictions name their classes
	// with them. New checks each has one name per class (CheckLabels).
	Labels map[string][]string
	// PredictionsTop is the classes a prediction lists (default 5;
	// --predictions-top).
	PredictionsTop int
	// Now is the clock (default time.Now); tests inject one.
	Now func() time.Time
	// Augment, with Views > 0, gives every layer that many augmented
	// views (--augment; the tree shows them: docs/AUGMENT.md).
	Augment AugmentConfig

	// Prefetch is background extraction of what readers are about to read
	// (off unless set; see PrefetchConfig).
	Prefetch PrefetchConfig

	// FeatureStore, if set, is the shared tier between the cache and the
	// extractor: asked on a cache miss, and given every computed feature
	// (in the background; its writes never delay a read).
	FeatureStore *featurestore.Store
	// StoreOnly serves only what FeatureStore has: a feature it lacks is
	// ErrNotExtracted, never computed.
	StoreOnly bool
	// HandoffBytes bounds the hand-off buffer of features prefetch computed
	// that no reader has read to their end yet (default
	// defaultHandoffBytes); the least recently computed are dropped first,
	// and then read from the cache.
	HandoffBytes int
	// CacheWriteBytes bounds the features computed and queued for their
	// cache write, which happens in the background, off the read path
	// (default defaultCacheWriteBytes, 64MiB, at most Prefetch.MaxBytes
	// when that is set). A reader's feature that finds it full is written
	// by the reader, as without a queue; prefetch and warm-up wait for
	// room (see cacheWriter).
	CacheWriteBytes int64
	// CacheWriters is how many goroutines write queued features (default:
	// a quarter of the cores, between 1 and 4).
	CacheWriters int
	// CacheDrainTimeout bounds Close's wait for the queued cache writes
	// (default 20s); what is left past it is dropped, with a warning.
	CacheDrainTimeout time.Duration
}

// defaultHandoffBytes is Config.HandoffBytes's default: 80 layer12-sized
// features (800KB), prefetch's lead on the CPU (16 extractions in flight)
// plus the readers' requests in flight (a DataLoader's workers, the
// kernel's readahead), several times over; at most Prefetch.MaxBytes when
// that is set, since only prefetch hands features off. It does not grow
// with the dataset: a feature leaves it once a reader has read its last
// byte, or when newer ones need the room.
const defaultHandoffBytes = 64 << 20

// Pipeline is the read path of features, FUSE-free: the negative cache of
// bad objects, in-flight sharing, the cache lookup, the extraction and the
// cache write, the handling of objects changed since they were listed,
// prefetch, warm-up's walk and the figures behind the stats and metrics.
// The FUSE tree (package fs) and the feature server (fs/remote) both read
// through one. Create it with New; Close stops prefetch and the detached
// extractions and waits for them.
type Pipeline struct {
	// Constant after New.
	cfg      Config
	log      *slog.Logger
	identity string
	dtype    api.DType
	naming   naming.Rule // Config.ImageExtensions' naming rule
	started  time.Time
	health   StoreHealth
	// given is the configuration, its defaults filled in, with the bucket
	// and the extractor as given (Config).
	given Config

	bad      *lru.LRU[string, badEntry]   // object version -> why it is bad
	versions *lru.LRU[string, objVersion] // key -> a version newer than its listing's
	// viewParams remembers augmented views' parameters (ViewParams).
	viewParams *lru.LRU[string, augment.Params]
	// viewFetches bounds ViewParams's fetches in flight (viewParamFetches).
	viewFetches chan struct{}
	features    inflight.Group[[]byte] // reads in flight
	// handoff holds features just computed (by a read or by prefetch)
	// until a reader has read them to their end: its reads copy them from
	// memory rather than decompress them from the cache.
	handoff *lru.LRU[string, []byte] // cache key ID -> .npy bytes
	// writes is the write-behind queue of cache writes: features
	// computed wait there, readable, for their write (cachewriter.go).
	writes *cacheWriter

	stats counters
	obs   observer // figures of the wrapped bucket and extractor
	// journal holds the recent errors and logs each once in a while; the
	// tree and the server over the pipeline tell theirs to it too.
	journal *figures.Journal

	// legacyDirs remembers which feature store directories written
	// before layer digests exist (hasLegacyDir): one entry per model.
	legacyMu   sync.Mutex
	legacyDirs map[string]bool // GUARDED_BY(legacyMu)

	pf *prefetcher // background extraction; stopped by Close
	// predicting bounds the predictions in flight (PredictAll,
	// PredictTree), all callers together: prefetch's bounds.
	predicting *budget
	owner      *lifetime.Owner // owns the detached reads (features); closed by Close
}

// ErrClosed is matched by the error of a read of a closed pipeline.
var ErrClosed = lifetime.ErrClosed

// counters are the pipeline's own figures.
type counters struct {
	cacheHits, cacheMisses, extractions atomic.Int64
	cachePartialReads, handoffReads     atomic.Int64
	badObjects, badHits, cacheErrors    atomic.Int64
}

// New checks cfg, fills its defaults and returns the pipeline. Its bucket
// and extractor are wrapped so that every call is counted once, where the
// work happens (Bucket returns the wrapped bucket).
func New(cfg Config) (*Pipeline, error) {
	if cfg.Bucket == nil || cfg.Extractor == nil || cfg.Cache == nil {
		return nil, errors.New("features.New: Bucket, Extractor and Cache are required")
	}
	if len(cfg.Extractor.Models()) == 0 {
		return nil, errors.New("features.New: the extractor serves no model")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxBadObjects <= 0 {
		cfg.MaxBadObjects = 65536
	}
	if cfg.ImageExtensions == nil {
		cfg.ImageExtensions = spec.DefaultImageExtensions()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.HandoffBytes <= 0 {
		cfg.HandoffBytes = defaultHandoffBytes
		if mb := cfg.Prefetch.MaxBytes; mb > 0 && mb < int64(cfg.HandoffBytes) {
			cfg.HandoffBytes = int(mb)
		}
	}
	if cfg.CacheWriteBytes <= 0 {
		cfg.CacheWriteBytes = defaultCacheWriteBytes
		if mb := cfg.Prefetch.MaxBytes; mb > 0 && mb < cfg.CacheWriteBytes {
			cfg.CacheWriteBytes = mb
		}
	}
	if cfg.PredictionsTop <= 0 {
		cfg.PredictionsTop = 5
	}
	if cfg.CacheWriters <= 0 {
		cfg.CacheWriters = defaultCacheWriters()
	}
	if cfg.CacheDrainTimeout <= 0 {
		cfg.CacheDrainTimeout = defaultCacheDrainTimeout
	}
	for name, labels := range cfg.Labels {
		m, ok := cfg.Extractor.Model(name)
		if !ok {
			return nil, fmt.Errorf("features.New: labels for model %q, which is not served", name)
		}
		if err := CheckLabels(m, labels); err != nil {
			return nil, fmt.Errorf("features.New: %w", err)
		}
	}
	if cfg.StoreOnly && cfg.FeatureStore == nil {
		return nil, errors.New("features.New: StoreOnly needs a FeatureStore")
	}
	p := &Pipeline{
		cfg:         cfg,
		log:         cfg.Logger,
		legacyDirs:  map[string]bool{},
		identity:    cfg.Bucket.Identity(),
		dtype:       cfg.Extractor.DType(),
		naming:      naming.New(cfg.ImageExtensions).WithArchives(cfg.Archives),
		bad:         lru.New[string, badEntry](cfg.MaxBadObjects),
		journal:     figures.NewJournal(cfg.Logger, cfg.Now),
		versions:    lru.New[string, objVersion](4096),
		viewParams:  lru.New[string, augment.Params](maxViewParams),
		viewFetches: make(chan struct{}, viewParamFetches),
		handoff:     lru.New[string, []byte](cfg.HandoffBytes),
		owner:       lifetime.New(),
	}
	p.features.Owner = p.owner
	p.writes = newCacheWriter(p.storeCache, p.log, cfg.CacheWriteBytes, cfg.CacheWriters)
	p.given = cfg
	if cfg.FeatureStore != nil {
		p.registerManifests()
	}
	p.started = p.now()
	p.cfg.Bucket = countingBucket{Bucket: cfg.Bucket, o: &p.obs, h: &p.health}
	p.cfg.Extractor = observedExtractor{Extractor: cfg.Extractor, o: &p.obs, now: cfg.Now}
	p.pf = newPrefetcher(p, cfg.Prefetch)
	p.predicting = newBudget(p.pf.maxInFlight, p.pf.maxBytes)
	p.tellCache(true)
	return p, nil
}

func (p *Pipeline) now() time.Time { return p.cfg.Now() }

// Bucket returns the pipeline's bucket: the configured one, every call
// counted in the figures and in the store's health (StoreHealth). The tree
// lists and stats through it.
func (p *Pipeline) Bucket() bucket.Bucket { return p.cfg.Bucket }

// Config returns the pipeline's configuration, its defaults filled in,
// with the bucket and the extractor as given (uncounted: Bucket returns
// the counted bucket). The tree and the feature server read their shared
// settings from it (logger, clock, image extensions, TTLs).
func (p *Pipeline) Config() Config { return p.given }

// Activity returns a count that grows with every call to the store,
// every extraction and every cache lookup: equal counts some time apart
// mean the pipeline did nothing meanwhile (the tree's idle release).
func (p *Pipeline) Activity() int64 {
	o, c := &p.obs, &p.stats
	return o.gets.Load() + o.lists.Load() + o.statCalls.Load() + o.extracted.Load() + o.extractFailed.Load() +
		c.cacheHits.Load() + c.cacheMisses.Load()
}

// HandoffMemory returns the bytes the hand-off buffer holds and its bound.
func (p *Pipeline) HandoffMemory() (used, max int64) {
	_, n := p.handoff.Size()
	return int64(n), int64(p.cfg.HandoffBytes)
}

// isImage reports whether an object's base name ends in one of the image
// extensions (Config.ImageExtensions).
func (p *Pipeline) isImage(base string) bool {
	_, ok := p.naming.Split(base)
	return ok
}

// splitImage splits an image's base name into stem and extension
// (naming.Rule.Parts with Config.ImageExtensions).
func (p *Pipeline) splitImage(base string) (stem, ext string, ok bool) {
	return p.naming.Parts(base)
}

// Journal returns the pipeline's journal of errors (the stats' recent
// errors, the log-once set): the tree logs its errors there too.
func (p *Pipeline) Journal() *figures.Journal { return p.journal }

// Health returns the store's health, as the pipeline's bucket sees it.
func (p *Pipeline) Health() *StoreHealth { return &p.health }

// Started returns when the pipeline was created (uptime counts from it).
func (p *Pipeline) Started() time.Time { return p.started }

// View is one layer of one model as the read path sees it: the model, the
// layer and the size of its .npy files. Constant.
type View struct {
	// Model is the model.
	Model *api.Model
	// Layer is the layer.
	Layer api.Layer
	// Size is the bytes of each .npy file of the layer.
	Size int64
	// Aug, when not nil, makes the view an augmented one (docs/AUGMENT.md):
	// the feature of view Aug.View of every image, drawn with Aug's seed
	// and ranges from the object's identity (Aug.Identity is empty: each
	// object's is its own), cached under a key of its own.
	Aug *augment.Spec
	// FAug, when not nil, makes the view a feature-space one
	// (augment.ApplyFeature): view FAug.View of the plain feature, computed
	// at read time from the cached plain feature, never cached itself.
	FAug *FeatureAug
}

// FeatureAug is a feature-space view: its index, seed and ops.
type FeatureAug struct {
	View int
	Seed uint64
	Ops  []string
}

// NewFeatureAugView returns feature-space view fa of layer l of model m.
func (p *Pipeline) NewFeatureAugView(m *api.Model, l api.Layer, fa FeatureAug) *View {
	v := p.NewView(m, l)
	v.FAug = &fa
	return v
}

// base is the plain view a feature-space view is computed from.
func (v *View) base() *View {
	b := *v
	b.FAug, b.Aug = nil, nil
	return &b
}

// NewView returns the view of layer l of model m.
func (p *Pipeline) NewView(m *api.Model, l api.Layer) *View {
	return &View{Model: m, Layer: l, Size: api.NPYSize(l.Shape, p.dtype)}
}

// NewAugView returns augmented view spec of layer l of model m.
func (p *Pipeline) NewAugView(m *api.Model, l api.Layer, spec augment.Spec) *View {
	v := p.NewView(m, l)
	spec.Identity = ""
	v.Aug = &spec
	return v
}

// augSpec is v's augmentation for obj (nil for a plain view): the view's
// spec with the object's identity (its content's key and its ETag).
func (v *View) augSpec(obj bucket.Object) *augment.Spec {
	if v.Aug == nil {
		return nil
	}
	a := *v.Aug
	a.Identity = augment.Identity(objectID(obj), obj.ETag)
	return &a
}

// preprocessKey is the cache key's Preprocess of v: the model's
// preprocessing, and the augmentation of an augmented view.
func (v *View) preprocessKey() string {
	k := v.Model.Preprocess.Key()
	if v.Aug != nil {
		k += " " + v.Aug.Key()
	}
	if v.FAug != nil { // never cached (ReadCachedAt, feature): a key of its own all the same
		k += fmt.Sprintf(" feature-view=%d seed=%d ops=%s", v.FAug.View, v.FAug.Seed, strings.Join(v.FAug.Ops, ","))
	}
	return k
}

// FlushCacheWrites waits until every feature queued for the cache has been
// written (or given up on by the cache), or ctx ends. Another tree or server
// sharing the cache then finds them there.
func (p *Pipeline) FlushCacheWrites(ctx context.Context) error {
	return p.writes.flush(ctx)
}

// Close stops prefetch and the reads' detached extractions: walks and
// extractions are cancelled, and Close waits for them to return, so that
// none writes into the cache after Close. An extraction already inside ONNX
// Runtime cannot be interrupted: Close waits for it to end (its result is
// not stored). Then it waits for the cache writes queued (at most
// CacheDrainTimeout; past it, what is left is dropped and a warning says
// how many), so that every feature computed before Close is in the cache
// once Close returns. Reads after Close fail with ErrClosed. The extractor
// and the cache stay open (their owner closes them, after Close). Safe to
// call more than once, and concurrently: every call returns once the
// writes are done.
func (p *Pipeline) Close() error {
	p.pf.close()
	p.owner.Close()
	p.writes.close(p.cfg.CacheDrainTimeout)
	p.tellCache(false)
	return nil
}
