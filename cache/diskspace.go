package cache

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Why the store watches the free space of its filesystem: Badger writes its
// value log, its write-ahead logs (memtables) and its tables through
// memory maps of files it extends with ftruncate, so they are sparse. A
// store (z.OpenMmapFile) creates every value-log file 2x ValueLogFileSize
// long with ftruncate and copies each value into the mapping
// (valueLog.write); a write-ahead log likewise at 2x MemTableSize; a table
// (table.CreateTable) is truncated to its size and then copied in. Writing
// into a hole of a mapping makes the kernel allocate a block on the page
// fault; on a full filesystem it cannot, and the process gets SIGBUS, which
// Go cannot recover from in a goroutine it does not own. So the store never
// lets Badger write unless the filesystem has room for the write plus
// everything Badger may write in the background before the next check (a
// memtable flush and a compaction): Put is refused with ErrDiskFull below
// that, and reads go on.

// Disk-space tuning.
const (
	// writeSlack is added to every write admitted: the partly filled
	// pages of the value log and of the write-ahead log it touches, a
	// new file's header page, rounding.
	writeSlack = 64 << 10
	// smallWrite is what a write without a value (a delete, access-order
	// or budget records) is admitted for.
	smallWrite = 1 << 20
	// reserveSlack is kept free beyond a memtable flush and a compaction:
	// the discard-statistics file (1 MiB, sparse), the manifest, headers.
	reserveSlack = 4 << 20
	// smallMemTableSize is the memtable size when the filesystem has
	// less than smallDiskFree free at open: a smaller memtable keeps less
	// free for its flush.
	smallMemTableSize = 2 << 20
	smallDiskFree     = 1 << 30
	// newCacheNeed is the free space creating a cache needs: header pages
	// and Badger's discard statistics (1 MiB, sparse).
	newCacheNeed = 2 << 20
)

// Errors for writes refused for the cache's filesystem; match them with
// errors.Is. The store serves what it holds either way.
var (
	// ErrDiskFull means the cache's filesystem has no room for the write
	// (beyond what the store keeps free for Badger's own files).
	ErrDiskFull = errors.New("cache: cache filesystem full")
	// ErrDirRemoved means the cache directory was removed (or replaced)
	// while the store had it open.
	ErrDirRemoved = errors.New("cache: cache directory removed")
)

// freeBytes returns the bytes an unprivileged user may still write on the
// filesystem that holds path.
func freeBytes(path string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// dirIdentity is a directory's device and inode, to tell it was removed
// or replaced.
type dirIdentity struct{ dev, ino uint64 }

func identify(dir string) (dirIdentity, error) {
	info, err := os.Stat(dir)
	if err != nil {
		return dirIdentity{}, err
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return dirIdentity{}, nil
	}
	return dirIdentity{dev: uint64(st.Dev), ino: st.Ino}, nil
}

// badgerFiles returns the bytes the files of Badger's index hold in dir:
// its tables (which a compaction may rewrite) and its write-ahead logs
// (which opening flushes into tables).
func badgerFiles(dir string) (tables, wals int64) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		info, err := e.Info()
		if err != nil {
			continue
		}
		switch {
		case strings.HasSuffix(e.Name(), ".sst"):
			tables += info.Size()
		case strings.HasSuffix(e.Name(), ".mem"):
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				wals += st.Blocks * 512 // sparse: what it holds
			} else {
				wals += info.Size()
			}
		}
	}
	return tables, wals
}

// isBadgerFile reports whether name is one of the files Badger keeps in its
// directory.
func isBadgerFile(name string) bool {
	for _, suf := range []string{".vlog", ".sst", ".mem"} {
		if strings.HasSuffix(name, suf) {
			return true
		}
	}
	for _, pre := range []string{"MANIFEST", "KEYREGISTRY", "DISCARD", "LOCK"} {
		if strings.HasPrefix(name, pre) {
			return true
		}
	}
	return false
}

// removeBadgerFiles deletes Badger's files in dir (not the lock file or
// anything else), for Clear on a filesystem too full to open Badger for
// writing.
func removeBadgerFiles(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.Type().IsRegular() && isBadgerFile(e.Name()) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// Private modes of the cache directory and its files: features derive from
// images that may be private, and the mount itself refuses other users.
const (
	dirMode  fs.FileMode = 0o700
	fileMode fs.FileMode = 0o600
)

// makeDir creates dir 0700 (whatever the umask), or reports whether an
// existing one is open to the group or others.
func makeDir(dir string) (open bool, err error) {
	info, err := os.Stat(dir)
	switch {
	case err == nil && !info.IsDir():
		return false, fmt.Errorf("%s is not a directory", dir)
	case err == nil:
		return info.Mode().Perm()&0o077 != 0, nil
	case !errors.Is(err, fs.ErrNotExist):
		return false, err
	}
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return false, err
	}
	return false, chmodDir(dir, dirMode) // whatever the umask
}

