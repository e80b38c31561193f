package test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPrefetchThroughSymlinkLoopComputesEachImageOnce: a local source with
// symbolic links back up the tree (links/up -> .., train/self -> .) and
// aliases (train/kitten -> cat, train/dog/z.jpg -> a.jpg) is mounted with
// prefetch on: the walk ends, each image is extracted once however many
// keys reach it (the stats' extraction count equals the number of images;
// it used to be 719 for about 30 images, one per key through the loop),
// the loops' directories are not in the tree, and an alias reads the
// feature of the image it links to.
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
	// Aliases that are no loop: a second name of a class directory and of
	// one image. They stay in the tree but compute nothing more.
	if err := os.Symlink("cat", filepath.Join(src, "train", "kitten")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a.jpg", filepath.Join(src, "train", "dog", "z.jpg")); err != nil {
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
		t.Errorf("prefetch of a tree with links/up -> .., train/self -> ., train/kitten -> cat and train/dog/z.jpg -> a.jpg: %d extractions, want %d (each image once)", n, images)
	}
	for alias, real := range map[string]string{"kitten/b.npy": "cat/b.npy", "dog/z.npy": "dog/a.npy"} {
		a := mustRead(t, filepath.Join(m.Layer("layer0"), "train", alias))
		if !bytes.Equal(a, mustRead(t, filepath.Join(m.Layer("layer0"), "train", real))) {
			t.Errorf("train/%s differs from train/%s, the image it links to", alias, real)
		}
	}
	if n := statsField(t, mountStats(t, m), "extraction.completed"); n != int64(images) {
		t.Errorf("after reading the aliases: %d extractions, want %d", n, images)
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
