package main

import (
	"errors"
	"log/slog"
	"time"

	"github.com/featurefs/featurefs/cache"
	"github.com/featurefs/featurefs/mountopts"
)

// lockWait is how long opening a cache waits for a lock held by another
// process: a mount that was just unmounted closes its cache (and so releases
// the lock) a second or two after `umount` returns, and a remount right
// after it should not fail for that.
const lockWait = 5 * time.Second

// openCache opens the feature cache the options name, retrying for up to
// lockWait while another process holds its lock. The error of the last try
// matches cache.ErrLocked when the lock never came free.
func openCache(o mountopts.Options, log *slog.Logger) (*cache.Store, error) {
	deadline := time.Now().Add(lockWait)
	for {
		store, err := cache.Open(cache.Options{Dir: o.CacheDir, MaxBytes: o.CacheSize, Logger: log})
		if err == nil || !errors.Is(err, cache.ErrLocked) || time.Now().After(deadline) {
			return store, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
