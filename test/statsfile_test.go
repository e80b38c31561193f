package test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/featurefs/featurefs/test/testenv"
)

// TestStatsFileSizeMatchesContent: through a featurefs mount, the size
// stat reports for .featurefs/stats is what a read then returns while the
// figures change in between, and cp copies it whole as valid JSON (issue 16,
// item 7). Before, stat kept the size of the first lookup for the metadata
// TTL (2,980 bytes while a read gave 3,054).
func TestStatsFileSizeMatchesContent(t *testing.T) {
	src := t.TempDir()
	writeJPEGs(t, src, 6)
	m := testMount(t, mountConfig{Source: src, Args: []string{"--prefetch", "off", "--model", "tiny=" + testenv.OddModel(t, "tiny")}})
	stats := m.Path(".featurefs", "stats")
	for i := range 24 {
		fi, err := os.Stat(stats)
		if err != nil {
			t.Fatal(err)
		}
		// Extract a feature between the stat and the read: the figures change.
		if _, err := os.ReadFile(m.Path("features", "tiny", fmt.Sprintf("layer%d", i/6), "d", fmt.Sprintf("img%d.npy", i%6))); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(stats)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() != int64(len(data)) {
			t.Fatalf("round %d: stat says %d bytes, a read returned %d", i, fi.Size(), len(data))
		}
		var v map[string]any
		if err := json.Unmarshal(data, &v); err != nil {
			t.Fatalf("round %d: not JSON: %v", i, err)
		}
	}
	// A read right after the last extraction once showed 23 of 24 in CI
	// (1 run in 4; 25 of 25 local runs did not): most likely the kernel's
	// pages of an earlier read, dropped by an asynchronous notify. Read
	// until the figures show the 24th extraction (a count lost would never
	// show it), so that the copy below is of the current figures.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		data, err := os.ReadFile(stats)
		var v map[string]any
		if err == nil && json.Unmarshal(data, &v) == nil && statsField(t, v, "fs.extractions") == 24 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stats file never counted 24 extractions: %v %.200s", err, data)
		}
	}
	fi, err := os.Stat(stats)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "stats.json")
	if out, err := exec.Command("cp", stats, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
	copied, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(copied, &v); err != nil || int64(len(copied)) != fi.Size() {
		t.Fatalf("cp copied %d bytes (stat said %d), JSON: %v", len(copied), fi.Size(), err)
	}
	if n := statsField(t, v, "fs.extractions"); n != 24 {
		t.Errorf("the copy counts %d extractions, want 24", n)
	}
}
