package bucket

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// localBucket serves a local directory tree as a bucket.
//
// Keys are '/'-separated paths relative to the root. A key that is empty,
// absolute, or has an empty, "." or ".." element is refused with ErrNotFound;
// symbolic links are followed only while they stay inside the root (os.Root
// enforces it), so a link pointing outside is ErrNotFound too; a link to
// the listed directory or one above it (a loop, such as up -> ..) is left
// out of listings, so that each object has finitely many keys. Only regular
// files are objects and only directories are prefixes; other entries
// (sockets, FIFOs, devices, dangling links) are left out of listings.
//
// Listing memory: S3 lists in key order, so List sorts a directory's names,
// which needs all of them at once (strings only, read in chunks; about 50 MB
// for a million-entry directory). To keep paging a large directory linear
// rather than quadratic, the sorted names of the few most recently listed
// large directories are kept (dirCacheSize of them) and reused while the
// directory's inode and mtime are unchanged (a directory changed within the
// last second is not cached, as mtimes tick coarsely).
type localBucket struct {
	// Constant data.
	root     *os.Root
	dir      string // absolute, symlinks resolved
	pageSize int
	maxBytes int64
	sem      semaphore

	mu   sync.Mutex
	dirs []*dirNames // GUARDED_BY(mu); most recently used last, at most dirCacheSize
}

// dirCacheSize is the number of large directories whose sorted names are kept.
const dirCacheSize = 4

// readdirChunk is the number of names read from a directory per syscall batch.
const readdirChunk = 1024

// dirNames is the sorted listing of one directory at one version.
type dirNames struct {
	rel   string
	ino   uint64
	mtime time.Time
	names []string
}

var _ Bucket = (*localBucket)(nil)

func openLocal(dir string, opts S3Options) (*localBucket, error) {
	if dir == "" {
		return nil, errors.New("bucket: empty directory source")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("bucket: directory %s: %w", dir, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("bucket: directory %s: %w", dir, err)
	}
	st, err := os.Stat(real)
	if err != nil {
		return nil, fmt.Errorf("bucket: directory %s: %w", dir, err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("bucket: source %s is not a directory (want s3://BUCKET[/PREFIX] or a directory)", dir)
	}
	root, err := os.OpenRoot(real)
	if err != nil {
		return nil, fmt.Errorf("bucket: directory %s: %w", dir, err)
	}
	return &localBucket{
		root:     root,
		dir:      real,
		pageSize: opts.ListPageSize,
		maxBytes: opts.MaxObjectBytes,
		sem:      make(semaphore, opts.MaxConcurrentGets),
	}, nil
}

// Identity returns "file://" + the absolute, symlink-free root directory.
func (b *localBucket) Identity() string { return "file://" + b.dir }

// Close releases the root directory handle.
func (b *localBucket) Close() error { return b.root.Close() }

// cleanKey reports whether key is a well-formed relative key that stays
// inside the root.
func cleanKey(key string) bool {
	if key == "" || strings.HasPrefix(key, "/") || strings.ContainsRune(key, 0) {
		return false
	}
	for elem := range strings.SplitSeq(key, "/") {
		if elem == "" || elem == "." || elem == ".." {
			return false
		}
	}
	return true
}

// notFound maps errors of os.Root operations to ErrNotFound where the key
// does not name an object: missing, not a directory on the way, or a path
// that escapes the root (os.Root's escape error is not a syscall error).
func (b *localBucket) notFound(op, key string, err error) error {
	var errno syscall.Errno
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) ||
		errors.Is(err, syscall.ELOOP) || !errors.As(err, &errno) {
		return fmt.Errorf("bucket: %s %s: %w", op, b.url(key), ErrNotFound)
	}
	return fmt.Errorf("bucket: %s %s: %w", op, b.url(key), err)
}

func (b *localBucket) url(key string) string { return b.Identity() + "/" + key }

func objectFromInfo(key string, fi fs.FileInfo) Object {
	return object(key, fi.Size(), fi.ModTime())
}

// objectFromStat is objectFromInfo for a stat(2) result.
func objectFromStat(key string, st *unix.Stat_t) Object {
	return object(key, st.Size, time.Unix(st.Mtim.Sec, st.Mtim.Nsec))
}

// object is a file's Object: the ETag is made of its size and mtime
// (hexadecimal, fmt's "%x-%x", formatted without fmt: a listing makes one
// per file).
func object(key string, size int64, mtime time.Time) Object {
	var b [40]byte
	e := strconv.AppendInt(b[:0], size, 16)
	e = append(e, '-')
	e = strconv.AppendInt(e, mtime.UnixNano(), 16)
	return Object{Key: key, Size: size, ETag: string(e), ModTime: mtime}
}

// Stat returns the metadata of the regular file key.
func (b *localBucket) Stat(ctx context.Context, key string) (Object, error) {
	if err := ctx.Err(); err != nil {
		return Object{}, err
	}
	if !cleanKey(key) {
		return Object{}, fmt.Errorf("bucket: stat %q: %w", key, ErrNotFound)
	}
	fi, err := b.root.Stat(key)
	if err != nil {
		return Object{}, b.notFound("stat", key, err)
	}
	if !fi.Mode().IsRegular() {
		return Object{}, fmt.Errorf("bucket: stat %s: not a regular file: %w", b.url(key), ErrNotFound)
	}
	o := objectFromInfo(key, fi)
	o.Identity = b.realKey(key)
	return o, nil
}

// realKey returns the key of key's real path (symbolic links resolved)
// when it differs from key, and "" when it does not or cannot be resolved
// inside the root (Object.Identity).
func (b *localBucket) realKey(key string) string {
	real, err := filepath.EvalSymlinks(filepath.Join(b.dir, filepath.FromSlash(key)))
	if err != nil {
		return ""
	}
	rel, err := filepath.Rel(b.dir, real)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return ""
	}
	if rel = filepath.ToSlash(rel); rel != key {
		return rel
	}
	return ""
}

