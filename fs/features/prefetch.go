package features

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/featurefs/featurefs/cache"
	"github.com/featurefs/featurefs/extractor/spec"
	"github.com/featurefs/featurefs/fs/archive"
	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/figures"
	"github.com/featurefs/featurefs/fs/internal/lifetime"
	"github.com/featurefs/featurefs/fs/internal/lru"
	"github.com/featurefs/featurefs/fs/naming"
)

// PrefetchMode says what a reader's first touch of a layer directory
// schedules in the background: spec's type, which mountopts validates, so
// that a mount passes its --prefetch through without parsing it again.
type PrefetchMode = spec.PrefetchMode

const (
	// PrefetchOff extracts only what readers read (the zero value, "",
	// means off too).
	PrefetchOff = spec.PrefetchOff
	// PrefetchDir schedules the images of each directory a reader touches
	// (not its subdirectories).
	PrefetchDir = spec.PrefetchDir
	// PrefetchTree schedules every image under the layer directory a
	// reader first touches.
	PrefetchTree = spec.PrefetchTree
)

// ErrPrefetchMode is matched by ParsePrefetchMode's error.
var ErrPrefetchMode = errors.New("prefetch mode: want off, dir or tree")

// ParsePrefetchMode parses off, dir or tree ("" is off), in any case and
// with spaces around, for callers that hold the mode as text (a mount's
// options hold it typed: mountopts.Options.Prefetch).
func ParsePrefetchMode(s string) (PrefetchMode, error) {
	switch m := PrefetchMode(strings.ToLower(strings.TrimSpace(s))); m {
	case "", PrefetchOff:
		return PrefetchOff, nil
	case PrefetchDir, PrefetchTree:
		return m, nil
	}
	return PrefetchOff, fmt.Errorf("%q: %w", s, ErrPrefetchMode)
}

// PrefetchConfig tunes background extraction (Config.Prefetch). Zero fields
// take the defaults named.
type PrefetchConfig struct {
	// Mode is off (the zero value), dir or tree.
	Mode PrefetchMode
	// Limit is the most objects one walk of a layer directory (tree) or of
	// a directory (dir) sends for extraction; 0: no limit. Objects already
	// cached do not count. A walk also stops once it has extracted about as
	// much as the cache holds: more would evict what it just stored.
	Limit int
	// ModelLimits overrides Limit per model name.
	ModelLimits map[string]int
	// MaxInFlight bounds the extractions prefetch has in flight. Default:
	// 4 times the largest batch size the extractor has chosen (16 until it
	// has chosen one), between 16 and 1024.
	MaxInFlight int
	// MaxBytes bounds the bytes those extractions hold (object, decoded
	// input and result each; results go to the cache and are dropped).
	// Default: MaxInFlight extractions of the view being walked, at least
	// 256MiB and at most 2GiB (so a GPU's batches of 256 fill: 1.5GiB for
	// ResNet-50 layer12; the CPU's batches stay under 256MiB).
	MaxBytes int64
	// MaxQueued bounds the walks waiting for a walker; a touch finding the
	// queue full is dropped and retried by a later touch. Default 64.
	MaxQueued int
	// Walkers is how many walks run at once. Default 2.
	Walkers int
}

// Prefetch defaults.
const (
	defaultPrefetchBytes   = 256 << 20
	maxAutoPrefetchBytes   = 2 << 30
	defaultPrefetchQueued  = 64
	defaultPrefetchWalkers = 2
	defaultBatchGuess      = 16
	minPrefetchInFlight    = 16
	maxPrefetchInFlight    = 1024
	// maxWalkDepth bounds the directory depth a walk descends: each level
	// holds one listing page while its subdirectories are walked.
	maxWalkDepth = 64
	// maxWalkStates bounds the walks remembered (to run each once per TTL).
	maxWalkStates = 4096
	// minRewalk is the least time between two walks of the same directory.
	minRewalk = 30 * time.Second
	// batchRefresh is how often the extractor's batch sizes are re-read.
	batchRefresh = 2 * time.Second
)

// budget bounds work in flight by count and bytes. Safe for concurrent use.
type budget struct {
	maxBytes func(n int, cost int64) int64 // the byte bound for n items of cost bytes
	maxN     func() int

	mu        sync.Mutex
	n         int           // GUARDED_BY(mu)
	bytes     int64         // GUARDED_BY(mu)
	peakN     int           // GUARDED_BY(mu)
	peakBytes int64         // GUARDED_BY(mu)
	lastMax   int64         // GUARDED_BY(mu): the byte bound last applied
	wake      chan struct{} // GUARDED_BY(mu): closed on release
}

