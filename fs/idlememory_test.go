package fs

import (
	"os"
	"testing"
	"time"

	"github.com/featurefs/featurefs/extractor/api"
)

// TestIdleReleasesMemoryOnce: a mount that read something and then stays
// idle hands its free memory back once (the stats' memory.idle_releases),
// within idle.Release and a tick; it does not again while it stays idle,
// and again after the next read and idle period. The stats file's memory
// section has the process's figures and every bound.
func TestIdleReleasesMemoryOnce(t *testing.T) {
	m := testModel()
	m.Layers = []api.Layer{{Index: 0, Name: "big", Tensor: "big", Shape: []int64{3, 256, 1024}, Bytes: 3 << 20}}
	b := newFakeBucket(1000)
	b.put("x/1.jpg", []byte("one"))
	b.put("x/2.jpg", []byte("two"))
	e := testMountWith(t, b, newFakeExtractor(m))
	releases := func() int64 { return e.fs.Stats().Memory.IdleReleases }
	if _, err := os.ReadFile(e.path("features", "tiny", "big", "x", "1.npy")); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	waitFor(t, 10*time.Second, "an idle release", func() bool { return releases() == 1 })
	if d := time.Since(t0); d > idle.Release+2*time.Second {
		t.Errorf("the release came %v after the read, want within %v", d, idle.Release+2*time.Second)
	}
	time.Sleep(2 * idle.Release)
	if n := releases(); n != 1 {
		t.Fatalf("%d releases while idle after one busy period, want 1", n)
	}
	if _, err := os.ReadFile(e.path("features", "tiny", "big", "x", "2.npy")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a second idle release", func() bool { return releases() == 2 })

	mem := e.fs.Stats().Memory
	if mem.RSSBytes <= 0 || mem.AnonBytes <= 0 || mem.GoHeapObjectsBytes <= 0 || mem.GoStacksBytes <= 0 {
		t.Errorf("process figures missing: %+v", mem)
	}
	names := map[string]bool{}
	var total int64
	for _, bd := range mem.Bounds {
		names[bd.Name] = true
		total += bd.MaxBytes
	}
	for _, want := range []string{"metadata", "prefetch", "handoff", "cache_write_queue", "recent_reads"} {
		if !names[want] {
			t.Errorf("bounds lack %q: %+v", want, mem.Bounds)
		}
	}
	if total != mem.BoundsTotalBytes || total <= 0 {
		t.Errorf("bounds_total_bytes %d, the bounds sum to %d", mem.BoundsTotalBytes, total)
	}
}

// TestIdleReleasesAgainWhenTheHeapRegrows: a mount that stays idle after
// its first release releases again once Go's heap has grown by
// idle.Regrowth (as the cache's background work makes it grow), at most
// once per idle.Every, and not while it does not grow.
func TestIdleReleasesAgainWhenTheHeapRegrows(t *testing.T) {
	every := idle.Every
	idle.Every = time.Second
	t.Cleanup(func() { idle.Every = every })
	b := newFakeBucket(1000)
	b.put("x/1.jpg", []byte("one"))
	e := testMount(t, b)
	releases := func() int64 { return e.fs.Stats().Memory.IdleReleases }
	if _, err := os.ReadFile(e.path("features", "tiny", "layer0", "x", "1.npy")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the first idle release", func() bool { return releases() == 1 })
	time.Sleep(3 * idle.Every)
	if n := releases(); n != 1 {
		t.Fatalf("%d releases while idle with no growth, want 1", n)
	}
	hold := make([]byte, 4*idle.Regrowth) // the heap grows while idle
	for i := range hold {
		hold[i] = byte(i)
	}
	waitFor(t, 10*time.Second, "a release after the heap grew", func() bool { return releases() == 2 })
	_ = hold[len(hold)-1]
}
