package test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPrefetchThroughSymlinkLoopComputesEachImageOnce: a local source with
// a symbolic link back up the tree (links/up -> ..) is mounted with
// prefetch on: the walk ends, each image is extracted once (the stats'
// extraction count equals the number of images; it used to be 719 for
// about 30 images, one per key through the loop), and the loop's
// directory is not in the tree.
func TestPrefetchThroughSymlinkLoopComputesEachImageOnce(t *testing.T) {
	src := filepath.Join(t.TempDir(), "src")
	images := 0
	for _, class := range []string{"cat", "dog"} {
		for i := range 3 {
			writeJPEG(t, filepath.Join(src, "train", class, string(rune('a'+i))+".jpg"), 64, 48, images)
			images++
		}
	}
	if err := os.MkdirAll(filepath.Join(src, "links"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..", filepath.Join(src, "links", "up")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(".", filepath.Join(src, "train", "self")); err != nil {
		t.Fatal(err)
	}
	m := testMount(t, mountConfig{Source: src, Args: []string{"--prefetch", "tree"}})
	if _, err := os.ReadFile(filepath.Join(m.Layer("layer0"), "train", "cat", "a.npy")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Minute)
	for statsField(t, mountStats(t, m), "prefetch.walks_done") < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("prefetch walk not done after 5m (a loop walked?): %v", mountStats(t, m))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if n := statsField(t, mountStats(t, m), "extraction.completed"); n != int64(images) {
		t.Errorf("prefetch of a tree with links/up -> .. and train/self -> .: %d extractions, want %d (each image once)", n, images)
	}
	for _, p := range []string{filepath.Join("links", "up"), filepath.Join("train", "self")} {
		if _, err := os.Stat(filepath.Join(m.Layer("layer0"), p)); !os.IsNotExist(err) {
			t.Errorf("%s, a link back up the tree, is in the mount: %v", p, err)
		}
	}
	if names := listDir(t, m.Layer("layer0")); strings.Join(names, " ") != "train" {
		t.Errorf("layer0 lists %q, want only train (links holds only a loop)", names)
	}
}
