package test

import (
	"bytes"
	"fmt"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/featurefs/featurefs/extractor"
	"github.com/featurefs/featurefs/extractor/api"
)

// TestMetadataBudgetHoldsThroughTheKernel mounts a local directory of
// 6,000 images in 6 class directories with --metadata-cache-size 1MiB
// (room for about 1,000 of the kernel's entries and a quarter of it for
// listings), lists and stats everything twice and reads some: the mount
// drops its coldest listings and tells the kernel to forget cold entries,
// its metadata figure comes back under the budget after each scan, and
// every entry still lists, stats and reads right.
func TestMetadataBudgetHoldsThroughTheKernel(t *testing.T) {
	const classes, perClass = 6, 1000
	src := t.TempDir()
	var buf bytes.Buffer
	if err := png.Encode(&buf, image.NewGray(image.Rect(0, 0, 8, 8))); err != nil {
		t.Fatal(err)
	}
	for c := range classes {
		dir := filepath.Join(src, "train", fmt.Sprintf("class%d", c))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i := range perClass {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("img%04d.png", i)), buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	const budget = 1 << 20
	m := testMount(t, mountConfig{Source: src, Args: []string{"--prefetch", "off", "--metadata-cache-size", "1MiB"}})
	root := filepath.Join(m.Layer(testLayer), "train")
	wantSize := api.NPYSize(testLayerShape, extractor.Float32)

	var first []byte
	scan := func(round int) {
		t.Helper()
		for c := range classes {
			dir := filepath.Join(root, fmt.Sprintf("class%d", c))
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			if len(entries) != perClass {
				t.Fatalf("round %d: %s lists %d entries, want %d", round, dir, len(entries), perClass)
			}
			for i, e := range entries {
				if want := fmt.Sprintf("img%04d.npy", i); e.Name() != want {
					t.Fatalf("round %d: entry %d of %s is %q, want %q", round, i, dir, e.Name(), want)
				}
				fi, err := e.Info()
				if err != nil || fi.Size() != wantSize {
					t.Fatalf("round %d: stat %s: %v, size want %d", round, e.Name(), err, wantSize)
				}
			}
			b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("img%04d.npy", (round*377+c*101)%perClass)))
			if err != nil || int64(len(b)) != wantSize {
				t.Fatalf("round %d: read: %d bytes, %v", round, len(b), err)
			}
			if first == nil {
				first = b
			} else if !bytes.Equal(b, first) { // the same image under every name
				t.Fatalf("round %d: a feature of the same image differs", round)
			}
		}
	}
	underBudget := func(round int) map[string]any {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			st := mountStats(t, m)
			used, limit := statsField(t, st, "fs.metadata_bytes"), statsField(t, st, "fs.metadata_max_bytes")
			if limit != budget {
				t.Fatalf("fs.metadata_max_bytes = %d, want %d", limit, budget)
			}
			if used <= limit {
				t.Logf("round %d: metadata %d of %d bytes (listings %d, %d nodes), %d listings dropped, %d kernel entries forgotten; VmRSS %s",
					round, used, limit, statsField(t, st, "fs.listing_bytes"), statsField(t, st, "fs.kernel_nodes"),
					statsField(t, st, "fs.listings_dropped"), statsField(t, st, "fs.kernel_entries_forgotten"), mib(rssBytes(t, m.PID(), "VmRSS")))
				return st
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: fs.metadata_bytes %d still over the budget %d after 30s", round, used, limit)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	scan(1)
	st := underBudget(1)
	if statsField(t, st, "fs.listings_dropped") == 0 || statsField(t, st, "fs.kernel_entries_forgotten") == 0 {
		t.Errorf("%d entries listed with room for about 1,000: no listing dropped or no kernel entry forgotten", classes*perClass)
	}
	scan(2)
	underBudget(2)
}
