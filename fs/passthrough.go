package fs

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/featurefs/featurefs/cache"
	"github.com/featurefs/featurefs/fs/namespace"
)

// FUSE passthrough (MountOptions.Passthrough; Linux 6.9 and later, root).
//
// A feature the cache holds as a plain file of exactly its bytes (an
// uncompressed large feature: cache.Store.OpenFile) can be read by the
// kernel straight from that file: the open of the feature file hands the
// kernel the cache's file (a backing file, FOPEN_PASSTHROUGH), and its
// reads then never reach the mount. The price is the OPEN round trip that
// the mount otherwise avoids (noOpen): with passthrough on, every open(2)
// of a feature file is answered, and the others (a feature not cached, or
// cached another way) get a handle that keeps the kernel's page cache
// (FOPEN_KEEP_CACHE) and read through the mount as before.
//
// Checks: the reads bypass the cache's per-chunk CRCs, so the open verifies
// every chunk of the file first (through the page cache, which the
// kernel's reads then find warm); a file that fails is a miss, deleted,
// and the open reads through the mount. A file is checked at the first
// open of its node that hands it over, and again at every later open
// (the first of a new backing, or one that shares the node's held
// backing file) whenever the file is another inode or its length,
// modification or change time differ from those of its last check
// (cache.FileID: a write by write(2), or through a mapping on most file
// systems, changes both times; only root can write the cache's 0600
// files), not per read: the kernel keeps the backing file for as long as
// the feature file is open.
// An open that shares a held backing file that changed since its check
// has it checked again (recheckBacking); one that fails it is refused
// (EIO: the kernel takes no other mode while the backing file is held,
// FOPEN_DIRECT_IO included), the cache entry dropped, the failure logged
// once by the cache. What is
// not checked is in docs/CACHE.md ("What passthrough does not check"):
// opens already holding the backing file read what it holds, a write
// between a check and the kernel's read is read, and damage that no write
// makes (the disk's own, under the page cache) is seen by the first open
// of each node in a mount only.
//
// Versions: a node stands for one object version (its inode number holds
// the ETag), and its backing file is that version's cache file (the cache
// key holds the ETag). A backing file is handed out only at an open of a
// node whose version is the one the mount knows as current (the fresh
// listing, or a newer version a read found: CurrentVersion); an open of
// an older node reads through the mount, which serves the new version and
// drops the old pages, as without passthrough. The kernel allows no such
// open while other opens of the old node hold its backing file (one I/O
// mode per inode): when a lookup of the name now gives the new version's
// node (a listing shows the change), that open answers ESTALE, and the
// kernel looks the name up again and opens the new node
// (TestPassthroughOverwriteReadsNewVersion); when it would give the same
// node (a newer version only a read found, within the listing's TTL),
// ESTALE would fail the open, so it shares the old node's backing file and
// reads that node's version.
// An evicted or replaced cache file stays readable (and its disk space
// held) until the feature file's last close.
//
// The kernel allows one I/O mode per inode at a time: while an open of a
// node reads through the mount, no open of it is handed a backing file,
// and while one holds a backing file every open of it gets the same one.
//
// Off silently where it cannot work: the kernel does not offer it (Mount),
// or registering a backing file fails (not root, a cache on a stacked
// file system): the first open that would use it tries, and on failure
// the mount goes back to answering opens ENOSYS (no OPEN round trips).

// ptState is a feature file node's passthrough state.
type ptState struct {
	mu           sync.Mutex
	file         *os.File // the backing file while backed > 0
	backed       int      // live opens handed the backing file
	throughMount int      // live opens that read through the mount
	// verified is the cache file this node last had verified: an open
	// that finds the same inode unchanged (cache.FileID: length,
	// modification and change times too) does not verify it again.
	verified cache.FileID
	// stale: the held backing file failed recheckBacking; every open
	// that would share it is refused until the last one closes.
	stale bool
}

