package cache

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/featurefs/featurefs/cache/safefile"
)

// lockFileName is the file in Options.Dir that a Store holds an exclusive
// flock on for its lifetime. It contains the holder's pid.
const lockFileName = "featurefs.lock"

// dirLock is an exclusive advisory lock on a cache directory.
type dirLock struct {
	f *os.File
}

// closingMark follows the pid in the lock file once its holder is closing
// the store (Store.MarkClosing): a mount that was unmounted, whose process
// has yet to exit (umount returns before it does).
const closingMark = "closing"

// lockGrace is how long a lock held by a holder not marked closing is
// waited for when Options.WaitClosing is set: an umount returns a moment
// before the mount's process notices and marks its lock.
const lockGrace = 2 * time.Second

// holder is what the lock file says of the process holding it.
type holder struct {
	pid     int // 0: unknown
	closing bool
}

// readHolder reads the lock file's "PID[ closing]" line.
func readHolder(f *os.File) holder {
	b := make([]byte, 64)
	n, _ := f.ReadAt(b, 0)
	fields := strings.Fields(string(b[:n]))
	var h holder
	if len(fields) > 0 {
		h.pid, _ = strconv.Atoi(fields[0])
	}
	h.closing = len(fields) > 1 && fields[1] == closingMark
	return h
}

func (h holder) String() string {
	if h.pid <= 0 {
		return ""
	}
	return " (pid " + strconv.Itoa(h.pid) + ")"
}

// lockDir takes the directory's lock without waiting. Another holder gives an
// error matching ErrLocked that names the directory and, when known, the
// holder's pid.
func lockDir(dir string) (*dirLock, error) { return lockDirWait(dir, 0, nil) }

// lockDirWait is lockDir that, when wait > 0, waits up to wait for a holder
// that marked itself closing (and lockGrace for one that has not), calling
// onWait once with the holder's pid when it starts waiting for a closing
// one.
func lockDirWait(dir string, wait time.Duration, onWait func(pid int)) (*dirLock, error) {
	path := filepath.Join(dir, lockFileName)
	// Kept between holders, so not O_EXCL: O_NOFOLLOW and a regular file
	// only, so a link planted here is never written through.
	f, err := safefile.OpenLock(path, fileMode)
	if err != nil {
		return nil, fmt.Errorf("cache: open lock file: %w", err)
	}
	// The holder truncates and writes it: never a hard link planted here
	// to a file elsewhere (its owner is not checked: on NFS with
	// root_squash root's own files belong to nobody).
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Nlink != 1 {
		f.Close()
		if err == nil {
			err = fmt.Errorf("%s has %d links (a hard link to a file elsewhere?): not a lock file the cache created; remove it", path, st.Nlink)
		}
		return nil, fmt.Errorf("cache: open lock file: %w", err)
	}
	start := time.Now()
	waited := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("cache: lock %s: %w", path, err)
		}
		h := readHolder(f)
		since := time.Since(start)
		if h.closing && since < wait {
			if !waited && onWait != nil {
				onWait(h.pid)
			}
			waited = true
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if wait > 0 && !h.closing && since < min(wait, lockGrace) {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		f.Close()
		if h.closing {
			return nil, fmt.Errorf("%w: cache directory %s is in use by another process%s, still closing it after %v",
				ErrLocked, dir, h, wait.Round(time.Second))
		}
		return nil, fmt.Errorf("%w: cache directory %s is in use by another process%s; stop it or use another --cache-dir",
			ErrLocked, dir, h)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &dirLock{f: f}, nil
}

// markClosing says in the lock file that its holder is closing.
func (l *dirLock) markClosing() {
	_, _ = l.f.WriteAt([]byte(strconv.Itoa(os.Getpid())+" "+closingMark+"\n"), 0)
}

// Holder returns the pid of the process holding dir's lock, 0 when none
// does (or it is not known), and whether it is closing the store.
func Holder(dir string) (pid int, closing bool) {
	f, _, err := openRegular(filepath.Join(dir, lockFileName)) // no FIFO, no link
	if err != nil {
		return 0, false
	}
	defer f.Close()
	if syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB) == nil {
		return 0, false // nobody holds it
	}
	h := readHolder(f)
	return h.pid, h.closing
}

func (l *dirLock) release() error {
	// Leave the file in place: removing it would race with a process that
	// opened it and waits to lock it.
	_ = l.f.Truncate(0)
	return l.f.Close()
}

// refuseLinks refuses a cache directory that holds a symbolic link: Badger
// opens its files with O_CREATE and would write through one planted at
// the name of a file it creates. It refuses too anything but a regular
// file at the name of one of Badger's files (a FIFO would block Badger's
// open of it, and so the mount's start, forever).
func refuseLinks(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("cache: %s: %w", dir, err)
	}
	for _, e := range ents {
		if e.Type()&os.ModeSymlink != 0 {
			return fmt.Errorf("cache: %s: %w", dir, safefile.RefuseSymlink(filepath.Join(dir, e.Name())))
		}
		if isBadgerFile(e.Name()) && !e.Type().IsRegular() {
			return fmt.Errorf("cache: %s: %s %w (%v); remove it",
				dir, e.Name(), safefile.ErrNotRegular, e.Type())
		}
	}
	return nil
}
