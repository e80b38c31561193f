package archive

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/featurefs/featurefs/extractor/spec"
	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/internal/inflight"
	"github.com/featurefs/featurefs/fs/internal/lifetime"
	"github.com/featurefs/featurefs/fs/internal/lru"
)

// Formats are the archive formats Wrap can show, as --archives names them.
var Formats = []string{"tar", "zip"}

// DefaultMaxIndexBytes bounds the memory of the archive indexes kept (about
// 72 bytes and the path per member: some 800,000 members).
const DefaultMaxIndexBytes = 64 << 20

// DefaultMaxLargeIndexBytes bounds the one index kept beside them that is
// larger than their whole bound (indexcache.go): some 2,800,000 members of
// short names, 300,000 of 800-byte paths.
const DefaultMaxLargeIndexBytes = 256 << 20

// pageSize is the most entries one listing page of an archive holds.
const pageSize = 1000

// Config configures Wrap.
type Config struct {
	// Formats are the archive formats shown as directories ("tar", "zip");
	// none: Wrap returns the bucket as it is.
	Formats []string
	// ImageExtensions are the image extensions (nil: spec's defaults):
	// members with one are listed, and their sidecars.
	ImageExtensions []string
	// MaxMemberBytes bounds a member a Get called with maxBytes <= 0
	// reads; 0 means spec.DefaultMaxObjectSize.
	MaxMemberBytes int64
	// MaxIndexBytes bounds the indexes kept; 0 means DefaultMaxIndexBytes.
	MaxIndexBytes int
	// MaxLargeIndexBytes bounds the one index larger than MaxIndexBytes
	// kept on its own (the last one read; indexcache.go); 0 means
	// DefaultMaxLargeIndexBytes. A larger index is not kept (one WARN
	// line): each lookup reads it again.
	MaxLargeIndexBytes int
	// ReadaheadBytes bounds the read-ahead chunks kept (readahead.go); 0
	// means DefaultReadaheadBytes, negative none (every member is read
	// with its own GET).
	ReadaheadBytes int
	// Logger gets one line per bad archive; nil means slog.Default().
	Logger *slog.Logger
}

// Bucket is a bucket.Bucket that shows the archives of another as
// prefixes (package doc). Safe for concurrent use.
type Bucket struct {
	// Constant data.
	b    bucket.Bucket
	r    bucket.Ranger
	exts []string // lower case, with the dot: ".tar", ".zip"
	cfg  Config
	log  *slog.Logger

	indexes *indexCache                // archive key -> its last index
	chunks  *lru.LRU[chunkKey, []byte] // read-ahead chunks

	// owner owns the index and chunk reads in flight (builds,
	// chunkReads): each runs detached from its callers, so a caller may
	// stop waiting; Close cancels and waits for them.
	owner      *lifetime.Owner
	builds     inflight.Group[*index] // one index read per archive at a time
	chunkReads inflight.Group[[]byte] // one read per read-ahead chunk at a time

	mu     sync.Mutex
	seq    map[string]seqState  // GUARDED_BY(mu): each archive's last read, at most maxSeqArchives
	listed map[string]listedObj // GUARDED_BY(mu): archives' versions as listed, at most maxListed

	store IndexStore // nil: none; set before use (SetIndexStore)

	// Gets counts the ranged GETs of the archives (indexes and members).
	Gets atomic.Int64
	n    counters
}

var (
	_ bucket.Bucket = (*Bucket)(nil)
	_ bucket.Peeker = (*Bucket)(nil)
)

