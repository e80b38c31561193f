package test

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// TestCacheWritesBehindSurviveUnmount reads a layer through a real mount:
// each feature reaches the cache through the write-behind queue (the stats
// count every one as written in the background or still queued, none
// inline or skipped: one reader never fills the queue), and unmounting writes what is
// still queued before the cache closes: a remount on the same cache
// directory serves every file from the cache, byte for byte the same,
// extracting nothing, and the first mount logged no dropped write.
func TestCacheWritesBehindSurviveUnmount(t *testing.T) {
	d := genDataset(t, "--classes", "2", "--train", "6", "--val", "0")
	names := featureNames(d.keys(t))
	m := testMount(t, mountConfig{Source: d.Dir, Args: []string{"--prefetch", "off"}})
	want := readLayer(t, m, names)
	st := mountStats(t, m)
	bg := statsField(t, st, "fs.cache_writes_background")
	queued := statsField(t, st, "fs.cache_write_queued")
	inline := statsField(t, st, "fs.cache_writes_inline")
	skipped := statsField(t, st, "fs.cache_writes_skipped")
	if bg+queued != int64(len(names)) || inline != 0 || skipped != 0 {
		t.Errorf("%d features read: %d written in the background, %d queued, %d inline, %d skipped; want all through the queue",
			len(names), bg, queued, inline, skipped)
	}
	if bound := statsField(t, st, "fs.cache_write_queue_max_bytes"); bound != 64<<20 {
		t.Errorf("cache write queue bound %d bytes, want the default 64 MiB", bound)
	}
	m.Unmount(t)
	if log, _ := os.ReadFile(m.Log); strings.Contains(string(log), "dropped") {
		t.Errorf("the mount dropped cache writes on unmount:\n%s", log)
	}

	m2 := testMount(t, mountConfig{Source: d.Dir, CacheDir: m.CacheDir, Args: []string{"--prefetch", "off"}})
	got := readLayer(t, m2, names)
	for key, b := range want {
		if !bytes.Equal(got[key], b) {
			t.Errorf("%s differs after the remount", names[key])
		}
	}
	st2 := mountStats(t, m2)
	if n := extractionCount(t, st2); n != 0 {
		t.Errorf("remount on the same cache: %d extractions, want 0 (every feature written before the unmount)", n)
	}
	if h := cacheHitCount(t, st2); h < int64(len(names)) {
		t.Errorf("remount: %d cache hits for %d files", h, len(names))
	}
}
