package cache

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"syscall"
)

// DiskUsage returns the bytes that the files under dir occupy on disk
// (allocated blocks, so Badger's sparse preallocated value-log files count
// only what they hold).
func DiskUsage(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed meanwhile (Badger rotating or collecting files)
		}
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			total += st.Blocks * 512
		} else {
			total += info.Size()
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("cache: disk usage of %s: %w", dir, err)
	}
	return total, nil
}
