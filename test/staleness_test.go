package test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestOverwriteAfterMetadataTTL overwrites an object in MinIO with another
// image: within the metadata TTL the mount may serve the old features, after
// it the same path serves the new image's features (equal to featurefs
// extract on the new bytes), and untouched files keep theirs.
func TestOverwriteAfterMetadataTTL(t *testing.T) {
	d := genDataset(t, "--classes", "2", "--train", "2", "--val", "1")
	srv, env := minioBucket(t, "live", "", d.Dir)
	const ttl = 2 * time.Second
	m := testMount(t, mountConfig{Source: "s3://live", Env: env,
		Args: []string{"--endpoint-url", srv.Endpoint, "--metadata-ttl", ttl.String()}})
	names := featureNames(d.keys(t))

	target := d.images("train/")[0]
	other := d.images("val/")[0]
	keep := d.images("train/")[1]
	p := filepath.Join(m.Layer(testLayer), filepath.FromSlash(names[target.Key]))
	keepPath := filepath.Join(m.Layer(testLayer), filepath.FromSlash(names[keep.Key]))
	before, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	keepBefore, err := os.ReadFile(keepPath)
	if err != nil {
		t.Fatal(err)
	}

	newBytes, err := os.ReadFile(filepath.Join(d.Dir, filepath.FromSlash(other.Key)))
	if err != nil {
		t.Fatal(err)
	}
	srv.Put(t, "live", target.Key, newBytes)
	time.Sleep(ttl + ttl/2)

	after, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(before, after) {
		t.Fatalf("%s: same features %s after the object was overwritten and the %v TTL passed", names[target.Key], mib(int64(len(after))), ttl)
	}
	// The new features are the new image's: compare with extract on a local
	// copy of the new bytes under the target's name.
	local := filepath.Join(t.TempDir(), filepath.Base(target.Key))
	if err := os.WriteFile(local, newBytes, 0o644); err != nil {
		t.Fatal(err)
	}
	ref := extractRef(t, testLayer, map[string]string{"new": local})["new"]
	got, err := parseNPY(after)
	if err != nil {
		t.Fatal(err)
	}
	if diff, ok := closeEnough(got.Data, ref.Data); !ok {
		t.Errorf("features after overwrite differ from extract on the new object: max |diff| %g", diff)
	}
	if fi, err := os.Stat(p); err != nil || fi.Size() != int64(len(after)) {
		t.Errorf("stat after overwrite: %v, %v; read %d bytes", fi, err, len(after))
	}
	keepAfter, err := os.ReadFile(keepPath)
	if err != nil || !bytes.Equal(keepBefore, keepAfter) {
		t.Errorf("untouched %s changed (err %v)", names[keep.Key], err)
	}

	// A deleted object disappears after the TTL.
	srv.Delete(t, "live", keep.Key)
	time.Sleep(ttl + ttl/2)
	if _, err := os.Stat(keepPath); !os.IsNotExist(err) {
		t.Errorf("stat %s after its object was deleted and the TTL passed: %v, want ENOENT", names[keep.Key], err)
	}
}

// TestRestartServesFromCache reads every file, unmounts, mounts again on the
// same cache directory and reads everything again: the bytes are identical
// and the second mount runs no extraction (its stats count none), only
// cache hits.
func TestRestartServesFromCache(t *testing.T) {
	d := genDataset(t, "--classes", "2", "--train", "2", "--val", "2")
	srv, env := minioBucket(t, "persist", "", d.Dir)
	cacheDir := filepath.Join(t.TempDir(), "cache")
	args := []string{"--endpoint-url", srv.Endpoint}
	names := featureNames(d.keys(t))

	readAll := func(m *mounted) map[string][]byte {
		out := map[string][]byte{}
		for key, rel := range names {
			b, err := os.ReadFile(filepath.Join(m.Layer(testLayer), filepath.FromSlash(rel)))
			if err != nil {
				t.Fatalf("read %s: %v", rel, err)
			}
			out[key] = b
		}
		return out
	}

	m1 := testMount(t, mountConfig{Source: "s3://persist", Env: env, CacheDir: cacheDir, Args: args})
	first := readAll(m1)
	s1 := mountStats(t, m1)
	if n := extractionCount(t, s1); n < int64(len(names)) {
		t.Errorf("first mount: stats count %d extractions for %d files: %v", n, len(names), s1)
	}
	m1.Unmount(t)

	m2 := testMount(t, mountConfig{Source: "s3://persist", Env: env, CacheDir: cacheDir, Args: args})
	second := readAll(m2)
	for key, b := range first {
		if !bytes.Equal(b, second[key]) {
			t.Errorf("%s: features differ after the restart", names[key])
		}
	}
	s2 := mountStats(t, m2)
	if n := extractionCount(t, s2); n != 0 {
		t.Errorf("restarted mount extracted %d times, want 0 (all from the cache): %v", n, s2)
	}
	if h := cacheHitCount(t, s2); h < int64(len(names)) {
		t.Errorf("restarted mount: %d cache hits for %d files: %v", h, len(names), s2)
	}
}

// flatStats flattens the stats JSON into dotted lower-case keys.
func flatStats(prefix string, v any, out map[string]float64) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			flatStats(prefix+strings.ToLower(k)+".", e, out)
		}
	case float64:
		out[strings.TrimSuffix(prefix, ".")] = x
	}
}

// extractionCount is the number of extractions the stats report.
func extractionCount(t *testing.T, stats map[string]any) int64 {
	t.Helper()
	return statsField(t, stats, "fs.extractions")
}

// cacheHitCount is the number of cache hits the stats report.
func cacheHitCount(t *testing.T, stats map[string]any) int64 {
	t.Helper()
	return statsField(t, stats, "fs.cache_hits")
}

// statsField returns one numeric field of the stats JSON by its dotted path.
func statsField(t *testing.T, stats map[string]any, name string) int64 {
	t.Helper()
	flat := map[string]float64{}
	flatStats("", stats, flat)
	v, ok := flat[name]
	if !ok {
		t.Fatalf("stats has no %s: %v", name, flat)
	}
	return int64(v)
}
