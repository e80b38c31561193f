// Package featurestore keeps computed features in an object store (or a
// directory) that every mount and server can read: the tier of features
// that many storage hosts and training hosts share (docs/FEATURE-STORE.md),
// NDPipe's "extract once, ship features". It is FUSE-free and
// knows nothing of models beyond the names it is given; the read path
// (fs/features) asks it after its local cache and before computing.
//
// # Layout
//
//	PREFIX/<model>-<digest12>/_model.json
//	PREFIX/<model>-<digest12>/<layer>/<object key, extension replaced by .npy>
//
// Each feature object is the exact .npy file a mount serves, with user
// metadata: the source object's ETag (featurefs-etag), the full cache-key
// digest (featurefs-key) and the SHA-256 of the .npy bytes
// (featurefs-sha256); with Config.Compression the object is a cache/codec
// blob of them (featurefs-encoding: ffz1, schema 2).
// A read checks all three and the size: any mismatch is a miss, so a
// changed image, model or preprocessing never serves a stale or foreign
// feature. _model.json holds the model's full digest, its layer table, its
// preprocessing and the dtype.
//
// # Writes
//
// Put never blocks: it queues the feature for a bounded set of writers
// (MaxPuts PUTs in flight), the queue bounded in count (MaxQueue) and bytes
// (MaxQueueBytes). A full queue drops the write. After a failed request the
// store is left alone for Backoff: queued writes are dropped and Gets are
// skipped (the caller computes), so a store that is down costs neither
// time nor memory. Drops and failures are counted (Stats) and logged once
// per outage.
package featurestore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/featurefs/featurefs/cache/codec"
	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/internal/lifetime"
)

// Metadata names of a feature object (S3 user metadata, lower case).
const (
	MetaETag   = "featurefs-etag"
	MetaKey    = "featurefs-key"
	MetaSHA256 = "featurefs-sha256"
	MetaSchema = "featurefs-schema"
	// MetaEncoding is "ffz1" for an object that is a cache/codec blob of
	// the .npy bytes (Config.Compression), absent for the .npy bytes.
	MetaEncoding = "featurefs-encoding"
)

// SchemaVersion is the version of the layout and metadata written; objects
// of SchemaPlain (the .npy bytes, written before compression) are read
// too, any other version is a miss. Version 2 adds MetaEncoding; the
// checksum and size are those of the .npy bytes either way. A featurefs
// that predates it finds version 2 objects a mismatch, computes the
// feature and writes it again as version 1.
const (
	SchemaVersion = "2"
	SchemaPlain   = "1"
	// EncodingFFZ1 names a cache/codec blob in MetaEncoding.
	EncodingFFZ1 = "ffz1"
)

// ManifestName is the name of a model directory's description.
const ManifestName = "_model.json"

// Defaults of Config's zero fields.
const (
	DefaultMaxQueue            = 1024
	DefaultMaxQueueBytes int64 = 256 << 20
	DefaultMaxPuts             = 4
	DefaultTimeout             = 10 * time.Second
	DefaultBackoff             = 5 * time.Second
)

// Config is what New needs. Store is required.
type Config struct {
	// Store is where features are kept.
	Store bucket.Store
	// Logger receives the first error of each outage; nil discards.
	Logger *slog.Logger
	// MaxQueue bounds the writes queued (default DefaultMaxQueue).
	MaxQueue int
	// MaxQueueBytes bounds the bytes queued (default DefaultMaxQueueBytes).
	MaxQueueBytes int64
	// MaxPuts bounds the PUTs in flight (default DefaultMaxPuts).
	MaxPuts int
	// Timeout bounds one GET or PUT (default DefaultTimeout).
	Timeout time.Duration
	// Backoff is how long the store is left alone after a failed request
	// (default DefaultBackoff).
	Backoff time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Compression stores features as cache/codec blobs (where smaller),
	// shuffled by ElemSize (default 4); zero stores the .npy bytes.
	Compression codec.Method
	ElemSize    int
}

// Ref names one feature.
type Ref struct {
	// Model is the model's name and ModelDigest its full hex digest.
	Model, ModelDigest string
	// Layer is the layer's directory name, e.g. "layer12".
	Layer string
	// Name is the feature's path under the layer: the object key with its
	// extension replaced by .npy (naming.Rule.StoreName).
	Name string
	// ETag is the source object's version.
	ETag string
	// Digest is the full hex cache-key digest of the feature.
	Digest string
}

// ModelDir returns "<model>-<first 12 hex of the digest>".
func ModelDir(model, digest string) string {
	return model + "-" + digest[:min(12, len(digest))]
}