func newBudget(maxN func() int, maxBytes func(n int, cost int64) int64) *budget {
	return &budget{maxN: maxN, maxBytes: maxBytes, lastMax: maxBytes(0, 0), wake: make(chan struct{})}
}

// acquire waits until one more item of cost bytes fits (an item alone
// always fits) or ctx ends.
func (b *budget) acquire(ctx context.Context, cost int64) error {
	for {
		limit := b.maxN() // may ask the extractor: not under mu
		maxBytes := b.maxBytes(limit, cost)
		b.mu.Lock()
		b.lastMax = maxBytes
		if b.n == 0 || (b.n < limit && b.bytes+cost <= maxBytes) {
			b.n++
			b.bytes += cost
			b.peakN = max(b.peakN, b.n)
			b.peakBytes = max(b.peakBytes, b.bytes)
			b.mu.Unlock()
			return nil
		}
		w := b.wake
		b.mu.Unlock()
		select {
		case <-w:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// release returns an item of cost bytes.
func (b *budget) release(cost int64) {
	b.mu.Lock()
	b.n--
	b.bytes -= cost
	close(b.wake)
	b.wake = make(chan struct{})
	b.mu.Unlock()
}

// figures returns the current and peak use, and the byte bound last
// applied.
func (b *budget) figures() (n, peakN int, bytes, peakBytes, maxBytes int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n, b.peakN, b.bytes, b.peakBytes, b.lastMax
}

// walkJob is one directory (and, for tree walks, everything under it) of
// one layer view to extract.
type walkJob struct {
	id     string
	view   *View
	prefix string
	tree   bool
}

// walkState remembers a walk, so that a directory is walked once per TTL.
type walkState struct {
	running  bool
	finished time.Time
}

// prefetchCounters are the prefetcher's own figures.
type prefetchCounters struct {
	walks, walksDone, dropped, limited    atomic.Int64
	pages, objects, cached, bad           atomic.Int64
	extracted, failed, cancelled, running atomic.Int64
	peakQueued                            atomic.Int64
}

// prefetcher runs walks of layer views in the background and sends their
// objects to the extractor at Background priority, bounded by a budget. A
// reader of a file being prefetched sends its own Foreground request, which
// the extractor merges with the background one and moves ahead of the queue.
type prefetcher struct {
	pipe *Pipeline
	cfg  PrefetchConfig
	// owner owns the walkers (a child of the pipeline's owner); its
	// context is the walks' and their extractions'. Closed by close.
	owner  *lifetime.Owner
	ctx    context.Context // owner.Context()
	jobs   chan walkJob
	budget *budget
	n      prefetchCounters

	mu     sync.Mutex
	states *lru.LRU[string, *walkState] // GUARDED_BY(mu) for read-modify-write
	closed bool                         // GUARDED_BY(mu)

	batchMu   sync.Mutex
	batchAt   time.Time // GUARDED_BY(batchMu)
	batchSize int       // GUARDED_BY(batchMu)
}

// newPrefetcher fills cfg's defaults and starts the walkers (none when
// prefetch is off).
func newPrefetcher(pipe *Pipeline, cfg PrefetchConfig) *prefetcher {
	if cfg.Mode == "" {
		cfg.Mode = PrefetchOff
	}
	if cfg.MaxQueued <= 0 {
		cfg.MaxQueued = defaultPrefetchQueued
	}
	if cfg.Walkers <= 0 {
		cfg.Walkers = defaultPrefetchWalkers
	}
	owner := pipe.owner.Child()
	p := &prefetcher{
		pipe:   pipe,
		cfg:    cfg,
		owner:  owner,
		ctx:    owner.Context(),
		jobs:   make(chan walkJob, cfg.MaxQueued),
		states: lru.New[string, *walkState](maxWalkStates),
	}
	p.budget = newBudget(p.maxInFlight, p.maxBytes)
	if cfg.Mode == PrefetchOff {
		return p
	}
	for range cfg.Walkers {
		owner.Go(p.walker)
	}
	return p
}

// maxInFlight is the current bound on extractions in flight.
func (p *prefetcher) maxInFlight() int {
	if p.cfg.MaxInFlight > 0 {
		return p.cfg.MaxInFlight
	}
	// The extractor's figures are read with no lock held: one caller
	// claims the refresh (batchAt), the others use the size they find
	// (until the first refresh, each reads them).
	now := time.Now()
	p.batchMu.Lock()
	bs, refresh := p.batchSize, p.batchSize == 0 || now.Sub(p.batchAt) > batchRefresh
	if refresh {
		p.batchAt = now
	}
	p.batchMu.Unlock()
	if refresh {
		bs = 0
		for _, b := range p.pipe.cfg.Extractor.Stats().BatchSizes {
			bs = max(bs, b)
		}
		if bs <= 0 {
			bs = defaultBatchGuess
		}
		p.batchMu.Lock()
		p.batchSize = bs
		p.batchMu.Unlock()
	}
	return min(max(4*bs, minPrefetchInFlight), maxPrefetchInFlight)
}

// maxBytes is the byte bound for extractions of cost bytes each, n of
// them allowed in flight (maxInFlight): MaxBytes when set, else enough for
// n of them, at least defaultPrefetchBytes and at most
// maxAutoPrefetchBytes. A GPU
// batch of 256 layer12 extractions (about 1.5 MB each) needs 384 MB, so a
// fixed 256 MiB would cap prefetch below one batch.
func (p *prefetcher) maxBytes(n int, cost int64) int64 {
	if p.cfg.MaxBytes > 0 {
		return p.cfg.MaxBytes
	}
	return min(max(int64(n)*cost, defaultPrefetchBytes), maxAutoPrefetchBytes)
}

// touch tells the prefetcher a reader is in directory prefix of view v; it
// schedules a walk unless one ran recently or is running. It never blocks.
func (p *prefetcher) touch(v *View, prefix string) {
	if p.cfg.Mode == PrefetchOff {
		return
	}
	if v.FAug != nil {
		v = v.base() // a feature-space view reads its base feature
	}
	job := walkJob{view: v, prefix: prefix, tree: p.cfg.Mode == PrefetchTree}
	// Alias directories share their layer's walks: same features. An
	// augmented view's are other features: walks of their own.
	base := v.Model.Name + "\x00" + strconv.Itoa(v.Layer.Index)
	if v.Aug != nil {
		base += "\x00" + v.Aug.Key()
	}
	if job.tree {
		job.prefix, job.id = "", base
	} else {
		job.id = base + "\x00" + prefix
	}
	rewalk := max(p.pipe.cfg.MetadataTTL, minRewalk)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	if st, ok := p.states.Get(job.id); ok && (st.running || p.pipe.now().Sub(st.finished) < rewalk) {
		return
	}
	select {
	case p.jobs <- job:
		p.states.Put(job.id, &walkState{running: true}, 1)
		if q := int64(len(p.jobs)); q > p.n.peakQueued.Load() {
			p.n.peakQueued.Store(q)
		}
	default:
		p.n.dropped.Add(1)
	}
}

// finished marks a walk done.
func (p *prefetcher) finished(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.states.Put(id, &walkState{finished: p.pipe.now()}, 1)
}

// walker runs walks until close.
func (p *prefetcher) walker() {
	for {
		select {
		case <-p.ctx.Done():
			return
		case job := <-p.jobs:
			p.run(job)
		}
	}
}

// run walks one job, sending each uncached image to the extractor.
func (p *prefetcher) run(job walkJob) {
	defer p.finished(job.id)
	p.n.walks.Add(1)
	defer p.n.walksDone.Add(1)
	v := job.view
	limit := p.cfg.Limit
	if l, ok := p.cfg.ModelLimits[v.Model.Name]; ok {
		limit = l
	}
	// More than the cache holds would evict what the walk just stored.
	if mb := p.pipe.cfg.Cache.Stats().MaxBytes; mb > 0 && v.Size > 0 {
		if fit := int(mb / v.Size * 9 / 10); limit <= 0 || fit < limit {
			limit = max(fit, 1)
		}
	}
	var sent int
	var wg sync.WaitGroup
	defer wg.Wait()
	want := func(obj bucket.Object) bool {
		_, bad := p.pipe.isBad(obj.Key, obj.ETag)
		return !bad && !p.pipe.cached(p.pipe.cacheKey(v, obj))
	}
	err := p.pipe.walk(p.ctx, job.prefix, job.tree, &p.n.pages, nil, want, func(obj bucket.Object, g *given) error {
		p.n.objects.Add(1)
		if _, bad := p.pipe.isBad(obj.Key, obj.ETag); bad {
			p.n.bad.Add(1)
			return nil
		}
		key := p.pipe.cacheKey(v, obj)
		if p.pipe.cachedAny(v, obj, key) {
			p.n.cached.Add(1)
			return nil
		}
		if limit > 0 && sent >= limit {
			return errWalkLimit
		}
		cost := p.pipe.costOf(v, obj)
		if err := p.budget.acquire(p.ctx, cost); err != nil {
			return err
		}
		if p.pipe.cachedAny(v, obj, key) {
			// A reader computed it while the walk waited for room: its
			// second extraction would be the walk's alone.
			p.budget.release(cost)
			p.n.cached.Add(1)
			return nil
		}
		sent++
		p.n.running.Add(1)
		wg.Go(func() {
			defer p.n.running.Add(-1)
			defer p.budget.release(cost)
			_, _, err := p.pipe.findOrExtractFrom(p.ctx, v, obj, key, forPrefetch, g)
			switch {
			case err == nil:
				p.n.extracted.Add(1)
			case p.ctx.Err() != nil:
				p.n.cancelled.Add(1)
			default:
				p.n.failed.Add(1)
				// Bad objects are logged where recorded; a feature a
				// store-only mount lacks, when a reader asks for it.
				if !BadObject(err) && !errors.Is(err, ErrNotExtracted) {
					p.pipe.journal.LogOnce(obj.Key, "prefetch failed", err)
				}
			}
		})
		return nil
	}, nil)
	switch {
	case errors.Is(err, errWalkLimit):
		p.n.limited.Add(1)
		p.pipe.log.Info("featurefs: prefetch stopped at its limit", slog.String("model", v.Model.Name),
			slog.String("layer", v.Layer.Name), slog.String("key", job.prefix), slog.Int("objects", sent))
	case err != nil && p.ctx.Err() == nil:
		p.pipe.journal.LogOnce(job.prefix, "prefetch listing failed", err)
	}
}

// errWalkLimit stops a walk at its limit.
var errWalkLimit = errors.New("prefetch limit reached")

// close cancels every walk and extraction and waits for them.
func (p *prefetcher) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.owner.Close()
}

// stats returns the prefetcher's figures.
func (p *prefetcher) stats() figures.PrefetchStats {
	n, peakN, b, peakB, maxB := p.budget.figures()
	return figures.PrefetchStats{
		Mode: string(p.cfg.Mode), Walks: p.n.walks.Load(), WalksDone: p.n.walksDone.Load(),
		WalksDropped: p.n.dropped.Load(), WalksLimited: p.n.limited.Load(),
		Queued: len(p.jobs), PeakQueued: int(p.n.peakQueued.Load()), ListPages: p.n.pages.Load(),
		Objects: p.n.objects.Load(), Cached: p.n.cached.Load(), Bad: p.n.bad.Load(),
		Extracted: p.n.extracted.Load(), Failed: p.n.failed.Load(), Cancelled: p.n.cancelled.Load(),
		InFlight: n, PeakInFlight: peakN, InFlightLimit: p.maxInFlight(),
		InFlightBytes: b, PeakInFlightBytes: peakB, MaxBytes: maxB,
	}
}

// cached reports whether the cache holds key (or its write is queued),
// without reading the value (Cache.Has).
func (p *Pipeline) cached(key cache.Key) bool {
	if _, ok := p.writes.get(string(key.ID())); ok {
		return true // queued for its write
	}
	return p.cfg.Cache.Has(key)
}

// costOf estimates the bytes one extraction holds: the object, the decoded
// input and the result.
func (p *Pipeline) costOf(v *View, obj bucket.Object) int64 {
	crop := int64(v.Model.Preprocess.Crop)
	if crop <= 0 {
		crop = 224
	}
	return max(obj.Size, 0) + 3*crop*crop*4 + v.Size
}

// walk lists prefix page by page (and, with tree, every prefix under it,
// depth first, holding one page per level) and calls visit for each image
// object in key order. An archive's directory (one the source streams:
// archive.Bucket.StreamPrefix) is not listed but read in one streaming
// GET (archive.Bucket.Stream): visit gets its image members in the
// archive's order with their bytes (g), or, those want declined (nil
// want: none), with g nil. visit's error stops the walk and is returned;
// so does a listing's, except a bad archive's (archive.ErrBadArchive),
// which is skipped and told to badDir (nil: nobody) with its prefix and
// error. skip (nil: none) is asked for each prefix before it is
// listed or streamed: true leaves out everything under it, unread (a
// sharded warm's archives of other parts: no GET of them at all).
func (p *Pipeline) walk(ctx context.Context, prefix string, tree bool, pages *atomic.Int64, skip func(prefix string) bool, want func(bucket.Object) bool, visit func(obj bucket.Object, g *given) error, badDir func(prefix string, err error)) error {
	var rec func(prefix string, depth int) error
	rec = func(prefix string, depth int) error {
		if skip != nil && skip(prefix) {
			return nil
		}
		if done, err := p.stream(ctx, prefix, tree, want, visit); done {
			return err
		}
		return eachPage(ctx, p.cfg.Bucket, prefix, pages, func(pg bucket.Page) error {
			for _, o := range pg.Objects {
				base, ok := strings.CutPrefix(o.Key, prefix)
				if !ok || !naming.ValidName(base) {
					continue
				}
				if !p.isImage(base) {
					continue
				}
				if err := visit(o, nil); err != nil {
					return err
				}
			}
			if tree {
				for _, sub := range pg.Prefixes {
					name := strings.TrimSuffix(strings.TrimPrefix(sub, prefix), "/")
					if !naming.ValidName(name) {
						continue
					}
					if depth+1 >= maxWalkDepth {
						p.log.Warn("featurefs: prefetch does not descend this deep", slog.String("key", sub), slog.Int("depth", depth+1))
						continue
					}
					if err := rec(sub, depth+1); err != nil {
						if errors.Is(err, archive.ErrBadArchive) {
							if badDir != nil {
								badDir(sub, err)
							}
							continue // logged once by fs/archive; the walk goes on
						}
						return err
					}
				}
			}
			return nil
		})
	}
	return rec(prefix, 0)
}

// eachPage lists directory prefix of b page by page, calling fn with each
// page, until the last page, fn's error or the context's; pages (nil:
// none) counts the List calls. A listing's error names the prefix, and so
// does a continuation token returned twice (a bucket that would loop).
func eachPage(ctx context.Context, b bucket.Bucket, prefix string, pages *atomic.Int64, fn func(bucket.Page) error) error {
	for token := ""; ; {
		if err := ctx.Err(); err != nil {
			return err
		}
		pg, err := b.List(ctx, prefix, token)
		if pages != nil {
			pages.Add(1)
		}
		if err != nil {
			return fmt.Errorf("listing %q: %w", prefix, err)
		}
		if pg.Next != "" && pg.Next == token {
			return fmt.Errorf("listing %q: the bucket returned the same continuation token twice", prefix)
		}
		if err := fn(pg); err != nil {
			return err
		}
		if pg.Next == "" {
			return nil
		}
		token = pg.Next
	}
}

// given is an object's bytes handed over by a streamed archive, or why
// they could not be read (the object alone fails).
type given struct {
	data []byte
	err  error
}

// stream reads the archive directory prefix in one streaming GET (walk),
// when the source is an archive.Bucket and prefix one of its archives'
// directories; done is false when it is not (or the archive cannot be
// streamed and nothing was visited): list it.
func (p *Pipeline) stream(ctx context.Context, prefix string, tree bool, want func(bucket.Object) bool, visit func(bucket.Object, *given) error) (done bool, err error) {
	ab, ok := p.given.Bucket.(*archive.Bucket)
	if !ok {
		return false, nil
	}
	arch, dir, ok := ab.StreamPrefix(prefix)
	if !ok {
		return false, nil
	}
	err = ab.Stream(ctx, arch, dir, tree, want, func(m archive.StreamMember) error {
		rest, ok := strings.CutPrefix(m.Object.Key, prefix)
		if !ok {
			return nil
		}
		for name := range strings.SplitSeq(rest, "/") {
			if !naming.ValidName(name) {
				return nil
			}
		}
		if !p.isImage(rest[strings.LastIndexByte(rest, '/')+1:]) {
			return nil
		}
		var g *given
		if !m.Skipped {
			g = &given{data: m.Data, err: m.Err}
		}
		return visit(m.Object, g)
	})
	if errors.Is(err, archive.ErrNoStream) {
		return false, nil
	}
	if err != nil {
		err = fmt.Errorf("reading archive %q: %w", arch, err)
	}
	return true, err
}

// Touch tells prefetch that a reader read a feature in directory prefix of
// view v (the tree calls it on the first read of a feature's content;
// metadata alone never does: ls, find, du and stat compute nothing). It
// schedules a walk unless one ran recently or is running, and never blocks.
func (p *Pipeline) Touch(v *View, prefix string) { p.pf.touch(v, prefix) }

// PrefetchStats returns prefetch's figures.
func (p *Pipeline) PrefetchStats() figures.PrefetchStats { return p.pf.stats() }
