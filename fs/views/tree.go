package views

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/featurefs/featurefs/fs/naming"
)

// Dir is a generated directory: what it lists, and what a name in it
// stands for. fs/ renders any Dir with one generic node (fs/viewnodes.go).
type Dir interface {
	// List returns the directory's entries, in the order shown.
	List(ctx context.Context) ([]Entry, error)
	// Lookup returns what name stands for; an error wrapping
	// bucket.ErrNotFound when it is nothing.
	Lookup(ctx context.Context, name string) (Node, error)
}

// Entry is a name a Dir lists.
type Entry struct {
	Name string
	Dir  bool
	Ino  uint64 // the inode number the mount gives it (Ino)
}

// Node is what a name of a Dir stands for: a directory or a file, and its
// inode number, which carries a file's Version (a changed file is a new
// file: an open one keeps its bytes).
type Node struct {
	Ino  uint64
	Dir  Dir  // set for a directory
	File File // set for a file
}

// Stater is a File whose size and time are taken again at each stat (a
// predictions file's follow its listing's snapshot); any other File's are
// its Size and ModTime, constant.
type Stater interface {
	Stat(ctx context.Context) (size int64, mtime time.Time, err error)
}

// Namespace is what the views know of the bucket: the tree's listings
// and lookups (fs/namespace.Namespace, shared with the feature
// directories).
type Namespace interface {
	// Lookup finds name in prefix's listing.
	Lookup(ctx context.Context, prefix, name string) (naming.Entry, error)
	// Each reads prefix's whole listing, calling fn on each entry as its
	// page comes (a caller that keeps only some holds no more).
	Each(ctx context.Context, prefix string, fn func(naming.Entry)) error
}

// ListAll reads prefix's whole listing into one slice.
func ListAll(ns Namespace) Lister {
	return func(ctx context.Context, prefix string) ([]naming.Entry, error) {
		var all []naming.Entry
		if err := ns.Each(ctx, prefix, func(e naming.Entry) { all = append(all, e) }); err != nil {
			return nil, err
		}
		return all, nil
	}
}

// Ino derives a stable inode number from a node's kind and path, so that
// numbers survive forgets and remounts.
func Ino(kind byte, parts ...string) uint64 {
	// FNV-1a, 64 bits (hash/fnv's New64a), without its allocations: a
	// READDIRPLUS of a large directory computes one per entry.
	const offset64, prime64 = 14695981039346656037, 1099511628211
	h := uint64(offset64)
	h = (h ^ uint64(kind)) * prime64
	for _, p := range parts {
		h *= prime64 // the 0 separator: h ^ 0 == h
		for i := 0; i < len(p); i++ {
			h = (h ^ uint64(p[i])) * prime64
		}
	}
	return InoFrom(h)
}

// InoFrom keeps a hash off the inode numbers FUSE reserves: 0, the
// root's (1) and ^0.
func InoFrom(v uint64) uint64 {
	switch {
	case v <= 1:
		return v + 2
	case v == ^uint64(0):
		return v - 1
	}
	return v
}

// Bytes is a File of bytes that a reload may replace (a model's layers
// table): it keeps one inode, and the mount drops the kernel's pages
// when it changes.
type Bytes struct {
	b   atomic.Pointer[[]byte]
	mod time.Time
}

// NewBytes returns a File of b, modified at mod.
func NewBytes(b []byte, mod time.Time) *Bytes {
	f := &Bytes{mod: mod}
	f.b.Store(&b)
	return f
}

// Replace makes b the file's bytes.
func (f *Bytes) Replace(b []byte) { f.b.Store(&b) }

// Size is the bytes' length.
func (f *Bytes) Size() int64 { return int64(len(*f.b.Load())) }

// ModTime is the time given.
func (f *Bytes) ModTime() time.Time { return f.mod }

// Version is 0: the file keeps its inode when replaced.
func (f *Bytes) Version() uint64 { return 0 }

// ReadAt copies the bytes at off.
func (f *Bytes) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	return copy(p, SliceAt(*f.b.Load(), len(p), off)), nil
}

// SliceAt returns the part of data a read of n bytes at off sees.
func SliceAt(data []byte, n int, off int64) []byte {
	if off >= int64(len(data)) || off < 0 {
		return nil
	}
	return data[off:min(off+int64(n), int64(len(data)))]
}