// Key returns the feature object's key in the store.
func (r Ref) Key() string { return ModelDir(r.Model, r.ModelDigest) + "/" + r.Layer + "/" + r.Name }

// Stats are the store's figures.
type Stats struct {
	// Hits counts features read from the store; HitBytes their bytes.
	Hits     int64 `json:"hits"`
	HitBytes int64 `json:"hit_bytes"`
	// Misses counts features the store did not have.
	Misses int64 `json:"misses"`
	// Mismatches counts feature objects whose metadata, checksum or size
	// did not match (read as misses, computed again).
	Mismatches int64 `json:"mismatches"`
	// GetErrors counts failed reads (the feature was computed instead);
	// Skipped counts reads not tried while the store was failing.
	GetErrors int64 `json:"get_errors"`
	Skipped   int64 `json:"skipped"`
	// Puts counts features written; PutBytes their bytes.
	Puts     int64 `json:"puts"`
	PutBytes int64 `json:"put_bytes"`
	// PutErrors counts failed writes; Dropped counts writes dropped (queue
	// full, store failing, closing).
	PutErrors int64 `json:"put_errors"`
	Dropped   int64 `json:"dropped"`
	// Queued and QueuedBytes are the writes waiting now.
	Queued      int64 `json:"queued"`
	QueuedBytes int64 `json:"queued_bytes"`
}

// Store reads and writes features. Create it with New; Close stops its
// writers. Safe for concurrent use.
type Store struct {
	cfg   Config
	log   *slog.Logger
	store bucket.Store

	queue chan item
	// owner owns the writers; ctx is its context, the PUTs' root,
	// cancelled by Close.
	owner *lifetime.Owner
	ctx   context.Context

	mu        sync.Mutex
	closed    bool                // GUARDED_BY(mu)
	pending   atomic.Int64        // writes queued or running
	manifests map[string][]byte   // GUARDED_BY(mu): model dir -> _model.json not yet written
	written   map[string]struct{} // GUARDED_BY(mu): model dirs whose _model.json is written
	failing   atomic.Int64        // unix nanos until which the store is left alone; 0: healthy
	outage    atomic.Bool         // an outage has been logged and not yet its end

	queuedBytes                                            atomic.Int64
	hits, hitBytes, misses, mismatches, getErrors, skipped atomic.Int64
	puts, putBytes, putErrors, dropped                     atomic.Int64
}

type item struct {
	ref  Ref
	data []byte
}