// Get reads the regular file key, at most maxBytes (<= 0: the bucket's
// MaxObjectBytes) of it. The returned Object describes the file as opened.
func (b *localBucket) Get(ctx context.Context, key string, maxBytes int64) ([]byte, Object, error) {
	if !cleanKey(key) {
		return nil, Object{}, fmt.Errorf("bucket: get %q: %w", key, ErrNotFound)
	}
	if err := b.sem.acquire(ctx); err != nil {
		return nil, Object{}, fmt.Errorf("bucket: get %s: %w", b.url(key), err)
	}
	defer b.sem.release()
	if err := ctx.Err(); err != nil {
		return nil, Object{}, fmt.Errorf("bucket: get %s: %w", b.url(key), err)
	}
	f, fi, err := b.openRegular(key)
	if err != nil {
		return nil, Object{}, err
	}
	defer f.Close()
	lim := limit(maxBytes, b.maxBytes)
	if fi.Size() > lim {
		return nil, Object{}, fmt.Errorf("bucket: get %s: %d bytes, limit %d: %w", b.url(key), fi.Size(), lim, ErrTooLarge)
	}
	buf := make([]byte, fi.Size())
	const chunk = 1 << 20
	for off := 0; off < len(buf); {
		if err := ctx.Err(); err != nil {
			return nil, Object{}, fmt.Errorf("bucket: get %s: %w", b.url(key), err)
		}
		n, err := io.ReadFull(f, buf[off:min(off+chunk, len(buf))])
		off += n
		if err != nil {
			return nil, Object{}, fmt.Errorf("bucket: get %s: file shrank while reading: %w", b.url(key), err)
		}
	}
	return buf, objectFromInfo(key, fi), nil
}

// List returns up to the page size of entries of directory prefix whose
// names sort after token (the last name of the previous page, or
// AfterToken's key).
func (b *localBucket) List(ctx context.Context, prefix, token string) (Page, error) {
	return b.list(ctx, prefix, token, b.pageSize)
}

var _ Peeker = (*localBucket)(nil)

// Peek returns n entries of directory prefix, the first its readdir gives
// (not the first in key order): a look into a directory (is it shown?)
// reads one batch of names and stats n files, where the first n in key
// order need all of the directory's names, read and sorted (in a walk of
// 1,000 class directories each was read whole twice, for the look and for
// its listing: a tenth of the mount's CPU in a DatasetFolder scan,
// docs/records/scale.md). Its Next, when the directory has more entries,
// starts a List from the top, which covers them (and repeats some).
func (b *localBucket) Peek(ctx context.Context, prefix string, n int) (Page, error) {
	n = min(max(n, 1), b.pageSize)
	return b.listDir(ctx, prefix, func(rel string, f *os.File) ([]string, string, error) {
		names, err := f.Readdirnames(n)
		switch {
		case errors.Is(err, io.EOF):
			return nil, "", nil
		case err != nil:
			return nil, "", fmt.Errorf("bucket: list %s: %w", b.url(rel), err)
		case len(names) < n: // the whole directory
			return names, "", nil
		}
		return names, AfterToken(""), nil
	})
}

