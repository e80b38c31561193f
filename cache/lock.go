package cache

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
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
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, fileMode)
	if err != nil {
		return nil, fmt.Errorf("cache: open lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		pid := ""
		if b, rerr := os.ReadFile(path); rerr == nil {
			if p := strings.TrimSpace(string(b)); p != "" {
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
