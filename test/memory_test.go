package test

import (
	"testing"
	"time"
)

// memoryBounds returns the stats file's memory.bounds as name -> max
// bytes, and memory's other figures.
func memoryBounds(t *testing.T, st map[string]any) (map[string]int64, map[string]any) {
	t.Helper()
	mem, ok := st["memory"].(map[string]any)
	if !ok {
		t.Fatalf("stats have no memory section: %v", st)
	}
	out := map[string]int64{}
	list, _ := mem["bounds"].([]any)
	for _, b := range list {
		bm := b.(map[string]any)
		out[bm["name"].(string)] = int64(bm["max_bytes"].(float64))
	}
	return out, mem
}

// TestMemoryLimitSizesMountBounds: a real mount's stats file shows every
// memory bound with its size: the defaults without --memory-limit, the
// shares of it with --memory-limit 512MiB (metadata 128MiB, decode and
// prefetch 64MiB, hand-off and cache write queue 32MiB, Go's soft limit
// 384MiB); the bounds' sum is their total; and a mount idle after its
// reads hands its free memory back (idle_releases) within seconds.
func TestMemoryLimitSizesMountBounds(t *testing.T) {
	d := genDataset(t, "--classes", "2", "--train", "3", "--val", "0")
	names := featureNames(d.keys(t))
	const mib = 1 << 20
	for _, tc := range []struct {
		args    []string
		want    map[string]int64
		goLimit int64
	}{
		{nil, map[string]int64{"metadata": 256 * mib, "decode": 1024 * mib, "prefetch": 256 * mib, "handoff": 64 * mib, "cache_write_queue": 64 * mib, "recent_reads": 32 * mib}, 0},
		{[]string{"--memory-limit", "512MiB"}, map[string]int64{"metadata": 128 * mib, "decode": 64 * mib, "prefetch": 64 * mib, "handoff": 32 * mib, "cache_write_queue": 32 * mib, "recent_reads": 32 * mib}, 384 * mib},
	} {
		m := testMount(t, mountConfig{Source: d.Dir, Args: tc.args})
		readLayer(t, m, names)
		bounds, mem := memoryBounds(t, mountStats(t, m))
		var sum int64
		for _, v := range bounds {
			sum += v
		}
		for name, want := range tc.want {
			if bounds[name] != want {
				t.Errorf("%v: bound %s = %d, want %d", tc.args, name, bounds[name], want)
			}
		}
		if got := int64(mem["bounds_total_bytes"].(float64)); got != sum {
			t.Errorf("%v: bounds_total_bytes %d, the bounds sum to %d", tc.args, got, sum)
		}
		if got := int64(mem["go_memory_limit_bytes"].(float64)); got != tc.goLimit {
			t.Errorf("%v: go_memory_limit_bytes %d, want %d", tc.args, got, tc.goLimit)
		}
		if rss := mem["rss_bytes"].(float64); rss <= 0 {
			t.Errorf("%v: rss_bytes %v", tc.args, rss)
		}
		deadline := time.Now().Add(15 * time.Second)
		for {
			_, mem = memoryBounds(t, mountStats(t, m))
			if mem["idle_releases"].(float64) >= 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%v: no idle release 15 s after the reads", tc.args)
			}
			time.Sleep(500 * time.Millisecond)
		}
		m.Unmount(t)
	}
}
