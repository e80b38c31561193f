package cache

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/featurefs/featurefs/internal/safefile"
)

// lockFileName is the file in Options.Dir that a Store holds an exclusive
// flock on for its lifetime. It contains the holder's pid.
const lockFileName = "featurefs.lock"

// dirLock is an exclusive advisory lock on a cache directory.
type dirLock struct {
	f *os.File
}

// lockDir takes the directory's lock without waiting. Another holder gives an
// error matching ErrLocked that names the directory and, when known, the
// holder's pid.
func lockDir(dir string) (*dirLock, error) {
	path := filepath.Join(dir, lockFileName)
	// Kept between holders, so not O_EXCL: O_NOFOLLOW and a regular file
	// only, so a link planted here is never written through.
	f, err := safefile.OpenLock(path, fileMode)
	if err != nil {
		return nil, fmt.Errorf("cache: open lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		pid := ""
		b := make([]byte, 64)
		if n, _ := f.ReadAt(b, 0); n > 0 {
			if p := strings.TrimSpace(string(b[:n])); p != "" {
				if _, perr := strconv.Atoi(p); perr == nil {
					pid = " (pid " + p + ")"
				}
			}
		}
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: cache directory %s is in use by another process%s; stop it or use another --cache-dir",
				ErrLocked, dir, pid)
		}
		return nil, fmt.Errorf("cache: lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &dirLock{f: f}, nil
}

func (l *dirLock) release() error {
	// Leave the file in place: removing it would race with a process that
	// opened it and waits to lock it.
	_ = l.f.Truncate(0)
	return l.f.Close()
}

// refuseLinks refuses a cache directory that holds a symbolic link: Badger
// opens its files with O_CREATE and would write through one planted at
// the name of a file it creates.
func refuseLinks(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("cache: %s: %w", dir, err)
	}
	for _, e := range ents {
		if e.Type()&os.ModeSymlink != 0 {
			return fmt.Errorf("cache: %s: %w", dir, safefile.RefuseSymlink(filepath.Join(dir, e.Name())))
		}
	}
	return nil
}