// Wrap returns b with the archives of cfg.Formats shown as prefixes, or b
// itself when there are none or b cannot read ranges (bucket.Ranger).
func Wrap(b bucket.Bucket, cfg Config) bucket.Bucket {
	r, ok := b.(bucket.Ranger)
	if len(cfg.Formats) == 0 || !ok {
		return b
	}
	if cfg.MaxMemberBytes <= 0 {
		cfg.MaxMemberBytes = spec.DefaultMaxObjectSize
	}
	if cfg.MaxIndexBytes <= 0 {
		cfg.MaxIndexBytes = DefaultMaxIndexBytes
	}
	if cfg.MaxLargeIndexBytes <= 0 {
		cfg.MaxLargeIndexBytes = DefaultMaxLargeIndexBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ReadaheadBytes == 0 {
		cfg.ReadaheadBytes = DefaultReadaheadBytes
	}
	w := &Bucket{b: b, r: r, cfg: cfg, log: cfg.Logger, owner: lifetime.New(),
		indexes: newIndexCache(cfg.MaxIndexBytes, cfg.MaxLargeIndexBytes, cfg.Logger),
		chunks:  lru.New[chunkKey, []byte](max(cfg.ReadaheadBytes, 0)),
		seq:     map[string]seqState{}, listed: map[string]listedObj{}}
	w.builds.Owner, w.chunkReads.Owner = w.owner, w.owner
	for _, f := range cfg.Formats {
		w.exts = append(w.exts, "."+strings.ToLower(f))
	}
	return w
}

// Unwrap returns the bucket w shows.
func (w *Bucket) Unwrap() bucket.Bucket { return w.b }

// Identity is the wrapped bucket's: a member's key names its archive.
func (w *Bucket) Identity() string { return w.b.Identity() }

// Close cancels the index and chunk reads in flight, waits for them, and
// closes the wrapped bucket if it has a Close.
func (w *Bucket) Close() error {
	w.owner.Close()
	if c, ok := w.b.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// isArchive reports whether a key's base name is an archive's (an
// extension of Formats in any ASCII case, after a non-empty stem).
func (w *Bucket) isArchive(key string) bool {
	base := key[strings.LastIndexByte(key, '/')+1:]
	for _, e := range w.exts {
		if len(base) > len(e) && strings.EqualFold(base[len(base)-len(e):], e) {
			return true
		}
	}
	return false
}

// split finds the first component of key that names an archive and is
// followed by '/': the archive's key and the rest (relative to it).
func (w *Bucket) split(key string) (arch, rest string, ok bool) {
	for i := 0; i < len(key); i++ {
		if key[i] == '/' && w.isArchive(key[:i]) {
			return key[:i], key[i+1:], true
		}
	}
	return "", "", false
}

// ArchiveOf returns the key of the archive that key is a member of, when
// archives of formats ("tar", "zip": --archives) are shown as directories:
// the first component of key that names such an archive and is followed by
// '/'. ok is false for a key in no archive. It is the rule Bucket.List and
// Get apply, for callers that hold keys and no Bucket (warm's shards).
func ArchiveOf(formats []string, key string) (arch string, ok bool) {
	w := Bucket{}
	for _, f := range formats {
		w.exts = append(w.exts, "."+strings.ToLower(f))
	}
	arch, _, ok = w.split(key)
	return arch, ok
}

// errNotArchive: the archive key is no object (a real prefix "x.tar/").
var errNotArchive = errors.New("not an archive")

// index returns the index of archive arch, reading it unless one is kept
// (one read per archive at a time, detached from its callers: concurrent
// callers share it, and each may stop waiting on its own context).
func (w *Bucket) index(ctx context.Context, arch string) (*index, error) {
	if x, ok := w.indexes.Get(arch); ok {
		w.n.indexMemory.Add(1)
		return x, nil
	}
	return w.builds.Do(ctx, arch, func(ctx context.Context) (*index, error) {
		if x, ok := w.indexes.Get(arch); ok { // read while this run was starting
			return x, nil
		}
		x, err := w.read(ctx, arch)
		if err == nil {
			w.indexes.Put(arch, x, x.cost())
		}
		return x, err
	})
}

// read reads the index of archive arch. A bad archive gives an index with
// err set (kept, so that it is not read again until it changes).
func (w *Bucket) read(ctx context.Context, arch string) (*index, error) {
	lo, x, err := w.stored(ctx, arch)
	if err != nil || x != nil {
		return x, err
	}
	x, err = w.build(ctx, arch, lo)
	if err == nil && w.store != nil {
		w.putIndex(x)
	}
	return x, err
}

// stored returns the version of archive arch (its parent's listing's, or
// a Stat's) and its index when the IndexStore keeps it (x nil: not kept).
func (w *Bucket) stored(ctx context.Context, arch string) (lo listedObj, x *index, err error) {
	lo, ok := w.listedVersion(arch)
	if !ok {
		obj, err := w.b.Stat(ctx, arch)
		if errors.Is(err, bucket.ErrNotFound) {
			return lo, nil, errNotArchive
		}
		if err != nil {
			return lo, nil, err
		}
		lo = listedObj{etag: obj.ETag, size: obj.Size, modTime: obj.ModTime}
	}
	if w.store != nil {
		if x, ok := w.getIndex(arch, lo.etag); ok {
			w.n.indexStore.Add(1)
			return lo, x, nil
		}
	}
	return lo, nil, nil
}

// build reads the index of archive arch at version lo from the archive.
func (w *Bucket) build(ctx context.Context, arch string, lo listedObj) (*index, error) {
	var err error
	x := &index{key: arch, etag: lo.etag, size: lo.size, modTime: lo.modTime}
	get := w.getter(x)
	var first string
	note := func(name, why string) {
		if x.skipped == 0 {
			first = fmt.Sprintf("%q: %s", name, why)
		}
		x.skipped++
	}
	members, gets, err := indexArchive(ctx, arch, get, x.size, note)
	x.gets = gets
	switch {
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case errors.Is(err, errChanged):
		w.indexes.Remove(arch)
		return nil, err
	case err != nil && !errors.Is(err, ErrBadArchive):
		return nil, err // the store failed: not the archive's fault
	case err != nil:
		w.bad(x, err)
		return x, nil
	}
	w.n.indexBuilds.Add(1)
	w.finish(x, members, first)
	return x, nil
}

// indexArchive reads the members of archive arch (zip or tar by its
// name) of size bytes through get; a parser's panic is the archive's
// error.
func indexArchive(ctx context.Context, arch string, get getRange, size int64, note func(name, why string)) (members []member, gets int, err error) {
	defer recoverParse(&err)
	if strings.HasSuffix(strings.ToLower(arch), ".zip") {
		return indexZip(ctx, get, size, note)
	}
	return indexTar(ctx, get, size, note)
}

// bad marks index x as a bad archive's, with its one log line.
func (w *Bucket) bad(x *index, err error) {
	w.n.badArchives.Add(1)
	x.err = fmt.Errorf("archive %s: %w", x.key, err)
	w.log.Warn("featurefs: bad archive: its directory fails (EIO)", slog.String("key", x.key), slog.Any("err", err))
}

// finish completes index x with its members (index.finish), with one
// log line for the members left out (the first named).
func (w *Bucket) finish(x *index, members []member, first string) {
	x.members = members
	x.finish(w.cfg.ImageExtensions)
	if x.skipped > 0 {
		w.log.Warn("featurefs: archive members left out", slog.String("key", x.key),
			slog.Int("members", x.skipped), slog.String("first", first))
	}
}

// forget drops the listed version of archive key: the next index read
// asks the store.
func (w *Bucket) forget(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.listed, key)
}

// errChanged: the archive changed while it was read.
var errChanged = errors.New("archive changed while read")

// getter returns ranged reads of index x's archive version.
func (w *Bucket) getter(x *index) getRange {
	return func(ctx context.Context, off, n int64) ([]byte, error) {
		w.Gets.Add(1)
		b, obj, err := w.r.GetRange(ctx, x.key, off, n)
		if err != nil {
			return nil, err
		}
		w.n.bytesRead.Add(int64(len(b)))
		if obj.ETag != x.etag {
			w.indexes.RemoveIf(x.key, func(y *index) bool { return y == x })
			w.forget(x.key)
			return nil, fmt.Errorf("archive %s: ETag %s, indexed as %s: %w", x.key, obj.ETag, x.etag, errChanged)
		}
		return b, nil
	}
}

// archiveIndex returns the index of the archive that key (a prefix or a
// key inside it) is in, and key relative to it; ok is false when key is
// in no archive.
func (w *Bucket) archiveIndex(ctx context.Context, key string) (x *index, rest string, ok bool, err error) {
	arch, rest, ok := w.split(key)
	if !ok {
		return nil, "", false, nil
	}
	x, err = w.index(ctx, arch)
	if errors.Is(err, errNotArchive) {
		return nil, "", false, nil
	}
	if err == nil && x.err != nil {
		err = x.err
	}
	return x, rest, true, err
}

// List lists an archive's directory from its index, and elsewhere the
// wrapped bucket's page with its archives as prefixes. A listing's first
// page of an archive's directory first asks the store for the archive's
// version (current): a listing read again sees an archive replaced since
// as it sees a replaced object, with its members' new ETags.
func (w *Bucket) List(ctx context.Context, prefix, token string) (bucket.Page, error) {
	if token == "" {
		if arch, _, ok := w.split(prefix); ok {
			if gone, err := w.current(ctx, arch); err != nil || gone {
				return bucket.Page{}, err
			}
		}
	}
	x, dir, ok, err := w.archiveIndex(ctx, prefix)
	switch {
	case err != nil:
		return bucket.Page{}, err
	case ok:
		return ownArchive(x.list(dir, token, pageSize), prefix, dir), nil
	}
	p, err := w.b.List(ctx, prefix, token)
	if err != nil {
		return p, err
	}
	return w.rewrite(p), nil
}

// current asks the store for archive arch's version (a Stat) and, when it
// is not the one the kept index was read at, drops that index and
// remembers the version, so that the next index read reads the archive
// again. gone is true when arch is no object any more and its index was
// kept (a deleted archive lists empty, as a deleted prefix does). An
// archive with no index kept costs no Stat: its index read asks the store.
func (w *Bucket) current(ctx context.Context, arch string) (gone bool, err error) {
	x, ok := w.indexes.Get(arch)
	if !ok {
		return false, nil
	}
	obj, err := w.b.Stat(ctx, arch)
	switch {
	case errors.Is(err, bucket.ErrNotFound):
		w.indexes.RemoveIf(arch, func(y *index) bool { return y == x })
		w.forget(arch)
		return true, nil
	case err != nil:
		return false, err
	case obj.ETag == x.etag:
		return false, nil
	}
	w.indexes.RemoveIf(arch, func(y *index) bool { return y == x })
	w.remember(arch, listedObj{etag: obj.ETag, size: obj.Size, modTime: obj.ModTime})
	return false, nil
}

// Peek is List with at most n entries.
func (w *Bucket) Peek(ctx context.Context, prefix string, n int) (bucket.Page, error) {
	x, dir, ok, err := w.archiveIndex(ctx, prefix)
	switch {
	case err != nil:
		return bucket.Page{}, err
	case ok:
		return ownArchive(x.list(dir, "", max(n, 1)), prefix, dir), nil
	}
	p, err := bucket.Peek(ctx, w.b, prefix, n)
	if err != nil {
		return p, err
	}
	return w.rewrite(p), nil
}

// ownArchive names prefix in p.Archives when it is an archive's own
// directory (dir, the part of prefix inside the archive, is empty): a
// lookup that lists it learns that it is an archive, not a real prefix
// "x.tar/".
func ownArchive(p bucket.Page, prefix, dir string) bucket.Page {
	if dir == "" {
		p.Archives = append(p.Archives, prefix)
	}
	return p
}

// rewrite shows a page's archives as prefixes (named in Page.Archives too:
// a real prefix "x.tar/" is not an archive), and forgets the index of an
// archive listed with another ETag.
func (w *Bucket) rewrite(p bucket.Page) bucket.Page {
	moved := false
	objs := p.Objects[:0:0]
	for _, o := range p.Objects {
		if !w.isArchive(o.Key) {
			objs = append(objs, o)
			continue
		}
		w.indexes.RemoveIf(o.Key, func(x *index) bool { return x.etag != o.ETag })
		w.remember(o.Key, listedObj{etag: o.ETag, size: o.Size, modTime: o.ModTime})
		p.Prefixes = append(p.Prefixes, o.Key+"/")
		p.Archives = append(p.Archives, o.Key+"/")
		moved = true
	}
	if moved {
		p.Objects = objs
		slices.Sort(p.Prefixes)
		p.Prefixes = slices.Compact(p.Prefixes)
	}
	return p
}

// Stat returns a member's metadata from its archive's index, or the
// wrapped bucket's answer.
func (w *Bucket) Stat(ctx context.Context, key string) (bucket.Object, error) {
	x, path, ok, err := w.archiveIndex(ctx, key)
	switch {
	case err != nil:
		return bucket.Object{}, err
	case !ok:
		return w.b.Stat(ctx, key)
	}
	m, found := x.find(path)
	if !found {
		return bucket.Object{}, fmt.Errorf("archive %s: member %q: %w", x.key, path, bucket.ErrNotFound)
	}
	return x.object(m), nil
}

// Get reads a member with one ranged GET (a zip member whose local header
// is longer than guessed: two), or an object of the wrapped bucket. A
// member of an archive that changed since it was indexed is read again
// from the new index.
func (w *Bucket) Get(ctx context.Context, key string, maxBytes int64) ([]byte, bucket.Object, error) {
	data, obj, err := w.get(ctx, key, maxBytes)
	if errors.Is(err, errChanged) {
		return w.get(ctx, key, maxBytes)
	}
	return data, obj, err
}

func (w *Bucket) get(ctx context.Context, key string, maxBytes int64) ([]byte, bucket.Object, error) {
	x, path, ok, err := w.archiveIndex(ctx, key)
	switch {
	case err != nil:
		return nil, bucket.Object{}, err
	case !ok:
		return w.b.Get(ctx, key, maxBytes)
	}
	m, found := x.find(path)
	if !found {
		return nil, bucket.Object{}, fmt.Errorf("archive %s: member %q: %w", x.key, path, bucket.ErrNotFound)
	}
	if err := w.tooLarge(x, m, maxBytes); err != nil {
		return nil, bucket.Object{}, err
	}
	get := w.getter(x)
	if w.cfg.ReadaheadBytes > 0 {
		raw := get
		get = func(ctx context.Context, off, n int64) ([]byte, error) { return w.readMember(ctx, x, raw, off, n) }
	}
	data, err := memberBytes(ctx, get, m)
	if err != nil {
		return nil, bucket.Object{}, fmt.Errorf("archive %s: %w", x.key, err)
	}
	return data, x.object(m), nil
}

// tooLarge is the error of member m of x when it is larger than maxBytes
// (<= 0: Config.MaxMemberBytes), or nil.
func (w *Bucket) tooLarge(x *index, m *member, maxBytes int64) error {
	lim := maxBytes
	if lim <= 0 {
		lim = w.cfg.MaxMemberBytes
	}
	// A read holds the member's stored bytes and then its inflated
	// bytes: a deflated member declaring few bytes but stored in many
	// is as large as its stored bytes.
	if n := max(m.usize, m.size); n > lim {
		return fmt.Errorf("archive %s: member %q: %d bytes, limit %d: %w", x.key, m.path, n, lim, bucket.ErrTooLarge)
	}
	return nil
}

// memberBytes reads member m's bytes through get: a tar member's, or a zip
// member's local header and data, inflated and checked.
func memberBytes(ctx context.Context, get getRange, m *member) (_ []byte, err error) {
	defer recoverParse(&err)
	if m.zip {
		data, _, err := readZipMember(ctx, get, m)
		return data, err
	}
	data, err := get(ctx, m.off, m.size)
	if err == nil && int64(len(data)) != m.size {
		err = fmt.Errorf("member %s: %d of %d bytes: past the archive's end: %w", m.path, len(data), m.size, ErrBadArchive)
	}
	return data, err
}

// Keys returns member keys from an archive's index, or the wrapped
// bucket's keys.
func (w *Bucket) Keys(ctx context.Context, keyPrefix string, n int) ([]string, error) {
	x, rest, ok, err := w.archiveIndex(ctx, keyPrefix)
	switch {
	case err != nil:
		return nil, err
	case !ok:
		return w.b.Keys(ctx, keyPrefix, n)
	}
	return x.keys(rest, n), nil
}
