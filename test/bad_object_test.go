package test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/featurefs/featurefs/extractor"
	"github.com/featurefs/featurefs/extractor/api"
)

// readErr opens and reads a whole file, returning the bytes and the first
// error from open or read.
func readErr(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// TestBadObjectGivesEIO mounts a bucket holding a truncated JPEG, an empty
// .jpg, random bytes named .png and a PNG named .jpg next to good images:
// each bad one gives EIO to its reader (twice: the failure is remembered,
// not turned into success), while every good file, read concurrently,
// returns a valid .npy.
func TestBadObjectGivesEIO(t *testing.T) {
	d := genDataset(t, "--bad", "--classes", "2", "--train", "2", "--val", "1")
	srv, env := minioBucket(t, "mixed", "", d.Dir)
	m := testMount(t, mountConfig{Source: "s3://mixed", Env: env, Args: []string{"--endpoint-url", srv.Endpoint}})
	layerDir := m.Layer(testLayer)
	names := featureNames(d.keys(t))
	if len(d.bad()) < 4 {
		t.Fatalf("gen_dataset.py made %d bad objects, want 4", len(d.bad()))
	}

	var wg sync.WaitGroup
	var mu sync.Mutex
	errs := map[string]error{}
	results := map[string][]byte{}
	read := func(rel string) {
		defer wg.Done()
		b, err := readErr(filepath.Join(layerDir, filepath.FromSlash(rel)))
		mu.Lock()
		defer mu.Unlock()
		errs[rel], results[rel] = err, b
	}
	for round := 0; round < 2; round++ {
		for _, o := range d.bad() {
			wg.Add(1)
			go read(names[o.Key])
		}
		for _, o := range d.images("") {
			wg.Add(1)
			go read(names[o.Key])
		}
		wg.Wait()
		for _, o := range d.bad() {
			rel := names[o.Key]
			if !errors.Is(errs[rel], syscall.EIO) {
				t.Errorf("round %d: reading %s (object %s, %d bytes) = %v, want EIO", round, rel, o.Key, o.Bytes, errs[rel])
			}
		}
		wantSize := api.NPYSize(testLayerShape, extractor.Float32)
		for _, o := range d.images("") {
			rel := names[o.Key]
			if errs[rel] != nil {
				t.Errorf("round %d: reading good %s next to bad objects: %v", round, rel, errs[rel])
				continue
			}
			if int64(len(results[rel])) != wantSize {
				t.Errorf("round %d: %s: %d bytes, want %d", round, rel, len(results[rel]), wantSize)
			}
			if _, err := parseNPY(results[rel]); err != nil {
				t.Errorf("round %d: %s: %v", round, rel, err)
			}
		}
	}
	// A bad object's name still lists and stats (stat never computes).
	for _, o := range d.bad() {
		if _, err := os.Stat(filepath.Join(layerDir, filepath.FromSlash(names[o.Key]))); err != nil {
			t.Errorf("stat %s: %v", names[o.Key], err)
		}
	}
	// The mount is still healthy afterwards.
	if _, err := os.ReadDir(layerDir); err != nil {
		t.Errorf("ls after bad reads: %v", err)
	}
}