// admit reserves need bytes of the cache's filesystem for a write, and
// refuses it (ErrDiskFull) unless the free space, less the writes in
// flight, covers the reserve (updateReserve), cushion and need; a removed
// directory refuses every write (ErrDirRemoved). release returns the
// reservation once Badger has written (the space is then allocated).
func (s *Store) admit(need, cushion int64) (release func(), err error) {
	return s.admitWrite(need, cushion, true)
}

// admitWrite is admit; report false neither counts nor logs a refusal (for
// background work that simply waits).
func (s *Store) admitWrite(need, cushion int64, report bool) (release func(), err error) {
	if s.readOnly.Load() {
		if report {
			s.diskFull(-1)
		}
		return nil, fmt.Errorf("%w: %s was opened read-only, its filesystem being full", ErrDiskFull, s.dir)
	}
	if s.gone.Load() {
		return nil, fmt.Errorf("%w: %s", ErrDirRemoved, s.dir)
	}
	s.diskMu.Lock()
	defer s.diskMu.Unlock()
	if s.checkDir(); s.gone.Load() {
		return nil, fmt.Errorf("%w: %s", ErrDirRemoved, s.dir)
	}
	free, err := freeBytes(s.dir)
	if err == nil {
		reserve := s.reserve.Load()
		if free-s.inflight < reserve+cushion+need {
			if report {
				s.diskFull(free)
			}
			return nil, fmt.Errorf("%w: %s has %d bytes free (%d being written); the cache keeps %d free for its index and this write needs %d",
				ErrDiskFull, s.dir, free, s.inflight, reserve+cushion, need)
		}
	} // else: cannot tell; let it through
	s.inflight += need
	return func() {
		s.diskMu.Lock()
		s.inflight -= need
		s.diskMu.Unlock()
	}, nil
}

// diskFull counts a refused write and logs the first one.
func (s *Store) diskFull(free int64) {
	s.diskFullRefusals.Add(1)
	if s.fullWarned.Swap(true) {
		return
	}
	s.mu.Lock()
	stored := s.bytes
	s.mu.Unlock()
	s.log.Warn("cache: cache filesystem full: the cache budget is larger than the free space; features are served but no longer cached until space is freed",
		"dir", s.dir, "free_bytes", free, "reserve_bytes", s.reserve.Load(), "budget_bytes", s.maxBytes, "stored_bytes", stored)
}

// checkDir notices, once, that the cache directory was removed or replaced.
// Badger's files stay readable through its open descriptors and maps, so
// reads go on; nothing more is written.
func (s *Store) checkDir() {
	if s.gone.Load() {
		return
	}
	id, err := identify(s.dir)
	if err == nil && id == s.ident {
		return
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return // cannot tell
	}
	if s.gone.Swap(true) {
		return
	}
	s.log.Warn("cache: the cache directory was removed while in use; features are served but no longer cached (remount to cache again)",
		"dir", s.dir)
}

// updateReserve sets the free space kept for Badger's own writes: the table
// of a memtable flush, a compaction rewriting the index, reserveSlack.
// (Badger's TableInfo.OnDiskSize counts the values a table points to in the
// value log; the table files are what a compaction rewrites.)
func (s *Store) updateReserve() {
	tables, _ := badgerFiles(s.dir)
	s.reserve.Store(s.memTable + tables + reserveSlack)
}

// ClearDir deletes every cached feature in dir without opening the store:
// Badger's files and the feature files go, the directory and its lock file stay. It is for a
// cache that cannot be opened even read-only on a full filesystem (one left
// by a crash holds write-ahead logs Badger must rewrite to open). It fails
// with ErrLocked while another process has the directory open.
func ClearDir(dir string) error {
	lk, err := lockDir(dir)
	if err != nil {
		return err
	}
	defer lk.release()
	if err := removeBadgerFiles(dir); err != nil {
		return fmt.Errorf("cache: clear %s: %w", dir, err)
	}
	if err := os.RemoveAll(filepath.Join(dir, filesDir)); err != nil {
		return fmt.Errorf("cache: clear %s: %w", dir, err)
	}
	return nil
}
