package cache

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/featurefs/featurefs/cache/safefile"
)

// Opening the cache's files (issue 48, items 3 and 9). Anyone who can write
// the cache directory (root, or the mount's user) can plant something at
// the name of a file the store opens: a FIFO (whose open, and then read,
// blocks forever), a device, a socket, a directory, a symbolic link, or a
// hard link to a file elsewhere. So every file of the cache the store
// opens is opened with O_NONBLOCK|O_NOFOLLOW|O_CLOEXEC (an open that
// neither blocks nor follows a link), and the descriptor's fstat, not the
// name's, decides: anything but a regular file is refused. No file is
// ever mapped (a file that shrinks under a mapping faults the process:
// SIGBUS), and no mode is ever changed through a name (fchmod on a
// descriptor whose fstat shows a regular file of ours with one link).

// errNotRegular is the error for a cache file that is not a regular file.
var errNotRegular = safefile.ErrNotRegular

// openRegular opens path read-only without blocking (a FIFO) and without
// following a symbolic link (an error matching safefile.ErrSymlink),
// and returns it with its fstat when it is a regular file; anything else
// is an error matching errNotRegular, naming what it is. The descriptor
// is left blocking (O_NONBLOCK cleared) for the reads that follow.
func openRegular(path string) (*os.File, unix.Stat_t, error) {
	var st unix.Stat_t
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		switch {
		case errors.Is(err, unix.ELOOP):
			return nil, st, fmt.Errorf("%s %w", path, safefile.ErrSymlink)
		case errors.Is(err, unix.ENOENT):
			return nil, st, &fs.PathError{Op: "open", Path: path, Err: err}
		}
		// A socket (ENXIO), a device without a driver or on a nodev
		// mount: say what it is rather than why its open failed.
		if unix.Lstat(path, &st) == nil && st.Mode&unix.S_IFMT != unix.S_IFREG {
			return nil, st, fmt.Errorf("%s %w (%s: %v)", path, errNotRegular, kindOf(st.Mode), err)
		}
		return nil, st, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, st, &fs.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, st, fmt.Errorf("%s %w (%s)", path, errNotRegular, kindOf(st.Mode))
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, st, &fs.PathError{Op: "fcntl", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), st, nil
}

// openDir opens the directory path (to fsync it, or fchmod it) without
// following a symbolic link at it and without blocking; anything but a
// directory is refused by the open itself (O_DIRECTORY).
func openDir(path string) (*os.File, unix.Stat_t, error) {
	var st unix.Stat_t
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, st, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, st, &fs.PathError{Op: "fstat", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), st, nil
}

// kindOf names a file type for a message.
func kindOf(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "regular file"
	case unix.S_IFDIR:
		return "directory"
	case unix.S_IFLNK:
		return "symbolic link"
	case unix.S_IFIFO:
		return "FIFO"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	}
	return fmt.Sprintf("file type %#o", mode&unix.S_IFMT)
}

// fileIDOf is the FileID of the file st describes.
func fileIDOf(st *unix.Stat_t) FileID {
	return FileID{Dev: st.Dev, Ino: st.Ino, Size: st.Size, Mtime: st.Mtim.Nano(), Ctime: st.Ctim.Nano()}
}

// FileIDOf returns the FileID of the open file f (its fstat): what a
// caller holding a file OpenFile returned compares with the FileID it got
// then, to tell whether the file was written (or truncated, or unlinked)
// since.
func FileIDOf(f *os.File) (FileID, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return FileID{}, &fs.PathError{Op: "fstat", Path: f.Name(), Err: err}
	}
	return fileIDOf(&st), nil
}

// ownedByUs reports whether st is a regular file of this process's user
// with a single link: a file the store may change the mode of (a hard link
// planted in the cache directory to a file elsewhere has two, or another
// owner).
func ownedByUs(st *unix.Stat_t) bool {
	return st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink == 1 && int(st.Uid) == os.Geteuid()
}

// unknownFiles remembers, for the life of the process, the files of a
// cache directory privatizeFiles left alone and said so (once each).
var unknownFiles sync.Map // path -> struct{}

// privatizeFiles makes the regular files at the top of dir 0600 (Badger
// creates its files 0666 less the umask), never through a name: each one
// open to others is opened with O_NOFOLLOW|O_NONBLOCK and changed with
// fchmod only when its fstat shows a regular file of ours with one link. Anything else (a hard
// link to a file elsewhere, another user's file, a FIFO) is left alone,
// said once per file per process at WARN.
func privatizeFiles(dir string, log *slog.Logger) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var first error
	for _, e := range ents {
		if e.IsDir() || e.Type()&fs.ModeSymlink != 0 {
			continue // directories are made 0700 by the store; a link is refused at Open
		}
		if info, err := e.Info(); err != nil || info.Mode().Perm()&0o077 == 0 {
			continue // gone, or private already: nothing to change
		}
		path := filepath.Join(dir, e.Name())
		f, st, err := openRegular(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err == nil && !ownedByUs(&st) {
			err = fmt.Errorf("%s is not a file of the cache's (%d links, owner uid %d)", path, st.Nlink, st.Uid)
		}
		if err != nil {
			if f != nil {
				f.Close()
			}
			if _, seen := unknownFiles.LoadOrStore(path, struct{}{}); !seen {
				log.Warn("cache: leaving an unknown file in the cache directory alone (its mode is not changed); remove it if it is not yours",
					"dir", dir, "file", e.Name(), "err", err)
			}
			continue
		}
		if st.Mode&0o077 != 0 {
			if err := unix.Fchmod(int(f.Fd()), uint32(fileMode)); err != nil && first == nil {
				first = &fs.PathError{Op: "fchmod", Path: path, Err: err}
			}
		}
		f.Close()
	}
	return first
}

// chmodDir sets the mode of the directory path to mode through a
// descriptor (openDir: no symbolic link followed, a directory only; a
// directory has no hard links, so it is the cache's own).
func chmodDir(path string, mode fs.FileMode) error {
	d, st, err := openDir(path)
	if err != nil {
		return err
	}
	defer d.Close()
	if fs.FileMode(st.Mode).Perm() == mode {
		return nil
	}
	if err := unix.Fchmod(int(d.Fd()), uint32(mode)); err != nil {
		return &fs.PathError{Op: "fchmod", Path: path, Err: err}
	}
	return nil
}

// isNotRegularOrLink reports whether err is openRegular's refusal of
// something that is not a regular file (a link, a FIFO, a socket, a
// directory, a device).
func isNotRegularOrLink(err error) bool {
	return errors.Is(err, errNotRegular) || errors.Is(err, safefile.ErrSymlink) || errors.Is(err, syscall.EISDIR)
}

// SameBytes reports whether the first n bytes of a and b are equal,
// reading both with pread a block at a time (a passthrough mount
// compares a backing file it holds with the cache's verified copy).
func SameBytes(a, b *os.File, n int64) bool {
	const block = 1 << 20
	ba, bb := make([]byte, min(n, block)), make([]byte, min(n, block))
	for at := int64(0); at < n; at += block {
		m := min(block, n-at)
		if _, err := a.ReadAt(ba[:m], at); err != nil {
			return false
		}
		if _, err := b.ReadAt(bb[:m], at); err != nil {
			return false
		}
		if !bytes.Equal(ba[:m], bb[:m]) {
			return false
		}
	}
	return true
}
