package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/featurefs/featurefs/cache"
	"github.com/featurefs/featurefs/cache/codec"
	"github.com/featurefs/featurefs/extractor"
	"github.com/featurefs/featurefs/fs/archive"
	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/featurestore"
	"github.com/featurefs/featurefs/fs/mountpoint"
	"github.com/featurefs/featurefs/mountopts"
)

// This file opens the parts every command that serves features shares
// (mount, serve, warm): the source bucket, the feature cache and the
// extraction service, each failing with its exit code.

// lockWait is how long opening a cache waits for a lock held by another
// process: a mount that was just unmounted closes its cache (and so releases
// the lock) a second or two after `umount` returns, and a remount right
// after it should not fail for that.
const lockWait = 5 * time.Second

// openSource opens the bucket SOURCE names with the options' S3 settings,
// its archives shown as prefixes (--archives; fs/archive): mount, serve
// and warm see the same keys, so a --remote mount, the cache and the
// feature store name a member alike.
func openSource(ctx context.Context, source string, o mountopts.Options, log *slog.Logger) (bucket.Bucket, error) {
	b, err := bucket.Open(ctx, source, bucket.S3Options{
		Endpoint:       o.EndpointURL,
		Region:         o.Region,
		Profile:        o.Profile,
		MaxObjectBytes: o.MaxObjectSize,
	})
	if err != nil {
		return nil, failf(exitSource, "source %s: %w", source, err)
	}
	// The indexes kept in memory count in a mount's metadata budget
	// (fs.New): a quarter of it for the LRU of indexes, half of it for one
	// larger index (archive.Config).
	return archive.Wrap(b, archive.Config{
		Formats:            o.ArchiveFormats(),
		ImageExtensions:    o.ImageExtensions,
		MaxMemberBytes:     o.MaxObjectSize,
		MaxIndexBytes:      int(o.MetadataCacheSize / 4),
		MaxLargeIndexBytes: int(o.MetadataCacheSize / 2),
		Logger:             log,
	}), nil
}

// archiveIndexes keeps fs/archive's indexes in the feature cache, under
// the source's identity, the archive key and its ETag, so that a remount
// with the same cache reads no archive to list it.
type archiveIndexes struct {
	cache  *cache.Store
	source string
	log    *slog.Logger
}

func (a archiveIndexes) key(key, etag string) cache.Key {
	return cache.Key{Source: a.source, Object: key, ETag: etag, ModelDigest: cache.ArchiveIndexDigest}
}

// GetIndex returns a kept index.
func (a archiveIndexes) GetIndex(key, etag string) ([]byte, bool) {
	b, ok, err := a.cache.Get(a.key(key, etag))
	return b, ok && err == nil
}

// PutIndex keeps an index; a failure is logged and forgotten.
func (a archiveIndexes) PutIndex(key, etag string, v []byte) {
	if err := a.cache.Put(a.key(key, etag), v); err != nil {
		a.log.Debug("featurefs: archive index not cached", slog.String("key", key), slog.Any("err", err))
	}
}

// openCache opens the feature cache the options name, retrying for up to
// lockWait while another process holds its lock. The error of the last try
// matches cache.ErrLocked when the lock never came free.
func openCache(o mountopts.Options, log *slog.Logger) (*cache.Store, error) {
	deadline := time.Now().Add(lockWait)
	for {
		method, rawFiles := cacheCompression(o.CacheCompression)
		_, _, volume := mountpoint.MountedOn(o.CacheDir)
		store, err := cache.Open(cache.Options{Dir: o.CacheDir, MaxBytes: o.CacheSize, Logger: log, Compression: method, RawFiles: rawFiles,
			DirIsVolume: volume})
		switch {
		case err == nil:
			return store, nil
		case errors.Is(err, cache.ErrLocked) && time.Now().Before(deadline):
			time.Sleep(100 * time.Millisecond)
		case errors.Is(err, cache.ErrLocked):
			return nil, failf(exitCache, "%w", err) // names the directory and the process holding it
		default:
			return nil, failf(exitCache, "--cache-dir %s: %w", o.CacheDir, err)
		}
	}
}

