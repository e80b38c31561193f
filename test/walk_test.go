package test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMetadataWalkComputesNothing walks a fresh mount (prefetch at its
// default, tree) with the shell tools users run on it: find, du, ls -lR and
// stat of every file. They read metadata only, so nothing is fetched or
// extracted. Then one feature file of one layer is read: prefetch starts
// for that layer only and extracts each image once.
func TestMetadataWalkComputesNothing(t *testing.T) {
	d := genDataset(t, "--classes", "2", "--train", "4", "--val", "2")
	srv, env := minioBucket(t, "walk", "", d.Dir)
	m := testMount(t, mountConfig{Source: "s3://walk", Env: env, Args: []string{"--endpoint-url", srv.Endpoint}})
	images := d.images("")

	var files []string
	for _, cmd := range [][]string{
		{"find", m.Dir},
		{"du", "-sh", m.Dir},
		{"ls", "-lR", m.Path("features")},
		{"find", m.Path("features"), "-type", "f", "-name", "*.npy"},
	} {
		out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", cmd, err, out)
		}
		if cmd[0] == "find" && len(cmd) > 2 {
			files = strings.Fields(string(out))
		}
	}
	layers := len(listDir(t, m.Path("features", modelName))) - 1 // less the layers file
	if want := layers * len(images); len(files) != want {
		t.Fatalf("find found %d feature files, want %d (%d layers x %d images)", len(files), want, layers, len(images))
	}
	for _, f := range files {
		if out, err := exec.Command("stat", f).CombinedOutput(); err != nil {
			t.Fatalf("stat %s: %v\n%s", f, err, out)
		}
	}
	time.Sleep(time.Second) // anything scheduled in the background would have begun
	st := mountStats(t, m)
	for _, f := range []string{"fs.extractions", "store.gets", "prefetch.walks", "extraction.completed"} {
		if n := statsField(t, st, f); n != 0 {
			t.Errorf("after find, du, ls -lR and stat of %d files: %s = %d, want 0", len(files), f, n)
		}
	}

	// Reading one file's content starts prefetch of its layer, and only it.
	names := featureNames(d.keys(t))
	if _, err := os.ReadFile(filepath.Join(m.Layer(testLayer), filepath.FromSlash(names[images[0].Key]))); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Minute)
	for statsField(t, mountStats(t, m), "prefetch.walks_done") < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("prefetch walk not done after 5m: %v", mountStats(t, m))
		}
		time.Sleep(200 * time.Millisecond)
	}
	st = mountStats(t, m)
	if n := statsField(t, st, "prefetch.walks"); n != 1 {
		t.Errorf("one read: %d prefetch walks, want 1 (its layer)", n)
	}
	if n := statsField(t, st, "extraction.completed"); n != int64(len(images)) {
		t.Errorf("one read and its layer's prefetch: %d extractions, want %d (each image once, one layer)", n, len(images))
	}
	if n := statsField(t, st, "store.gets"); n != int64(len(images)) {
		t.Errorf("one read and its layer's prefetch: %d GETs, want %d", n, len(images))
	}
}

// listDir returns a directory's entries' names.
func listDir(t *testing.T, dir string) []string {
	t.Helper()
	names, err := readDirNames(dir)
	if err != nil {
		t.Fatal(err)
	}
	return names
}
