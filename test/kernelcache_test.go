package test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestKernelKeepsFileEntriesUntilRelisted runs against MinIO through the
// kernel with a 1s metadata TTL:
//   - a second pass over every feature file, after the TTL, costs no
//     lookup per file (the kernel keeps feature files' entries; it looks up
//     only the directories again), and reads the same bytes;
//   - an object overwritten in the bucket, whose file was stat'ed in two
//     layers, stands for its new version in the other layer too once a
//     listing of its directory in one layer is read again (featurefs tells
//     the kernel to drop the old entry in every layer), and that layer then
//     reads the new image's features.
func TestKernelKeepsFileEntriesUntilRelisted(t *testing.T) {
	d := genDataset(t, "--classes", "1", "--train", "6", "--val", "0")
	srv, env := minioBucket(t, "kcache", "", d.Dir)
	const ttl = time.Second
	m := testMount(t, mountConfig{Source: "s3://kcache", Env: env,
		Args: []string{"--endpoint-url", srv.Endpoint, "--metadata-ttl", ttl.String(), "--prefetch", "off"}})
	names := featureNames(d.keys(t))
	images := d.images("")
	path := func(layer, key string) string { return filepath.Join(m.Layer(layer), filepath.FromSlash(names[key])) }

	first := map[string][]byte{}
	for _, img := range images {
		b, err := os.ReadFile(path(testLayer, img.Key))
		if err != nil {
			t.Fatal(err)
		}
		first[img.Key] = b
	}
	time.Sleep(ttl + ttl/2)
	before := statsField(t, mountStats(t, m), "fs.lookups")
	for _, img := range images {
		b, err := os.ReadFile(path(testLayer, img.Key))
		if err != nil || string(b) != string(first[img.Key]) {
			t.Fatalf("second pass: %s: %d bytes, %v; not the first pass's bytes", names[img.Key], len(b), err)
		}
	}
	if n := statsField(t, mountStats(t, m), "fs.lookups") - before; n >= int64(len(images)) {
		t.Errorf("second pass over %d files after the TTL: %d lookups, want fewer than one per file", len(images), n)
	}

	target, other := images[0], images[1]
	var st0 syscall.Stat_t
	if err := syscall.Stat(path("layer1", target.Key), &st0); err != nil {
		t.Fatal(err)
	}
	newBytes, err := os.ReadFile(filepath.Join(d.Dir, filepath.FromSlash(other.Key)))
	if err != nil {
		t.Fatal(err)
	}
	srv.Put(t, "kcache", target.Key, newBytes)
	time.Sleep(ttl + ttl/2)
	if _, err := readDirNames(filepath.Dir(path(testLayer, target.Key))); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var st syscall.Stat_t
		if err := syscall.Stat(path("layer1", target.Key), &st); err == nil && st.Ino != st0.Ino {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("layer1/%s still the old version's inode 10s after the listing in %s was read again", names[target.Key], testLayer)
		}
		time.Sleep(50 * time.Millisecond)
	}
	local := filepath.Join(t.TempDir(), filepath.Base(target.Key))
	if err := os.WriteFile(local, newBytes, 0o644); err != nil {
		t.Fatal(err)
	}
	ref := extractRef(t, "layer1", map[string]string{"new": local})["new"]
	got := readNPY(t, path("layer1", target.Key))
	if diff, ok := closeEnough(got.Data, ref.Data); !ok {
		t.Errorf("layer1/%s after the overwrite: features differ from extract on the new object: max |diff| %g", names[target.Key], diff)
	}
	if n := statsField(t, mountStats(t, m), "fs.kernel_invalidations"); n < 2 {
		t.Errorf("fs.kernel_invalidations = %d, want at least 2 (the overwritten file in both layers)", n)
	}
}
