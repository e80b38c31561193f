package features

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/extractor/spec"
	"github.com/featurefs/featurefs/fs/archive"
	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/figures"
)

// WarmOptions says what Pipeline.Warm extracts.
type WarmOptions struct {
	// Model is the model's name.
	Model string
	// Layer is a layer directory name: "layer12" or an alias.
	Layer string
	// Prefix is the key prefix whose images are extracted, recursively:
	// "" for the whole source, "train/" for one directory ("train" means
	// the same).
	Prefix string
	// Progress, if set, is called after each object settles and after each
	// listing page, one call at a time.
	Progress func(WarmProgress)
	// MaxFailures bounds the failures listed in the result (default 1000);
	// WarmProgress.Failed counts them all.
	MaxFailures int
	// Shard, when split (spec.Shard.Split), is the part of the objects
	// warmed: those whose shard unit (ShardUnit) it owns. The others are
	// listed and skipped, counted in WarmResult.OtherShards, not in
	// WarmProgress.Total. The zero Shard is every object.
	Shard spec.Shard
	// Archives are the archive formats the source shows as directories
	// (--archives); a member's shard unit is its archive's (ShardUnit).
	Archives []string
}

// WarmProgress is how far a warm-up is.
type WarmProgress struct {
	// Total is the image objects found so far; it grows while Listing.
	Total int64
	// Listing is true until the listing is complete.
	Listing bool
	// Done is Extracted + Cached + Failed.
	Done int64
	// Extracted counts objects extracted now; Cached those already cached
	// or found in the feature store; Failed those that failed.
	Extracted, Cached, Failed int64
}

// WarmFailure is one object that failed, with the reason.
type WarmFailure struct {
	// Key is the object key.
	Key string
	// Reason is the error.
	Reason string
	// BadObject is true when the object itself is at fault (not an image,
	// corrupt, too large): retrying will not help.
	BadObject bool
}

// WarmResult is the outcome of Warm.
type WarmResult struct {
	WarmProgress
	// Failures lists failed objects in the order they failed (at most
	// WarmOptions.MaxFailures).
	Failures []WarmFailure
	// OtherShards counts the loose image objects listed that belong to
	// other parts than WarmOptions.Shard, and their archives, each
	// counted once and not read (0 when it is not split).
	OtherShards int64
}

// ShardUnit is the shard unit of the object key key: what
// WarmOptions.Shard hashes to decide which part an object is in
// (spec.Shard.Owns). A loose object is its own unit. A member of an archive
// shown as a directory (archives: the --archives formats) has its
// archive's key, so that one host reads the archive (its index once, its
// members in order through the read-ahead) and warms it whole.
func ShardUnit(key string, archives []string) string {
	if arch, ok := archive.ArchiveOf(archives, key); ok {
		return arch
	}
	return key
}

// otherShardsArchives is walk's skip for a sharded run: true for the
// directory of an archive that another part owns (its unit, ShardUnit, is
// the archive's key), so that the walk neither lists nor streams it; each
// such archive adds one to *others. nil when shard is not split.
func otherShardsArchives(shard spec.Shard, archives []string, others *int64) func(prefix string) bool {
	if !shard.Split() || len(archives) == 0 {
		return nil
	}
	return func(prefix string) bool {
		arch, ok := archive.ArchiveOf(archives, prefix)
		if !ok || shard.Owns(arch) {
			return false
		}
		*others++
		return true
	}
}