// newExtractor loads the options' models into an extraction service that
// serves dtype. An explicitly asked-for GPU that cannot be had fails with
// exitModel, or with --allow-cpu-fallback runs on the CPU and tells the
// user why (warn: one line on the terminal; the log has it already).
func newExtractor(o mountopts.Options, dtype extractor.DType, log *slog.Logger, warn func(string)) (*extractor.Service, error) {
	svc, err := extractor.New(extractor.Config{
		ORTLib:           o.ORTLib,
		Device:           o.Device,
		TensorRT:         o.TensorRT,
		Precision:        o.Precision,
		CUDALibDir:       o.CUDALibDir,
		Decode:           extractor.DecodeMode(o.Decode),
		AllowCPUFallback: o.AllowCPUFallback,
		BatchSize:        o.BatchSize,
		MaxPixels:        o.MaxPixels,
		DecodeMemory:     o.DecodeMemory,
		FetchMemory:      o.FetchMemory,
		MemoryLimit:      o.MemoryLimit,
		DType:            dtype,
		Logger:           log,
	}, o.ModelSpecs())
	if errors.Is(err, extractor.ErrNoDevice) {
		return nil, failf(exitModel, "--%v %s", err, noDeviceHint(o.Device, o.TensorRT))
	}
	if err != nil {
		return nil, failf(exitModel, "loading models: %w", err)
	}
	if why := svc.Fallback(); why != "" {
		warn("--" + why + " (--allow-cpu-fallback)")
	}
	if why := noGPUDecode(o.Decode, svc.Stats()); why != "" {
		if !o.AllowCPUFallback {
			svc.Close()
			return nil, failf(exitModel, "%s %s", why, noGPUDecodeHint)
		}
		warn(why + ": JPEGs are decoded on the CPU (--allow-cpu-fallback)")
	}
	return svc, nil
}

// noGPUDecodeHint says what decodes on the CPU instead of the GPU decoder
// that --decode gpu asked for and that cannot be had.
const noGPUDecodeHint = "(--decode cpu or auto, or --allow-cpu-fallback, decodes on the CPU)"

// noGPUDecode says, in one line, why JPEGs are not decoded on the GPU
// that --decode gpu asked for (no GPU, no nvJPEG, a build without a GPU
// decoder: the extractor's own words, st.JPEGDecode), or "" when decode is
// not gpu or the GPU decodes (st.GPUDecode set). An explicit --decode gpu
// is held to --device cuda's rule: without what it needs, exit 4, or with
// --allow-cpu-fallback the CPU and a warning at start (docs/GPU.md);
// --decode auto, like --device auto, falls back without a word.
func noGPUDecode(decode string, st extractor.Stats) string {
	if extractor.DecodeMode(decode) != extractor.DecodeGPU || st.GPUDecode != nil {
		return ""
	}
	if why, ok := strings.CutPrefix(st.JPEGDecode, "cpu: "); ok && why != "" {
		return why
	}
	return "--decode gpu: no GPU JPEG decoder"
}

// noDeviceHint says, in parentheses, what runs on the CPU instead of the
// GPU that --device and --tensorrt asked for and that cannot be had. With
// --tensorrt, --device auto is what asked for the GPU already: only
// leaving out --tensorrt (or --allow-cpu-fallback) runs on the CPU.
func noDeviceHint(device string, tensorRT bool) string {
	switch {
	case tensorRT && (device == "" || device == "auto"):
		return "(without --tensorrt, or with --allow-cpu-fallback, it runs on the CPU)"
	case tensorRT:
		return "(--device auto or cpu without --tensorrt, or --allow-cpu-fallback, runs on the CPU)"
	}
	return "(--device auto or cpu, or --allow-cpu-fallback, runs on the CPU)"
}

// emptyCheckTimeout bounds the listing warnIfEmpty makes.
const emptyCheckTimeout = 30 * time.Second