// list is List with a page of size entries.
func (b *localBucket) list(ctx context.Context, prefix, token string, size int) (Page, error) {
	return b.listDir(ctx, prefix, func(rel string, f *os.File) ([]string, string, error) {
		names, err := b.sortedNames(ctx, rel, f)
		if err != nil {
			return nil, "", err
		}
		if key, ok := AfterKey(token); ok {
			// AfterToken's key, relative to the source: its name in this
			// directory (a key before the directory starts it from the top).
			token = strings.TrimSuffix(strings.TrimPrefix(key, prefix), "/")
			if !strings.HasPrefix(key, prefix) {
				token = ""
			}
		}
		i := sort.SearchStrings(names, token)
		if token != "" && i < len(names) && names[i] == token {
			i++
		}
		end := min(i+size, len(names))
		next := ""
		if end < len(names) {
			next = names[end-1]
		}
		return names[i:end], next, nil
	})
}

// listDir opens directory prefix and returns the page of the names pick
// returns (with the page's Next): each name stat'ed, what is not a file or
// a directory left out.
func (b *localBucket) listDir(ctx context.Context, prefix string, pick func(rel string, f *os.File) (names []string, next string, err error)) (Page, error) {
	if err := checkPrefix(prefix); err != nil {
		return Page{}, err
	}
	if err := ctx.Err(); err != nil {
		return Page{}, fmt.Errorf("bucket: list %s: %w", b.url(prefix), err)
	}
	rel := "."
	if prefix != "" {
		rel = strings.TrimSuffix(prefix, "/")
		if !cleanKey(rel) {
			return Page{}, fmt.Errorf("bucket: list %q: %w", prefix, ErrNotFound)
		}
	}
	f, err := b.root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return Page{}, b.notFound("list", rel+"/", err)
	}
	defer f.Close()
	names, next, err := pick(rel, f)
	if err != nil {
		return Page{}, err
	}
	page := Page{Next: next}
	dirfd := int(f.Fd())
	realDir := "" // the listed directory's real path, once a symlinked directory needs it
	// A directory reached through a symbolic link holds objects whose
	// identity is under its real path.
	realPrefix := ""
	if rel != "." {
		if r := b.realKey(rel); r != "" {
			realPrefix = r + "/"
		}
	}
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return Page{}, fmt.Errorf("bucket: list %s: %w", b.url(prefix), err)
		}
		key := prefix + name
		// One fstatat relative to the open directory (a name from readdir
		// has no '/' and is not "." or "..", so it stays in the directory);
		// only a symbolic link is resolved through the root, which follows
		// it while it stays inside.
		var st unix.Stat_t
		if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue // vanished: not an entry
		}
		mode := st.Mode & unix.S_IFMT
		if mode == unix.S_IFLNK {
			fi, err := b.root.Stat(key)
			if err != nil {
				continue // dangling or escaping link: not an entry
			}
			switch {
			case fi.IsDir() && b.loops(rel, key, &realDir):
				continue // a link to the directory itself or one above it
			case fi.IsDir():
				mode = unix.S_IFDIR
			case fi.Mode().IsRegular():
				o := objectFromInfo(key, fi)
				o.Identity = b.realKey(key)
				page.Objects = append(page.Objects, o)
				continue
			}
		}
		switch mode {
		case unix.S_IFDIR:
			page.Prefixes = append(page.Prefixes, key+"/")
		case unix.S_IFREG:
			o := objectFromStat(key, &st)
			if realPrefix != "" {
				o.Identity = realPrefix + name
			}
			page.Objects = append(page.Objects, o)
		}
	}
	return page, nil
}

