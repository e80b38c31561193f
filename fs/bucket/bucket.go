package bucket

import (
	"context"
	"errors"
	"strings"
	"time"
)

// ErrNotFound is matched (errors.Is) when an object or prefix does not exist.
var ErrNotFound = errors.New("object not found")

// Object describes one object in a bucket.
type Object struct {
	// Key is the full object key, '/'-separated, relative to the bucket root
	// (or the source's prefix).
	Key string
	// Size is the object's size in bytes.
	Size int64
	// ETag identifies the object's content version (S3 ETag; size+mtime for
	// a local directory).
	ETag string
	// ModTime is the object's last modification time.
	ModTime time.Time
	// Identity, when not empty, is the key of the object this key reaches
	// under another name: a local source's key through a symbolic link
	// (a linked file, or a file in a linked directory) has the key of its
	// real path, so that its feature is computed and cached once however
	// many keys reach it. Empty: the object is Key.
	Identity string
	// Plain marks an object the tree shows as it is, a plain read-only
	// file, rather than as a feature: an archive member beside an image
	// of the same sample (WebDataset's key.cls, key.json, key.txt; set
	// by fs/archive).
	Plain bool
}

// Page is one page of a one-level listing.
type Page struct {
	// Prefixes are the immediate sub-"directories", each ending in '/',
	// relative to the bucket root like Object.Key.
	Prefixes []string
	// Objects are the objects directly under the listed prefix.
	Objects []Object
	// Archives are those of Prefixes that are archive objects shown as
	// directories (fs/archive), not prefixes of the store: only these lose
	// their archive extension in the tree (naming.Rule.WithArchives). A
	// real prefix "x.tar/" is not among them. The listing of an archive's
	// own directory names that directory here (so that a lookup, which
	// lists it, knows it for an archive's); any other name not in
	// Prefixes means nothing.
	Archives []string
	// Next is the continuation token; empty when the listing is complete.
	Next string
}

// Bucket is a read-only view of an object store. Implementations are safe
// for concurrent use and honour ctx cancellation.
type Bucket interface {
	// List returns one page of the objects and sub-prefixes directly under
	// prefix ("" for the root, else ending in '/'), starting at token.
	List(ctx context.Context, prefix, token string) (Page, error)
	// Stat returns an object's metadata, or an error matching ErrNotFound.
	Stat(ctx context.Context, key string) (Object, error)
	// Get returns an object's content and metadata. Objects larger than
	// maxBytes fail with an error matching ErrTooLarge; maxBytes <= 0
	// means the bucket's own limit (S3Options.MaxObjectBytes).
	Get(ctx context.Context, key string, maxBytes int64) ([]byte, Object, error)
	// Keys returns up to max object keys that start with keyPrefix and
	// have no '/' after it, in key order (S3: one small ListObjectsV2; a
	// local directory: its sorted names). The feature store's naming rule
	// finds the other images of a stem with it. A source that cannot list
	// keys returns none.
	Keys(ctx context.Context, keyPrefix string, max int) ([]string, error)
	// Identity names the source for cache keys, e.g. "s3://host/bucket/prefix"
	// or "file:///abs/dir".
	Identity() string
}

// ErrTooLarge is matched when an object exceeds the size allowed for a Get.
var ErrTooLarge = errors.New("object too large")

// Peeker is implemented by buckets that can list the first few entries of
// a prefix cheaply (a small page), to tell whether it holds anything of
// interest without reading a whole page.
type Peeker interface {
	// Peek returns a page of at most n entries (objects and sub-prefixes)
	// directly under prefix, the first in key order or (a local
	// directory) the first the store gives; Next, when more may follow,
	// starts a List that covers the rest (it may repeat some).
	Peek(ctx context.Context, prefix string, n int) (Page, error)
}

// Peek returns the first page under prefix: at most n entries from a
// Peeker, else b's first List page.
func Peek(ctx context.Context, b Bucket, prefix string, n int) (Page, error) {
	if p, ok := b.(Peeker); ok {
		return p.Peek(ctx, prefix, n)
	}
	return b.List(ctx, prefix, "")
}

// Ranger is implemented by buckets that can read part of an object (S3: a
// Range header; a local directory: ReadAt). fs/archive reads archive
// indexes and members with it.
type Ranger interface {
	// GetRange returns up to n bytes of key from offset off (fewer at the
	// object's end, none past it) and the object's metadata (Size is the
	// whole object's). It waits for one of the bucket's GET slots.
	GetRange(ctx context.Context, key string, off, n int64) ([]byte, Object, error)
}

// afterMark starts the List tokens made by AfterToken; no store's own
// continuation token starts with a NUL byte.
const afterMark = "\x00after:"

// AfterToken returns a List token that starts a page of a prefix's listing
// right after key (a key or sub-prefix relative to the source, as
// Object.Key; it need not exist): S3's StartAfter. The page's own Next
// continues it as usual. fs/namespace reads a large prefix in key ranges at
// once with it (ListObjectsV2 pages otherwise come one at a time).
func AfterToken(key string) string { return afterMark + key }

// AfterKey returns the key of a token made by AfterToken, and whether token
// is one.
func AfterKey(token string) (string, bool) { return strings.CutPrefix(token, afterMark) }