// warnIfEmpty lists the root of b once and, when it holds no object and no
// prefix (a mistyped prefix, an empty directory), logs a warning and tells
// the user (warn): the mount would be an empty tree without a word. A
// failed listing is only logged: reads will say more.
func warnIfEmpty(ctx context.Context, b bucket.Bucket, source string, log *slog.Logger, warn func(string)) {
	ctx, cancel := context.WithTimeout(ctx, emptyCheckTimeout)
	defer cancel()
	page, err := b.List(ctx, "", "")
	if err != nil {
		log.Debug("featurefs: listing the source root to see whether it is empty", slog.String("source", source), slog.Any("err", err))
		return
	}
	if len(page.Objects) > 0 || len(page.Prefixes) > 0 {
		return
	}
	what := "the directory is empty"
	if strings.HasPrefix(source, "s3://") {
		what = "no object has this prefix: check the bucket and prefix"
	}
	log.Warn("featurefs: the source holds no object; the feature tree is empty", slog.String("source", source))
	warn(fmt.Sprintf("source %s holds no object (%s); the feature tree is empty", source, what))
}

// openFeatureStore opens the feature store the options name (nil, nil for
// none): the source's endpoint and profile unless the --feature-store-*
// flags say otherwise, one retry per request (the store's own backoff
// handles an outage). A store that does not answer now is not an error:
// it is logged and the user told (warn: one line on the terminal), and it
// is used once it answers. Close it with closeFeatureStore.
func openFeatureStore(ctx context.Context, o mountopts.Options, log *slog.Logger, warn func(string)) (*featurestore.Store, error) {
	if o.FeatureStore == "" {
		return nil, nil
	}
	opts := bucket.S3Options{Endpoint: o.FeatureStoreEndpointURL, Region: o.Region, Profile: o.FeatureStoreProfile, MaxRetries: 1}
	if opts.Endpoint == "" {
		opts.Endpoint = o.EndpointURL
	}
	if opts.Profile == "" {
		opts.Profile = o.Profile
	}
	bs, err := bucket.OpenStore(ctx, o.FeatureStore, opts)
	if errors.Is(err, bucket.ErrUnreachable) {
		// Down now, not misconfigured: reads compute (or, store-only, fail)
		// until it answers, as during any outage.
		log.Warn("featurefs: feature store unreachable; going on without it until it answers",
			slog.String("store", o.FeatureStore), slog.Any("err", err))
		then := "reads compute what the cache lacks"
		if o.FeatureStoreOnly {
			then = "reads of what the cache lacks fail (--feature-store-only)"
		}
		warn(fmt.Sprintf("--feature-store %s does not answer (%v); going on without it: %s until it answers", o.FeatureStore, err, then))
		opts.NoProbe = true
		bs, err = bucket.OpenStore(ctx, o.FeatureStore, opts)
	}
	if err != nil {
		return nil, failf(exitSource, "--feature-store %s: %w", o.FeatureStore, err)
	}
	fst, err := featurestore.New(featurestore.Config{Store: bs, Logger: log,
		Compression: codecMethod(o.FeatureStoreCompression), ElemSize: int(o.DType.Size())})
	if err != nil {
		return nil, failf(exitSource, "--feature-store %s: %w", o.FeatureStore, err)
	}
	log.Info("featurefs: feature store", slog.String("store", fst.Identity()), slog.Bool("store_only", o.FeatureStoreOnly))
	return fst, nil
}

// closeFeatureStore gives the queued writes up to wait to finish, then
// stops the store's writers, logging what was dropped.
func closeFeatureStore(fst *featurestore.Store, wait time.Duration, log *slog.Logger) {
	if fst == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	flushErr := fst.Flush(ctx)
	fst.Close()
	st := fst.Stats()
	if flushErr != nil || st.Dropped > 0 || st.PutErrors > 0 {
		log.Warn("featurefs: feature store writes not made", slog.Int64("dropped", st.Dropped),
			slog.Int64("failed", st.PutErrors), slog.Int64("written", st.Puts))
	}
}

// codecMethod is the codec a --cache-compression, --feature-store-compression
// or --wire-compression value names (0: off); mountopts validated the name.
// cacheCompression is --cache-compression's codec method and whether the
// features kept in files of their own (large ones) are stored raw: auto
// (the default) is S2 for the small features Badger keeps and raw for the
// large ones (docs/CACHE.md, "Compression of file-stored features").
func cacheCompression(name string) (m codec.Method, rawFiles bool) {
	if name == "auto" {
		return codec.S2, true
	}
	return codecMethod(name), false
}

func codecMethod(name string) codec.Method {
	m, err := codec.ParseMethod(name)
	if err != nil {
		return 0
	}
	return m
}
