package main

import (
	"context"
	"errors"
	"github.com/featurefs/featurefs/extractor"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/featurefs/featurefs/cache"
	"github.com/featurefs/featurefs/extractor/spec"
	"github.com/featurefs/featurefs/fs/archive"
	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/features"
	"github.com/featurefs/featurefs/fs/featurestore"
	"github.com/featurefs/featurefs/fs/remote"
	"github.com/featurefs/featurefs/mountopts"
)

// stack is what mount, serve and warm read features through: the source,
// the cache, the feature store, the extractor and the pipeline over them,
// opened in that order by openStack and closed in reverse by Close. The
// FUSE tree (mount) and the feature server (serve) sit on the pipeline;
// warm calls it directly.
type stack struct {
	log *slog.Logger
	// source is the pipeline's bucket as opened: SOURCE, or with --remote
	// the servers' (through split execution's wrapper with --split).
	source bucket.Bucket
	cache  *cache.Store
	store  *featurestore.Store // nil without --feature-store
	// ex is the pipeline's extractor: the local extraction service, or
	// with --remote the servers' (through split execution with --split).
	ex features.Extractor
	// svc is the local extraction service (ex without --remote), whose
	// models a mount watches and reloads (reload.go); nil with --remote.
	svc *extractor.Service
	// client is the feature servers' client with --remote (nil without):
	// a mount follows the servers' model reloads through it.
	client *remote.Client
	// split is set when client's features go through split execution:
	// a mount watches its local models too and tells it of either side's
	// reloads (docs/SERVE.md, "Model versions").
	split splitParts
	pipe  *features.Pipeline

	closers []stackPart // in the order opened
}

// stackPart is one opened part and how to close it.
type stackPart struct {
	name  string // "the cache": for the log
	close func() error
	done  bool
}

// stackOptions are what a command adds to the options when it opens its
// stack.
type stackOptions struct {
	// source is SOURCE (s3://BUCKET[/PREFIX] or a directory).
	source string
	// remote dials o.Remote's feature servers instead of SOURCE (mount
	// --remote; serve and warm ignore a config file's remote settings).
	remote bool
	log    *slog.Logger
	// warn tells the user one line on the terminal (the log has it already).
	warn func(string)
	// readTimeout is the pipeline's bound on one feature's fetch and
	// extraction: --read-timeout (mount, warm), --item-timeout (serve).
	readTimeout time.Duration
	// prefetch applies --prefetch and --prefetch-limit (mount only).
	prefetch bool
	// storeWait is how long Close gives the feature store's queued writes.
	storeWait time.Duration
	// memory holds the bounds --memory-limit sized (mount only; zeros:
	// the defaults).
	memory mountopts.MemorySizes
	// untilExtractor, if set, is called once the source, the cache and
	// the feature store are open, before the extractor loads the models:
	// true stops openStack there, with no extractor and no pipeline (warm
	// --predictions with nothing left to predict loads no model).
	untilExtractor func(ctx context.Context, s *stack) bool
}