// Warm extracts every image under opts.Prefix at a layer into the cache,
// without a mount, skipping what is cached already, or, with a feature
// store, what the store has (so a warm-up cut short resumes where it
// stopped, on any host), and returns once what it extracted is written
// there. With a split opts.Shard it extracts only that part's images. It
// lists page by page and keeps extractions in
// flight within the prefetch bounds (count and bytes) at Background
// priority. Objects that fail are reported in the result, not as an error;
// the error is for the listing failing or ctx ending (the result then says
// how far it got).
func (p *Pipeline) Warm(ctx context.Context, opts WarmOptions) (WarmResult, error) {
	m, ok := p.cfg.Extractor.Model(opts.Model)
	if !ok {
		return WarmResult{}, fmt.Errorf("warm: %w %q", api.ErrUnknownModel, opts.Model)
	}
	l, ok := m.Lookup(opts.Layer)
	if !ok {
		return WarmResult{}, fmt.Errorf("warm: %w %q of model %s", api.ErrUnknownLayer, opts.Layer, m.Name)
	}
	if opts.MaxFailures <= 0 {
		opts.MaxFailures = 1000
	}
	prefix := strings.TrimPrefix(opts.Prefix, "/")
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	v := p.NewView(m, l)
	w := &warmRun{opts: opts, res: WarmResult{WarmProgress: WarmProgress{Listing: true}}}
	b := newBudget(p.pf.maxInFlight, p.pf.maxBytes)
	var wg sync.WaitGroup
	var pages atomic.Int64
	var others int64 // the walk calls visit one object at a time
	fst := p.cfg.FeatureStore
	// want: whether a streamed archive's member is read (the checks
	// below, but for the feature store's, which the extraction asks).
	want := func(obj bucket.Object) bool {
		if !opts.Shard.Owns(ShardUnit(obj.Key, opts.Archives)) {
			return false
		}
		if _, bad := p.isBad(obj.Key, obj.ETag); bad {
			return false
		}
		return fst != nil || !p.cachedAny(v, obj, p.cacheKey(v, obj))
	}
	err := p.walk(ctx, prefix, true, &pages, otherShardsArchives(opts.Shard, opts.Archives, &others), want, func(obj bucket.Object, g *given) error {
		if !opts.Shard.Owns(ShardUnit(obj.Key, opts.Archives)) {
			others++
			return nil
		}
		w.update(func(r *WarmResult) { r.Total++ })
		if reason, bad := p.isBad(obj.Key, obj.ETag); bad {
			w.fail(obj.Key, reason, true)
			return nil
		}
		key := p.cacheKey(v, obj)
		if fst == nil && p.cachedAny(v, obj, key) {
			w.update(func(r *WarmResult) { r.Cached++ })
			return nil
		}
		cost := p.costOf(v, obj)
		if err := b.acquire(ctx, cost); err != nil {
			return err
		}
		wg.Go(func() {
			defer b.release(cost)
			if fst != nil && p.storeCached(ctx, v, obj, key) {
				w.update(func(r *WarmResult) { r.Cached++ })
				return
			}
			_, found, err := p.findOrExtractFrom(ctx, v, obj, key, forWarm, g)
			switch {
			case err != nil:
				w.fail(obj.Key, figures.ErrReason(obj.Key, err), BadObject(err))
			case found: // in the feature store: a rerun, or another host's
				w.update(func(r *WarmResult) { r.Cached++ })
			default:
				w.update(func(r *WarmResult) { r.Extracted++ })
			}
		})
		return nil
	}, func(dir string, err error) {
		// A directory that cannot be read (a bad archive's) is skipped and
		// counted among the failures by its prefix, as warm through a mount
		// counts a directory it cannot list.
		w.update(func(r *WarmResult) { r.Total++ })
		w.fail(dir, figures.ErrReason(dir, err), true)
	})
	w.update(func(r *WarmResult) { r.Listing = false })
	wg.Wait()
	// Every feature extracted is in the cache when Warm returns: its
	// queued writes are waited for (until ctx ends; Close waits too).
	if ferr := p.writes.flush(ctx); ferr != nil && err == nil {
		err = ferr
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.res.OtherShards = others
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
			return w.res, fmt.Errorf("warm %s %s %q: %w", m.Name, opts.Layer, prefix, err)
		}
		return w.res, fmt.Errorf("warm %s %s: %w", m.Name, opts.Layer, err)
	}
	return w.res, nil
}

// warmRun is the state of one Warm call.
type warmRun struct {
	opts WarmOptions

	mu  sync.Mutex
	res WarmResult // GUARDED_BY(mu)
}

// update changes the result and reports progress.
func (w *warmRun) update(change func(*WarmResult)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	change(&w.res)
	w.res.Done = w.res.Extracted + w.res.Cached + w.res.Failed
	if w.opts.Progress != nil {
		w.opts.Progress(w.res.WarmProgress)
	}
}

// fail records a failed object.
func (w *warmRun) fail(key, reason string, bad bool) {
	w.update(func(r *WarmResult) {
		r.Failed++
		if len(r.Failures) < w.opts.MaxFailures {
			r.Failures = append(r.Failures, WarmFailure{Key: key, Reason: reason, BadObject: bad})
		}
	})
}
