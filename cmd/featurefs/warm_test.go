package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestWarmWaitsForCacheWrites: warm through a mount returns once the
// mount's stats file says no feature is queued for its cache write; a
// stats file without the field (an older mount) is not waited for.
func TestWarmWaitsForCacheWrites(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, ".featurefs"), 0o755); err != nil {
		t.Fatal(err)
	}
	stats := filepath.Join(root, ".featurefs", "stats")
	write := func(s string) {
		tmp := stats + ".tmp"
		if err := os.WriteFile(tmp, []byte(s), 0o644); err != nil {
			t.Error(err)
		}
		if err := os.Rename(tmp, stats); err != nil {
			t.Error(err)
		}
	}
	write(`{"fs": {"cache_write_queued": 3}}` + "\n   \n")
	emptying := make(chan struct{})
	go func() {
		time.Sleep(100 * time.Millisecond) // while warm polls
		close(emptying)
		write(`{"fs": {"cache_write_queued": 0}}`)
	}()
	waitCacheWrites(context.Background(), root, time.Minute)
	select {
	case <-emptying:
	default:
		t.Error("warm returned while the mount still had cache writes queued")
	}

	write(`{"fs": {"reads": 1}}`)
	done := make(chan struct{})
	go func() { waitCacheWrites(context.Background(), root, time.Hour); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Error("warm waited on a mount whose stats have no cache write queue")
	}
}