// loops reports whether key, a symbolic link in directory rel that resolves
// to a directory inside the root, resolves to rel itself or to a directory
// above it (e.g. links/up -> ..): listing it would show the same objects
// again under ever longer keys, and prefetch would compute each of them
// once per key, so such a link is left out. *realDir caches rel's real
// path for the page. A path that cannot be resolved is not a loop.
func (b *localBucket) loops(rel, key string, realDir *string) bool {
	if *realDir == "" {
		d, err := filepath.EvalSymlinks(filepath.Join(b.dir, filepath.FromSlash(rel)))
		if err != nil {
			return false
		}
		*realDir = d
	}
	target, err := filepath.EvalSymlinks(filepath.Join(b.dir, filepath.FromSlash(key)))
	if err != nil {
		return false
	}
	return target == *realDir || strings.HasPrefix(*realDir, strings.TrimSuffix(target, "/")+"/")
}

// sortedNames returns the sorted entry names of directory rel, open as f,
// reusing a cached listing of a large directory while its mtime is
// unchanged.
func (b *localBucket) sortedNames(ctx context.Context, rel string, f *os.File) ([]string, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("bucket: list %s: %w", b.url(rel), err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("bucket: list %s: not a directory: %w", b.url(rel), ErrNotFound)
	}
	var ino uint64
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		ino = st.Ino
	}
	if names := b.cached(rel, ino, fi.ModTime()); names != nil {
		return names, nil
	}
	started := time.Now()
	var names []string
	for {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("bucket: list %s: %w", b.url(rel), err)
		}
		chunk, err := f.Readdirnames(readdirChunk)
		names = append(names, chunk...)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("bucket: list %s: %w", b.url(rel), err)
		}
	}
	slices.Sort(names)
	// Directory mtimes tick coarsely: a listing read within a second of the
	// last change could miss a change that leaves the mtime as it is.
	if len(names) > b.pageSize && started.Sub(fi.ModTime()) > time.Second {
		b.remember(&dirNames{rel: rel, ino: ino, mtime: fi.ModTime(), names: names})
	}
	return names, nil
}

func (b *localBucket) cached(rel string, ino uint64, mtime time.Time) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, d := range b.dirs {
		if d.rel == rel {
			if d.ino == ino && d.mtime.Equal(mtime) {
				b.dirs = append(slices.Delete(b.dirs, i, i+1), d)
				return d.names
			}
			b.dirs = slices.Delete(b.dirs, i, i+1)
			return nil
		}
	}
	return nil
}

func (b *localBucket) remember(d *dirNames) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.dirs = slices.DeleteFunc(b.dirs, func(x *dirNames) bool { return x.rel == d.rel })
	if len(b.dirs) >= dirCacheSize {
		b.dirs = slices.Delete(b.dirs, 0, 1)
	}
	b.dirs = append(b.dirs, d)
}

var _ Ranger = (*localBucket)(nil)

// GetRange reads n bytes of the regular file key from off (pread).
func (b *localBucket) GetRange(ctx context.Context, key string, off, n int64) ([]byte, Object, error) {
	if !cleanKey(key) {
		return nil, Object{}, fmt.Errorf("bucket: get %q: %w", key, ErrNotFound)
	}
	if off < 0 || n <= 0 {
		return nil, Object{}, fmt.Errorf("bucket: get %s: bad range %d+%d", b.url(key), off, n)
	}
	if err := b.sem.acquire(ctx); err != nil {
		return nil, Object{}, fmt.Errorf("bucket: get %s: %w", b.url(key), err)
	}
	defer b.sem.release()
	f, fi, err := b.openRegular(key)
	if err != nil {
		return nil, Object{}, err
	}
	defer f.Close()
	n = max(0, min(n, fi.Size()-off))
	buf := make([]byte, n)
	if n > 0 {
		m, err := f.ReadAt(buf, off)
		if err != nil && !(errors.Is(err, io.EOF) && int64(m) == n) {
			return nil, Object{}, fmt.Errorf("bucket: get %s: file shrank while reading: %w", b.url(key), err)
		}
	}
	return buf, objectFromInfo(key, fi), nil
}

// openRegular opens key's file for Get and GetRange, only a regular file
// (else ErrNotFound). O_NONBLOCK: opening a FIFO must not hang; it has no
// effect on regular files.
func (b *localBucket) openRegular(key string) (*os.File, os.FileInfo, error) {
	f, err := b.root.OpenFile(key, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, b.notFound("get", key, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("bucket: get %s: %w", b.url(key), err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("bucket: get %s: not a regular file: %w", b.url(key), ErrNotFound)
	}
	return f, fi, nil
}