// openStack opens the parts of a command that serves features, each
// failing with its exit code: the source (or with --remote the feature
// servers), the cache, the feature store, the extractor and the pipeline.
// On an error what was opened is closed again. Close the stack when done.
func openStack(ctx context.Context, o mountopts.Options, so stackOptions) (_ *stack, err error) {
	s := &stack{log: so.log}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if so.remote {
		rc, err := dialRemote(ctx, o.Remote, o.MetadataTTL, so.log)
		if err != nil {
			return nil, err
		}
		s.opened("the feature servers' client", rc.Close)
		// Not under the caller's start-up bound: split's set-up bounds its
		// own steps (a server's profile within SplitConfig.ProfileTimeout,
		// 10m, the server heartbeating meanwhile).
		b, ex, sp, closeSplit, err := remoteSplit(context.Background(), o, rc, so.log, so.warn)
		if err != nil {
			return nil, err
		}
		s.opened("split execution", func() error { closeSplit(); return nil })
		s.source, s.ex, s.client = b, ex, rc
		s.split = sp
	} else {
		if s.source, err = openSource(ctx, so.source, o, so.log); err != nil {
			return nil, err
		}
		warnIfEmpty(ctx, s.source, so.source, so.log, so.warn)
	}

	if s.cache, err = openCache(o, so.log); err != nil {
		return nil, err
	}
	s.opened("the cache", s.cache.Close)
	if w, ok := s.source.(*archive.Bucket); ok {
		w.SetIndexStore(archiveIndexes{cache: s.cache, source: w.Identity(), log: so.log})
	}

	if s.store, err = openFeatureStore(ctx, o, so.log, so.warn); err != nil {
		return nil, err
	}
	if s.store != nil {
		s.opened("the feature store", func() error { closeFeatureStore(s.store, so.storeWait, so.log); return nil })
	}

	if so.untilExtractor != nil && so.untilExtractor(ctx, s) {
		return s, nil
	}

	if s.ex == nil {
		svc, err := newExtractor(o, o.DType, so.log, so.warn)
		if err != nil {
			return nil, err
		}
		s.opened("the extractor", svc.Close)
		s.ex, s.svc = svc, svc
	}

	labels, err := loadLabels(o, s.ex)
	if err != nil {
		return nil, err
	}
	cfg := features.Config{
		Labels:          labels,
		PredictionsTop:  o.PredictionsTop,
		Augment:         augmentConfig(o),
		Bucket:          s.source,
		Extractor:       s.ex,
		Cache:           s.cache,
		Logger:          so.log,
		NegativeTTL:     o.NegativeTTL,
		ReadTimeout:     so.readTimeout,
		MaxObjectSize:   o.MaxObjectSize,
		MetadataTTL:     o.MetadataTTL,
		ImageExtensions: o.ImageExtensions,
		Archives:        o.ArchiveFormats(),
		FeatureStore:    s.store,
		StoreOnly:       o.FeatureStoreOnly,
	}
	if so.prefetch {
		// Validate checked the mode's name.
		cfg.Prefetch = features.PrefetchConfig{Mode: o.Prefetch, Limit: o.PrefetchLimit, ModelLimits: o.ModelPrefetchLimits,
			MaxBytes: so.memory.Prefetch}
	}
	cfg.HandoffBytes, cfg.CacheWriteBytes = int(so.memory.Handoff), so.memory.CacheWrite
	if s.pipe, err = features.New(cfg); err != nil {
		return nil, failf(exitModel, "%w", err)
	}
	// Closed first: prefetch and the reads' extractions stop, and the
	// queued cache writes drain, before the extractor and the cache close.
	s.opened("the pipeline", s.pipe.Close)
	return s, nil
}

// loadLabels reads the --labels files (Validate read each once already)
// and checks each against its model's class count, failing with one line
// that names the flag, the file and the counts.
func loadLabels(o mountopts.Options, ex features.Extractor) (map[string][]string, error) {
	if len(o.Labels) == 0 {
		return nil, nil
	}
	out := map[string][]string{}
	for _, name := range slices.Sorted(maps.Keys(o.Labels)) {
		path := o.Labels[name]
		names, err := spec.ReadLabels(path)
		if err != nil {
			return nil, failf(exitUsage, "--labels %s=%s: %w", name, path, errors.Unwrap(err))
		}
		m, ok := ex.Model(name)
		if !ok {
			return nil, failf(exitUsage, "--labels %s=%s: no model %s is served", name, path, name)
		}
		if err := features.CheckLabels(m, names); err != nil {
			return nil, failf(exitUsage, "--labels %s=%s: %w", name, path, err)
		}
		out[name] = names
	}
	return out, nil
}

// opened records a part, to be closed in reverse order.
func (s *stack) opened(name string, close func() error) {
	s.closers = append(s.closers, stackPart{name: name, close: close})
}

// Close closes every part not closed yet, in the reverse order of their
// opening, logging each error; it returns them joined. Safe to call more
// than once.
func (s *stack) Close() error { return s.closeTo("") }

// closeTo closes, in reverse order, the parts opened since the one named
// (that one included; "": all of them), and leaves the others open for
// Close. warm closes down to the feature store to wait for its writes
// before it prints what it wrote.
func (s *stack) closeTo(name string) error {
	var errs []error
	for i := len(s.closers) - 1; i >= 0; i-- {
		p := &s.closers[i]
		if !p.done {
			p.done = true
			if err := p.close(); err != nil {
				s.log.Error("featurefs: closing "+p.name, slog.Any("err", err))
				errs = append(errs, err)
			}
		}
		if p.name == name {
			break
		}
	}
	return errors.Join(errs...)
}
