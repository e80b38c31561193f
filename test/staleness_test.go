package test

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
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
	overwritten := time.Now()
	time.Sleep(ttl + ttl/2)

	// Past the TTL, the first lookup reads the listing again and waits up
	// to StaleGrace (250ms) for it before answering from the stale one; on
	// a loaded machine the new listing can take longer, so the new version
	// shows at the latest a few seconds later, never later.
	var after []byte
	for {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		after = b
		if !bytes.Equal(before, after) || time.Since(overwritten) > 4*ttl {
			break
		}
		time.Sleep(ttl / 4)
	}
	if bytes.Equal(before, after) {
		t.Fatalf("%s: same features %s %v after the object was overwritten (TTL %v)", names[target.Key], mib(int64(len(after))), time.Since(overwritten).Round(time.Millisecond), ttl)
	}
	t.Logf("the new version showed %v after the overwrite (TTL %v)", time.Since(overwritten).Round(time.Millisecond), ttl)
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
	deleted := time.Now()
	time.Sleep(ttl + ttl/2)
	_, err = os.Stat(keepPath)
	for !os.IsNotExist(err) && time.Since(deleted) < 4*ttl { // as above: a relist may be slow under load
		time.Sleep(ttl / 4)
		_, err = os.Stat(keepPath)
	}
	if !os.IsNotExist(err) {
		t.Errorf("stat %s %v after its object was deleted (TTL %v): %v, want ENOENT", names[keep.Key], time.Since(deleted).Round(time.Millisecond), ttl, err)
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

// TestDeletedObjectUnreadableOnceRelisted deletes an object whose feature
// was read, and cached, in two layers at different times, so that the
// kernel still holds the name in the second layer when the listing of the
// directory (shared by all layers) has been read again without it: opening
// the name then fails with ENOENT instead of serving the cached feature.
func TestDeletedObjectUnreadableOnceRelisted(t *testing.T) {
	d := genDataset(t, "--classes", "1", "--train", "3", "--val", "0")
	srv, env := minioBucket(t, "deleted", "", d.Dir)
	const ttl = 8 * time.Second
	m := testMount(t, mountConfig{Source: "s3://deleted", Env: env,
		Args: []string{"--endpoint-url", srv.Endpoint, "--metadata-ttl", ttl.String(), "--prefetch", "off"}})
	names := featureNames(d.keys(t))
	images := d.images("")
	gone, warm := images[0], images[1]
	path := func(layer, key string) string { return filepath.Join(m.Layer(layer), filepath.FromSlash(names[key])) }
	dir := filepath.Dir(path(testLayer, gone.Key))
	// Load both layers' models, so that the reads below are quick.
	for _, layer := range []string{testLayer, "layer1"} {
		if _, err := readUncached(path(layer, warm.Key)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(ttl + time.Second)
	listedAt := time.Now() // the directory's listing is read again now
	if _, err := readDirNames(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := readUncached(path(testLayer, gone.Key)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(listedAt.Add(ttl / 2)))
	// Looked up now, from the listing, the name stays in the kernel's cache
	// until half a TTL after the listing expires.
	if _, err := readUncached(path("layer1", gone.Key)); err != nil {
		t.Fatal(err)
	}
	srv.Delete(t, "deleted", gone.Key)
	for {
		listed, err := readDirNames(dir)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(listed, filepath.Base(path(testLayer, gone.Key))) {
			break
		}
		if time.Since(listedAt) > ttl+30*time.Second {
			t.Fatalf("ls still shows %s %v after its object was deleted", names[gone.Key], time.Since(listedAt))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if time.Since(listedAt) > ttl*3/2 {
		t.Fatalf("the listing took until %v after it was read to show the deletion: the test needs it before %v", time.Since(listedAt), ttl*3/2)
	}
	b, err := readUncached(path("layer1", gone.Key))
	t.Logf("read layer1/%s %v after the listing, once ls stopped showing it: %d bytes, %v", names[gone.Key], time.Since(listedAt).Round(time.Millisecond), len(b), err)
	if !os.IsNotExist(err) {
		t.Errorf("read layer1/%s after ls stopped showing it: %d bytes, %v; want ENOENT", names[gone.Key], len(b), err)
	}
}

// TestOverwriteWithinTTLServesNewVersion lists a directory, overwrites one
// of its images with another and reads its feature before the metadata TTL
// has passed: the read succeeds with the new image's feature (the shape,
// and so the size, are the same), as do later reads, and no error is
// logged.
func TestOverwriteWithinTTLServesNewVersion(t *testing.T) {
	d := genDataset(t, "--classes", "1", "--train", "3", "--val", "0")
	srv, env := minioBucket(t, "rewritten", "", d.Dir)
	m := testMount(t, mountConfig{Source: "s3://rewritten", Env: env,
		Args: []string{"--endpoint-url", srv.Endpoint, "--metadata-ttl", "10m", "--prefetch", "off"}})
	names := featureNames(d.keys(t))
	images := d.images("")
	target, other := images[0], images[1]
	p := filepath.Join(m.Layer(testLayer), filepath.FromSlash(names[target.Key]))
	if _, err := readDirNames(filepath.Dir(p)); err != nil {
		t.Fatal(err)
	}
	newBytes, err := os.ReadFile(filepath.Join(d.Dir, filepath.FromSlash(other.Key)))
	if err != nil {
		t.Fatal(err)
	}
	srv.Put(t, "rewritten", target.Key, newBytes)

	local := filepath.Join(t.TempDir(), filepath.Base(target.Key))
	if err := os.WriteFile(local, newBytes, 0o644); err != nil {
		t.Fatal(err)
	}
	ref := extractRef(t, testLayer, map[string]string{"new": local})["new"]
	for i := range 2 {
		b, err := readUncached(p)
		if err != nil {
			t.Fatalf("read %d of %s after the overwrite: %v", i+1, names[target.Key], err)
		}
		got, err := parseNPY(b)
		if err != nil {
			t.Fatal(err)
		}
		if diff, ok := closeEnough(got.Data, ref.Data); !ok {
			t.Errorf("read %d: features differ from extract on the new object: max |diff| %g", i+1, diff)
		}
		if fi, err := os.Stat(p); err != nil || fi.Size() != int64(len(b)) {
			t.Errorf("read %d: stat %v, %v; read %d bytes", i+1, fi, err, len(b))
		}
	}
	if lines := logLines(t, m.Log, "level=ERROR"); len(lines) > 0 {
		t.Errorf("errors logged for an overwritten object:\n%s", strings.Join(lines, "\n"))
	}
}
