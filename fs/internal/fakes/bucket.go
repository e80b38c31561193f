package fakes

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/featurefs/featurefs/fs/bucket"
)

// Bucket is an in-memory bucket with S3's one-level, sorted, paged
// listing (the tests of fs and fs/namespace). It counts its calls. Safe
// for concurrent use.
type Bucket struct {
	pageSize int

	mu      sync.Mutex
	objects map[string]object

	// Lists, Stats and Gets count the calls of List, Stat and Get.
	Lists, Stats, Gets atomic.Int64
	// ListsInFlight is the List calls running now; MaxListsInFlight the
	// most there were at once.
	ListsInFlight, MaxListsInFlight atomic.Int64
	// ListDelay, when set before use, is how long each List call takes.
	ListDelay time.Duration
}

// object is one stored object.
type object struct {
	data  []byte
	etag  string
	mtime time.Time
}

// NewBucket returns an empty bucket listing pageSize entries a page.
func NewBucket(pageSize int) *Bucket {
	return &Bucket{pageSize: pageSize, objects: map[string]object{}}
}

// Put stores an object (its ETag from its bytes).
func (b *Bucket) Put(key string, data []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	sum := sha256.Sum256(data)
	b.objects[key] = object{data: data, etag: fmt.Sprintf("%x", sum[:8]), mtime: time.Unix(1700000000, 0)}
}

// Del removes an object.
func (b *Bucket) Del(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.objects, key)
}

// Identity names the fake.
func (b *Bucket) Identity() string { return "fake://bucket" }

// Keys lists none: the tests that use it have no feature store.
func (b *Bucket) Keys(ctx context.Context, keyPrefix string, max int) ([]string, error) {
	return nil, nil
}

// List returns one page of prefix's one-level names after token (a
// key: the last of the previous page, or bucket.AfterToken's).
func (b *Bucket) List(ctx context.Context, prefix, token string) (bucket.Page, error) {
	b.Lists.Add(1)
	n := b.ListsInFlight.Add(1)
	defer b.ListsInFlight.Add(-1)
	for m := b.MaxListsInFlight.Load(); n > m && !b.MaxListsInFlight.CompareAndSwap(m, n); m = b.MaxListsInFlight.Load() {
	}
	if b.ListDelay > 0 {
		select {
		case <-time.After(b.ListDelay):
		case <-ctx.Done():
			return bucket.Page{}, ctx.Err()
		}
	}
	if key, ok := bucket.AfterKey(token); ok {
		token = key
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	// One-level names in key order: objects, and prefixes as "dir/".
	seen := map[string]bool{}
	var names []string
	for k := range b.objects {
		rest, ok := strings.CutPrefix(k, prefix)
		if !ok {
			continue
		}
		n := prefix + rest
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			n = prefix + rest[:i+1]
		}
		if !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var p bucket.Page
	i := sort.SearchStrings(names, token)
	if token != "" && i < len(names) && names[i] == token {
		i++
	}
	for ; i < len(names) && len(p.Prefixes)+len(p.Objects) < b.pageSize; i++ {
		n := names[i]
		if strings.HasSuffix(n, "/") {
			p.Prefixes = append(p.Prefixes, n)
		} else {
			o := b.objects[n]
			p.Objects = append(p.Objects, bucket.Object{Key: n, Size: int64(len(o.data)), ETag: o.etag, ModTime: o.mtime})
		}
	}
	if i < len(names) {
		p.Next = names[i-1]
	}
	return p, nil
}

// Stat returns an object's metadata.
func (b *Bucket) Stat(ctx context.Context, key string) (bucket.Object, error) {
	b.Stats.Add(1)
	b.mu.Lock()
	defer b.mu.Unlock()
	o, ok := b.objects[key]
	if !ok {
		return bucket.Object{}, fmt.Errorf("stat %s: %w", key, bucket.ErrNotFound)
	}
	return bucket.Object{Key: key, Size: int64(len(o.data)), ETag: o.etag, ModTime: o.mtime}, nil
}

// Get returns an object's bytes, up to maxBytes (<= 0: no limit of its own).
func (b *Bucket) Get(ctx context.Context, key string, maxBytes int64) ([]byte, bucket.Object, error) {
	b.Gets.Add(1)
	b.mu.Lock()
	defer b.mu.Unlock()
	o, ok := b.objects[key]
	if !ok {
		return nil, bucket.Object{}, fmt.Errorf("get %s: %w", key, bucket.ErrNotFound)
	}
	obj := bucket.Object{Key: key, Size: int64(len(o.data)), ETag: o.etag, ModTime: o.mtime}
	if maxBytes > 0 && int64(len(o.data)) > maxBytes {
		return nil, obj, fmt.Errorf("get %s: %d bytes: %w", key, len(o.data), bucket.ErrTooLarge)
	}
	return append([]byte(nil), o.data...), obj, nil
}
