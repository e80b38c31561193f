package test

import (
	"bytes"
	"testing"
)

// TestPassthroughServesCachedLayer: a mount with --cache-compression off
// (so --passthrough, on by default, is in effect) computes a layer12 of the
// seeded ResNet-50 into the cache; restarted on that cache, it hands every
// feature file's open the cache's file of its bytes: the bytes read are
// those the first mount served, the mount answers no READ of them and
// computes nothing. With --passthrough=false the same reads go through
// the mount, as before.
func TestPassthroughServesCachedLayer(t *testing.T) {
	d := genDataset(t, "--classes", "2", "--train", "3", "--val", "0")
	names := featureNames(d.keys(t))
	args := []string{"--prefetch", "off", "--cache-compression", "off"}
	m := testMount(t, mountConfig{Source: d.Dir, Args: args})
	want := readLayer(t, m, names)
	waitCacheWrites(t, m)
	m.Unmount(t)
	for _, pt := range []string{"true", "false"} {
		m2 := testMount(t, mountConfig{Source: d.Dir, CacheDir: m.CacheDir, Args: append(args[:len(args):len(args)], "--passthrough="+pt)})
		got := readLayer(t, m2, names)
		for key, b := range want {
			if !bytes.Equal(got[key], b) {
				t.Errorf("--passthrough=%s: %s differs from what the first mount read", pt, names[key])
			}
		}
		st := mountStats(t, m2)
		reads, opens := statsField(t, st, "fs.reads"), statsField(t, st, "fs.passthrough_opens")
		if n := extractionCount(t, st); n != 0 {
			t.Errorf("--passthrough=%s: %d extractions, want 0", pt, n)
		}
		if pt == "true" && (reads != 0 || opens != int64(len(names))) {
			t.Errorf("--passthrough: %d READs answered by the mount, %d passthrough opens for %d files; want 0 and %d",
				reads, opens, len(names), len(names))
		}
		if pt == "false" && (reads == 0 || opens != 0) {
			t.Errorf("--passthrough=false: %d READs answered by the mount, %d passthrough opens; want some and 0", reads, opens)
		}
		m2.Unmount(t)
	}
}