// New returns a store with its writers started.
func New(cfg Config) (*Store, error) {
	if cfg.Store == nil {
		return nil, errors.New("featurestore.New: Store is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxQueue <= 0 {
		cfg.MaxQueue = DefaultMaxQueue
	}
	if cfg.MaxQueueBytes <= 0 {
		cfg.MaxQueueBytes = DefaultMaxQueueBytes
	}
	if cfg.MaxPuts <= 0 {
		cfg.MaxPuts = DefaultMaxPuts
	}
	if cfg.ElemSize <= 0 {
		cfg.ElemSize = 4
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = DefaultBackoff
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Store{
		cfg:       cfg,
		log:       cfg.Logger,
		store:     cfg.Store,
		queue:     make(chan item, cfg.MaxQueue),
		manifests: map[string][]byte{},
		written:   map[string]struct{}{},
	}
	s.owner = lifetime.New()
	s.ctx = s.owner.Context()
	for range cfg.MaxPuts {
		s.owner.Go(s.writer)
	}
	return s, nil
}

// Identity names the store, e.g. "s3://host/bucket/prefix/".
func (s *Store) Identity() string { return s.store.Identity() }

// SetManifest registers the _model.json of a model directory (ModelDir),
// written before the first feature of that model.
func (s *Store) SetManifest(modelDir string, manifest []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.written[modelDir]; !ok {
		s.manifests[modelDir] = manifest
	}
}

// ErrUnusable is matched by Get's error when the store has an object for
// the feature but it cannot be served: damaged, or computed from another
// object version, model, preprocessing or dtype. What happens next is the
// caller's to say (compute it again, or under --feature-store-only fail).
var ErrUnusable = errors.New("feature object unusable")

// Get returns the feature named by r if the store has it with matching
// metadata, checksum and size. A miss, a mismatch (ErrUnusable) and a store
// error all return ok false; the error is for the caller's logs (the
// store's own figures count it), and while the store is failing Get
// returns at once.
func (s *Store) Get(ctx context.Context, r Ref, size int64) (data []byte, ok bool, err error) {
	if s.down() {
		s.skipped.Add(1)
		return nil, false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	data, _, meta, err := s.store.GetMeta(ctx, r.Key(), size+1)
	switch {
	case errors.Is(err, bucket.ErrNotFound):
		s.healthy()
		s.misses.Add(1)
		return nil, false, nil
	case errors.Is(err, bucket.ErrTooLarge):
		s.healthy()
		s.mismatches.Add(1)
		return nil, false, fmt.Errorf("feature store: %s: %w: larger than the layer's %d bytes", r.Key(), ErrUnusable, size)
	case err != nil:
		if ctx.Err() != nil && ctx.Err() != context.DeadlineExceeded {
			return nil, false, err // the reader went away: not the store's fault
		}
		s.getErrors.Add(1)
		s.fail("read", r.Key(), err)
		return nil, false, err
	}
	s.healthy()
	if meta[MetaEncoding] == EncodingFFZ1 && meta[MetaSchema] == SchemaVersion {
		raw, err := codec.Decode(make([]byte, 0, size), data)
		if err != nil {
			s.mismatches.Add(1)
			return nil, false, fmt.Errorf("feature store: %s: %w: %v", r.Key(), ErrUnusable, err)
		}
		data = raw
	}
	if why := check(r, data, meta, size); why != "" {
		s.mismatches.Add(1)
		return nil, false, fmt.Errorf("feature store: %s: %w: %s", r.Key(), ErrUnusable, why)
	}
	s.hits.Add(1)
	s.hitBytes.Add(int64(len(data)))
	return data, true, nil
}

// check returns why a feature object does not answer r, or "".
func check(r Ref, data []byte, meta map[string]string, size int64) string {
	switch {
	case int64(len(data)) != size:
		return fmt.Sprintf("%d bytes, the layer's shape gives %d", len(data), size)
	case meta[MetaSchema] != SchemaVersion && meta[MetaSchema] != SchemaPlain:
		return fmt.Sprintf("schema %q, want %q or %q", meta[MetaSchema], SchemaVersion, SchemaPlain)
	case meta[MetaSchema] == SchemaVersion && meta[MetaEncoding] != "" && meta[MetaEncoding] != EncodingFFZ1:
		return fmt.Sprintf("encoding %q", meta[MetaEncoding])
	case meta[MetaETag] != r.ETag:
		return fmt.Sprintf("computed from source version %q, the source is at %q", meta[MetaETag], r.ETag)
	case meta[MetaKey] != r.Digest:
		return "cache-key digest differs (another model, layer, preprocessing or dtype)"
	case meta[MetaSHA256] != checksum(data):
		return "checksum mismatch (damaged object)"
	}
	return ""
}

func checksum(data []byte) string {
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:])
}

// Put queues a write of r's feature and returns at once; false means it was
// dropped (queue full in count or bytes, store failing, store closed).
// data must not change afterwards.
func (s *Store) Put(r Ref, data []byte) bool {
	if q := s.tryPut(r, data); q != queued {
		s.drop(r.Key())
		return false
	}
	return true
}

// PutWait is Put that waits, while ctx allows, for room in the queue
// instead of dropping the write when it is full: warm-up's writes, which
// must all reach the store. It still drops while the store is failing or
// closed.
func (s *Store) PutWait(ctx context.Context, r Ref, data []byte) bool {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		switch s.tryPut(r, data) {
		case queued:
			return true
		case refused:
			s.drop(r.Key())
			return false
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			s.drop(r.Key())
			return false
		}
	}
}

type putResult int

const (
	queued  putResult = iota
	full              // no room now
	refused           // closed or failing
)

// tryPut queues a write if there is room.
func (s *Store) tryPut(r Ref, data []byte) putResult {
	n := int64(len(data))
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.down() {
		return refused
	}
	if s.queuedBytes.Load()+n > s.cfg.MaxQueueBytes && s.queuedBytes.Load() > 0 {
		return full
	}
	s.pending.Add(1)
	select {
	case s.queue <- item{ref: r, data: data}:
		s.queuedBytes.Add(n)
		return queued
	default:
		s.pending.Add(-1)
		return full
	}
}

func (s *Store) drop(key string) {
	if s.dropped.Add(1) == 1 && !s.down() {
		s.log.Warn("featurefs: feature store write queue full; dropping writes (counted in stats)",
			slog.String("key", key), slog.String("store", s.store.Identity()))
	}
}

// writer writes queued features until Close.
func (s *Store) writer() {
	for {
		select {
		case <-s.ctx.Done():
			return
		case it := <-s.queue:
			s.queuedBytes.Add(-int64(len(it.data)))
			if s.down() || s.ctx.Err() != nil {
				s.drop(it.ref.Key())
			} else {
				s.write(it)
			}
			s.pending.Add(-1)
		}
	}
}