// ptHandle is the handle of an open of a feature file handed its node's
// backing file (registered with the kernel at the node's first such open
// and shared by the others).
type ptHandle struct{ ff *featureFile }

// mountHandle is the handle of an open that reads through the mount. It
// offers go-fuse no backing file on purpose: go-fuse attaches a node's
// registered backing file to any open whose handle offers one, and its
// unregistering at the last close comes after that close reaches us, so a
// handle that could offer one might get an older version's backing file.
type mountHandle struct{ ff *featureFile }

var (
	_ = (gofs.FilePassthroughFder)((*ptHandle)(nil))
	_ = (gofs.FileReleaser)((*ptHandle)(nil))
	_ = (gofs.FileReleaser)((*mountHandle)(nil))
	_ = (gofs.NodeOpener)((*featureFile)(nil))
)

// Release ends an open that read through the mount.
func (h *mountHandle) Release(ctx context.Context) syscall.Errno {
	st := &h.ff.pt
	st.mu.Lock()
	st.throughMount--
	st.mu.Unlock()
	return 0
}

// PassthroughFd returns the node's backing file (go-fuse asks once per
// node while none is registered).
func (h *ptHandle) PassthroughFd() (int, bool) {
	st := &h.ff.pt
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.file == nil {
		return 0, false
	}
	return int(st.file.Fd()), true
}

// Release ends an open: the node's backing file is closed with its last
// backed open (the kernel holds its own reference until it releases the
// backing id).
func (h *ptHandle) Release(ctx context.Context) syscall.Errno {
	st := &h.ff.pt
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.backed--; st.backed == 0 && st.file != nil {
		st.file.Close()
		st.file = nil
		st.stale = false
	}
	return 0
}

// Open answers ENOSYS (noOpen) unless passthrough is on: then see the
// comment at the top of this file.
func (ff *featureFile) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	f := ff.fs
	if f == nil {
		return nil, 0, syscall.ENOSYS
	}
	f.stats.opens.Add(1)
	if !f.passthrough.Load() {
		return nil, 0, syscall.ENOSYS
	}
	if flags&syscall.O_ACCMODE != syscall.O_RDONLY {
		return nil, 0, syscall.EROFS // the read-only mount refuses it first
	}
	obj, listed := f.ns.CurrentVersion(ff.prefix, ff.name, ff.obj)
	current := listed && obj.Key == ff.obj.Key && obj.ETag == ff.obj.ETag
	st := &ff.pt
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.backed > 0 {
		if !current {
			// The kernel takes no other mode while the backing file is
			// held. Where a lookup of the name now gives the new
			// version's node, ESTALE makes the kernel look it up again
			// and open that; else (a newer version only a read found,
			// within the listing's TTL) this open shares the old node's
			// backing file, its own version.
			if le, err := f.ns.Lookup(ctx, ff.prefix, ff.name); err == nil && !le.Dir && le.Obj.ETag != ff.obj.ETag {
				return nil, 0, syscall.ESTALE
			}
		}
		if !ff.recheckBacking() {
			// The held file is no longer vouched for, and the kernel
			// refuses any open of the node that is not passthrough while
			// it is held (EINVAL, even with FOPEN_DIRECT_IO: measured on
			// 6.18).
			return nil, 0, syscall.EIO
		}
		st.backed++
		f.stats.passthroughOpens.Add(1)
		return &ptHandle{ff: ff}, 0, 0
	}
	if current && st.throughMount == 0 {
		t0 := time.Now()
		file, fid, ok := f.p.OpenCachedFile(ff.fv, ff.obj, st.verified)
		f.stats.passthroughVerifyNanos.Add(int64(time.Since(t0)))
		if ok && !f.canPassthrough(file) {
			file.Close()
			return nil, 0, syscall.ENOSYS // off from now on: no more OPENs
		}
		if ok {
			st.verified = fid
			st.file = file
			st.backed = 1
			f.stats.passthroughOpens.Add(1)
			// What a read would have done: prefetch learns the layer
			// directory being read, the file's failure memo is cleared.
			f.p.Touch(ff.fv, ff.prefix)
			f.ns.ReadDone(namespace.FileKey{View: ff.fv, Key: ff.obj.Key, ETag: ff.obj.ETag}, ff.prefix+ff.name, nil)
			return &ptHandle{ff: ff}, 0, 0
		}
	}
	st.throughMount++
	var keep uint32
	if current {
		keep = fuse.FOPEN_KEEP_CACHE // as no_open did; an old node's pages are dropped
	}
	return &mountHandle{ff: ff}, keep, 0
}

