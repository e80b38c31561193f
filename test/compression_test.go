package test

import (
	"bytes"
	"testing"
)

// TestCacheCompression reads a layer through a mount with the default
// --cache-compression (s2): the cache holds the features compressed (ReLU
// features of the seeded ResNet-50 shrink by at least 1.3x) and counts them
// compressed against its budget. Restarted on the same cache with
// --cache-compression off, and then zstd, the mount serves every file from
// the cache, byte for byte the same, computing nothing: a cache holds
// values written either way.
func TestCacheCompression(t *testing.T) {
	d := genDataset(t, "--classes", "2", "--train", "4", "--val", "0")
	names := featureNames(d.keys(t))
	m := testMount(t, mountConfig{Source: d.Dir, Args: []string{"--prefetch", "off"}})
	want := readLayer(t, m, names)
	waitCacheWrites(t, m)
	st := mountStats(t, m)
	raw := statsField(t, st, "cache.put_raw_bytes")
	stored := statsField(t, st, "cache.put_stored_bytes")
	if c, _ := st["cache"].(map[string]any)["compression"].(string); c != "s2" {
		t.Errorf("cache compression %q, want s2 (the default)", c)
	}
	if raw == 0 || float64(raw)/float64(stored) < 1.3 {
		t.Errorf("cache: %d bytes put raw, %d stored; want at least 1.3x smaller", raw, stored)
	}
	if b := statsField(t, st, "cache.bytes"); b != stored {
		t.Errorf("cache budget counts %d bytes, %d were stored", b, stored)
	}
	m.Unmount(t)
	for _, c := range []string{"off", "zstd"} {
		m2 := testMount(t, mountConfig{Source: d.Dir, CacheDir: m.CacheDir, Args: []string{"--prefetch", "off", "--cache-compression", c}})
		got := readLayer(t, m2, names)
		for key, b := range want {
			if !bytes.Equal(got[key], b) {
				t.Errorf("--cache-compression %s: %s differs from what the first mount read", c, names[key])
			}
		}
		st2 := mountStats(t, m2)
		if n := extractionCount(t, st2); n != 0 {
			t.Errorf("--cache-compression %s on a compressed cache: %d extractions, want 0", c, n)
		}
		if h := cacheHitCount(t, st2); h < int64(len(names)) {
			t.Errorf("--cache-compression %s: %d cache hits for %d files", c, h, len(names))
		}
		m2.Unmount(t)
	}
}
