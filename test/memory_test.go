package test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
// prefetch 64MiB, fetched objects, hand-off and cache write queue 32MiB,
// Go's soft limit 384MiB); the bounds' sum is their total; and a mount idle after its
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
		{nil, map[string]int64{"metadata": 256 * mib, "decode": 1024 * mib, "fetched_objects": 64 * mib, "prefetch": 256 * mib, "handoff": 64 * mib, "cache_write_queue": 64 * mib, "recent_reads": 32 * mib}, 0},
		{[]string{"--memory-limit", "512MiB"}, map[string]int64{"metadata": 128 * mib, "decode": 64 * mib, "fetched_objects": 32 * mib, "prefetch": 64 * mib, "handoff": 32 * mib, "cache_write_queue": 32 * mib, "recent_reads": 32 * mib}, 384 * mib},
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
		if pc, ok := mem["go_gc_percent"].(float64); !ok || pc < 5 || pc > 100 {
			t.Errorf("%v: go_gc_percent %v, want the pacer's 5 to 100 (fs/heappace)", tc.args, mem["go_gc_percent"])
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

// docBounds parses docs/RELIABILITY.md's "Memory bounds" table: each
// bound's default in MiB, and the stated sum.
func docBounds(t *testing.T) (map[string]int64, int64) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "docs", "RELIABILITY.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "### Memory bounds (issue 39)")
	if !ok {
		t.Fatal("docs/RELIABILITY.md has no \"Memory bounds (issue 39)\" section")
	}
	sec, _, _ = strings.Cut(sec, "\n### ")
	rows := map[string]int64{}
	sum := int64(-1)
	for _, line := range strings.Split(sec, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) != 7 {
			continue
		}
		name, def := strings.TrimSpace(cells[1]), strings.Trim(strings.TrimSpace(cells[4]), "*")
		switch {
		case strings.HasPrefix(name, "`"):
			v, err := strconv.ParseInt(def, 10, 64)
			if err != nil {
				t.Fatalf("RELIABILITY.md: bound %s: default %q is not a number of MiB", name, def)
			}
			rows[strings.Trim(name, "`")] = v
		case name == "**sum**":
			n, err := strconv.ParseInt(def, 10, 64)
			if err != nil {
				t.Fatalf("RELIABILITY.md: sum %q", def)
			}
			sum = n
		}
	}
	if len(rows) == 0 || sum < 0 {
		t.Fatalf("RELIABILITY.md's Memory bounds table: %d rows, sum %d", len(rows), sum)
	}
	return rows, sum
}

// TestMemoryBoundsTableIsTheMounts: docs/RELIABILITY.md's table of memory
// bounds is what a real mount with the defaults reports: every bound, with
// its default, no bound missing from the table, their sum the stats'
// bounds_total_bytes; and the table's sum row is its rows' sum.
func TestMemoryBoundsTableIsTheMounts(t *testing.T) {
	const mib = 1 << 20
	rows, sum := docBounds(t)
	var s int64
	for _, v := range rows {
		s += v
	}
	if s != sum {
		t.Errorf("RELIABILITY.md's rows sum to %d MiB, its sum row says %d", s, sum)
	}
	d := genDataset(t, "--classes", "1", "--train", "1", "--val", "0")
	m := testMount(t, mountConfig{Source: d.Dir})
	bounds, mem := memoryBounds(t, mountStats(t, m))
	var total int64
	for name, got := range bounds {
		want, ok := rows[name]
		if !ok {
			t.Errorf("the mount reports bound %q, which RELIABILITY.md's table lacks", name)
			continue
		}
		if got != want*mib {
			t.Errorf("bound %s: the mount's %d bytes, the table's %d MiB", name, got, want)
		}
		total += got
	}
	for name := range rows {
		if _, ok := bounds[name]; !ok {
			t.Errorf("RELIABILITY.md lists bound %q, which the mount does not report", name)
		}
	}
	if got := int64(mem["bounds_total_bytes"].(float64)); got != total {
		t.Errorf("bounds_total_bytes %d, the bounds sum to %d", got, total)
	}
}