// write writes the model's manifest if it is not yet written, then the
// feature.
func (s *Store) write(it item) {
	dir := ModelDir(it.ref.Model, it.ref.ModelDigest)
	s.mu.Lock()
	manifest, need := s.manifests[dir]
	s.mu.Unlock()
	if need {
		if err := s.put(dir+"/"+ManifestName, manifest, nil); err != nil {
			s.putErrors.Add(1)
			s.fail("write", dir+"/"+ManifestName, err)
			return
		}
		s.mu.Lock()
		delete(s.manifests, dir)
		s.written[dir] = struct{}{}
		s.mu.Unlock()
	}
	meta := map[string]string{
		MetaSchema: SchemaVersion,
		MetaETag:   it.ref.ETag,
		MetaKey:    it.ref.Digest,
		MetaSHA256: checksum(it.data),
	}
	body := it.data
	if s.cfg.Compression != 0 {
		if blob, err := codec.Encode(nil, it.data, s.cfg.ElemSize, s.cfg.Compression); err == nil && len(blob) < len(it.data) {
			body = blob
			meta[MetaEncoding] = EncodingFFZ1
		}
	}
	if err := s.put(it.ref.Key(), body, meta); err != nil {
		s.putErrors.Add(1)
		s.fail("write", it.ref.Key(), err)
		return
	}
	s.healthy()
	s.puts.Add(1)
	s.putBytes.Add(int64(len(body)))
}

func (s *Store) put(key string, data []byte, meta map[string]string) error {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.Timeout)
	defer cancel()
	return s.store.Put(ctx, key, data, meta)
}

// down reports whether the store failed within Backoff.
func (s *Store) down() bool {
	until := s.failing.Load()
	return until != 0 && s.cfg.Now().UnixNano() < until
}

// fail records a failed request: the store is left alone for Backoff, and
// the first failure of an outage is logged.
func (s *Store) fail(op, key string, err error) {
	if s.ctx.Err() != nil {
		return // closing
	}
	s.failing.Store(s.cfg.Now().Add(s.cfg.Backoff).UnixNano())
	if s.outage.CompareAndSwap(false, true) {
		s.log.Warn("featurefs: feature store failing; reads compute, writes are dropped until it answers again",
			slog.String("op", op), slog.String("key", key), slog.String("store", s.store.Identity()), slog.Any("err", err))
	}
}

// healthy records an answered request, ending an outage.
func (s *Store) healthy() {
	if s.outage.CompareAndSwap(true, false) {
		s.failing.Store(0)
		s.log.Info("featurefs: feature store answers again", slog.String("store", s.store.Identity()))
	}
}

// Flush waits until every write queued so far has been written or dropped,
// or ctx ends.
func (s *Store) Flush(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for s.pending.Load() > 0 {
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Close stops the writers: writes still queued are dropped (call Flush
// first to keep them), a PUT in flight is cancelled. Safe to call twice.
func (s *Store) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	s.owner.Close()
	for {
		select {
		case it := <-s.queue:
			s.queuedBytes.Add(-int64(len(it.data)))
			s.dropped.Add(1)
			s.pending.Add(-1)
		default:
			return
		}
	}
}

// Stats returns the store's figures.
func (s *Store) Stats() Stats {
	return Stats{
		Hits: s.hits.Load(), HitBytes: s.hitBytes.Load(), Misses: s.misses.Load(),
		Mismatches: s.mismatches.Load(), GetErrors: s.getErrors.Load(), Skipped: s.skipped.Load(),
		Puts: s.puts.Load(), PutBytes: s.putBytes.Load(), PutErrors: s.putErrors.Load(),
		Dropped: s.dropped.Load(), Queued: int64(len(s.queue)), QueuedBytes: s.queuedBytes.Load(),
	}
}

// Exists reports whether the store has an object at key (a model
// directory's _model.json): false for a definite miss, an error when the
// store could not say.
func (s *Store) Exists(ctx context.Context, key string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	_, _, _, err := s.store.GetMeta(ctx, key, maxManifestBytes)
	switch {
	case err == nil, errors.Is(err, bucket.ErrTooLarge):
		return true, nil
	case errors.Is(err, bucket.ErrNotFound):
		return false, nil
	}
	return false, fmt.Errorf("feature store: %s: %w", key, err)
}

// maxManifestBytes bounds what Exists reads of an object.
const maxManifestBytes = 1 << 20
