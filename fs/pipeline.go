package fs

// The read path lives in package features (FUSE-free, shared with the
// feature server); these are its names as the tree's API has always offered
// them, and the tree's calls into it.

import (
	"context"

	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/features"
)

// Extractor is what the tree needs of the extraction service
// (*extractor.Service implements it): features.Extractor.
type Extractor = features.Extractor

// Cache is what the tree needs of the feature store (*cache.Store
// implements it): features.Cache.
type Cache = features.Cache

// Stats is the content of .featurefs/stats: features.Stats.
type Stats = features.Stats

// ExtractionStats summarizes the extractions since mount.
type ExtractionStats = features.ExtractionStats

// QueueStats is the extraction queue now.
type QueueStats = features.QueueStats

// StoreStats counts the object store calls of the mount.
type StoreStats = features.StoreStats

// ErrorCounts counts the errors answered to reads and listings, by kind.
type ErrorCounts = features.ErrorCounts

// TreeStats counts what the tree did since mount.
type TreeStats = features.TreeStats

// ReadSizes is a histogram of feature files' READ request sizes.
type ReadSizes = features.ReadSizes

// ErrorRecord is one recent error.
type ErrorRecord = features.ErrorRecord

// PrefetchMode says what a reader's first touch of a layer directory
// schedules in the background.
type PrefetchMode = features.PrefetchMode

// PrefetchConfig tunes background extraction (Config.Prefetch).
type PrefetchConfig = features.PrefetchConfig

// PrefetchStats are prefetch's figures.
type PrefetchStats = features.PrefetchStats

// WarmOptions says what FS.Warm extracts.
type WarmOptions = features.WarmOptions

// WarmProgress is how far a warm-up is.
type WarmProgress = features.WarmProgress

// WarmFailure is one object that failed, with the reason.
type WarmFailure = features.WarmFailure

// WarmResult is the outcome of FS.Warm.
type WarmResult = features.WarmResult

// Prefetch modes (features.PrefetchMode).
const (
	// PrefetchOff extracts only what readers read (the zero value).
	PrefetchOff = features.PrefetchOff
	// PrefetchDir schedules the images of each directory a reader touches.
	PrefetchDir = features.PrefetchDir
	// PrefetchTree schedules every image under the layer directory a
	// reader first touches.
	PrefetchTree = features.PrefetchTree
)

// Error kinds counted in Stats.Errors and the featurefs_errors_total metric
// (features.ErrKindBadImage ...).
const (
	// ErrKindBadImage is a read refused because of the object's content.
	ErrKindBadImage = features.ErrKindBadImage
	// ErrKindNotFound is a read of an object that was listed but is gone.
	ErrKindNotFound = features.ErrKindNotFound
	// ErrKindTimeout is a read that ran past --read-timeout.
	ErrKindTimeout = features.ErrKindTimeout
	// ErrKindStore is a read or listing the object store failed.
	ErrKindStore = features.ErrKindStore
	// ErrKindOther is any other failed read or listing.
	ErrKindOther = features.ErrKindOther
)

// ErrPrefetchMode is matched by ParsePrefetchMode's error.
var ErrPrefetchMode = features.ErrPrefetchMode

// ErrObjectChanged is matched by Feature's error when the object's ETag is
// no longer the one given (it changed since it was listed).
var ErrObjectChanged = features.ErrObjectChanged

// ParsePrefetchMode parses off, dir or tree ("" is off).
func ParsePrefetchMode(s string) (PrefetchMode, error) { return features.ParsePrefetchMode(s) }

// ErrorKinds lists the error kinds in the order they are shown.
func ErrorKinds() []string { return features.ErrorKinds() }

// Pipeline returns the tree's read path (features.Pipeline).
func (f *FS) Pipeline() *features.Pipeline { return f.p }

// Feature returns the .npy bytes of obj's feature at a model's layer, by
// the same path as a read of the mounted file (features.Pipeline.Feature).
// It needs no mount.
func (f *FS) Feature(ctx context.Context, model string, layer int, obj bucket.Object) ([]byte, error) {
	return f.p.Feature(ctx, model, layer, obj)
}

// Warm extracts every image under opts.Prefix at a layer into the cache,
// without a mount (features.Pipeline.Warm).
func (f *FS) Warm(ctx context.Context, opts WarmOptions) (WarmResult, error) {
	return f.p.Warm(ctx, opts)
}

// Close stops every goroutine the tree started and waits for them: the
// detached listings and reads (their contexts are cancelled), the kernel
// checks, prefetch's walks and extractions (features.Pipeline.Close). An
// extraction inside ONNX Runtime cannot be interrupted and is waited for;
// nothing is written into the cache after Close returns. Mount calls it
// once the mount is gone; the extractor and the cache stay open (their
// owner closes them, after Close). Safe to call more than once.
func (f *FS) Close() error {
	f.owner.Close()
	f.stopKernelChecks()
	return f.p.Close()
}

// PrefetchStats returns prefetch's figures.
func (f *FS) PrefetchStats() PrefetchStats { return f.p.PrefetchStats() }