// recheckBacking checks again, for an open that would share it, the
// backing file the node holds (st.mu held) when it changed since its last
// check (its cache.FileID: inode, length, modification and change time):
// written, truncated, or unlinked or replaced by the cache. When the
// cache's file of the feature is still that inode, the cache verifies it
// (OpenCachedFile: a damaged one is dropped and logged there); when the
// cache replaced it (a new inode of the same bytes, verified), the held
// file must hold exactly those bytes. Otherwise (damaged, evicted since,
// unreadable) nothing vouches for it and it reports false: the opens that
// hold it keep it until they close, and every open until then is refused
// with EIO (said once).
func (ff *featureFile) recheckBacking() bool {
	f, st := ff.fs, &ff.pt
	if st.stale {
		return false // said when it was found
	}
	held, err := cache.FileIDOf(st.file)
	if err == nil && held == st.verified {
		return true
	}
	t0 := time.Now()
	defer func() { f.stats.passthroughVerifyNanos.Add(int64(time.Since(t0))) }()
	ok, why := false, "the cache no longer holds it (damaged, or evicted since)"
	if err != nil {
		why = err.Error()
	} else if file, fid, found := f.p.OpenCachedFile(ff.fv, ff.obj, st.verified); found {
		switch {
		case fid == held: // the same inode, unchanged since our fstat: just verified
			ok = true
		case fid.Size == held.Size && cache.SameBytes(st.file, file, held.Size):
			// The cache replaced the file: the held one holds the
			// verified bytes, unless written during the comparison.
			now, err := cache.FileIDOf(st.file)
			ok = err == nil && now == held
			why = "written while it was compared with the cache's copy"
		default:
			why = "it differs from the cache's verified copy"
		}
		file.Close()
	}
	if !ok {
		st.stale = true
		f.log.Warn("featurefs: passthrough: the cache file held open for this feature changed since it was checked and cannot be checked again: open refused (EIO) while other opens hold it",
			slog.String("key", ff.obj.Key), slog.String("name", ff.prefix+ff.name), slog.String("why", why))
		return false
	}
	st.verified = held
	return true
}

// canPassthrough reports whether the kernel takes file as a backing file,
// trying once per mount (registering and unregistering it): where it
// refuses (not root: EPERM; a cache on a stacked file system: ELOOP),
// passthrough is turned off for the mount, said once at info level, and
// opens are answered ENOSYS from then on, as without it.
func (f *FS) canPassthrough(file *os.File) bool {
	f.ptProbe.Lock()
	defer f.ptProbe.Unlock()
	if f.ptProbed {
		return f.passthrough.Load()
	}
	f.ptProbed = true
	register := f.registerBacking
	if register == nil {
		register = func(fd int) syscall.Errno {
			srv := f.srv.Load()
			if srv == nil {
				return syscall.ENOTCONN
			}
			id, errno := srv.RegisterBackingFd(&fuse.BackingMap{Fd: int32(fd)})
			if errno == 0 {
				srv.UnregisterBackingFd(id)
			}
			return errno
		}
	}
	if errno := register(int(file.Fd())); errno != 0 {
		f.passthrough.Store(false)
		f.log.Info("featurefs: passthrough off: the kernel refused a backing file; reads go through the mount", slog.Any("err", errno))
		return false
	}
	return true
}
