package test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/featurefs/featurefs/test/testenv"
)

// waitServeLog waits until the server's log holds n lines containing s.
func waitServeLog(t *testing.T, s *served, what string, n int) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for strings.Count(s.Log(), what) < n {
		if time.Now().After(deadline) {
			t.Fatalf("no %d lines %q in the server's log after 90s:\n%s", n, what, lastBytes(s.Log(), 4000))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestServeModelReloadRemoteMount: `featurefs serve` over MinIO watches its
// model file and a `--remote` mount follows it. While a reader reads
// layer4 and layer15 through the mount over and over, the server's file is
// replaced by a rename with a version that changes torchvision's layer4
// and fc: the server reloads it; the mount learns the new model set from
// the server's next answer; no read fails; every file read is one
// version's whole feature; layer15 then serves the new version's features;
// layer4's files keep their inode on the mount and neither the mount nor
// the server computes them again. The first version written back, with a
// SIGHUP to the server and one to the mount, brings its features back with
// no extraction on the server.
func TestServeModelReloadRemoteMount(t *testing.T) {
	versions := testenv.ModelVersions(t)
	modelPath := filepath.Join(t.TempDir(), "model.onnx")
	replaceFile(t, filepath.Join(versions, "base.onnx"), modelPath, true)
	d := genDataset(t, "--classes", "1", "--train", "3", "--val", "0")
	names := featureNames(d.keys(t))
	n := int64(len(names))
	mio, env := minioBucket(t, "reload-data", "imagenet/", d.Dir)
	s := startServe(t, "s3://reload-data/imagenet", env, "--endpoint-url", mio.Endpoint, "--model", modelName+"="+modelPath)
	m := testMount(t, mountConfig{Args: s.remoteArgs("--prefetch", "off"), NoModel: true})

	read := func(layer string) map[string][]byte { t.Helper(); return readLayerFiles(t, m, layer, names) }
	inos := func(layer string) map[string]uint64 {
		out := map[string]uint64{}
		for key, name := range names {
			fi, err := os.Stat(filepath.Join(m.Layer(layer), filepath.FromSlash(name)))
			if err != nil {
				t.Fatal(err)
			}
			out[key] = fi.Sys().(*syscall.Stat_t).Ino
		}
		return out
	}
	serverExtractions := func() int64 { return statsField(t, serveStats(t, s), "fs.fs.extractions") }
	old4, old15 := read("layer4"), read("layer15")
	ino4 := inos("layer4")
	if got := serverExtractions(); got != 2*n {
		t.Fatalf("server: %d extractions, want %d (layer4 and layer15)", got, 2*n)
	}

	reader := startReloadReader(t, m, names, "layer4", "layer15")
	loader := startLoader(t, filepath.Join(m.Layer("layer15"), "train"))

	replaceFile(t, filepath.Join(versions, "layer4fc.onnx"), modelPath, true)
	waitServeLog(t, s, "model reloaded", 1)
	// The mount's next request to the server tells it of the new version:
	// layer8's features (not read yet, unchanged by the new version).
	read("layer8")
	waitLog(t, m, "models refreshed", 1)
	waitLog(t, m, "model replaced", 1)
	new15 := read("layer15")
	time.Sleep(500 * time.Millisecond) // the reader reads the new version too
	reader.stopAndCheck(t, names, old4, old15, new15)
	checkLoaderVersions(t, loader.finish(t), old15, new15)
	if got := serverExtractions(); got != 4*n {
		t.Errorf("server after the reload: %d extractions, want %d (layer8 and layer15 again, layer4 never)", got, 4*n)
	}
	if got := extractionCount(t, mountStats(t, m)); got != 4*n {
		t.Errorf("mount after the reload: %d features fetched, want %d (layer8 and layer15 again, layer4 never)", got, 4*n)
	}
	for key, ino := range inos("layer4") {
		if ino != ino4[key] {
			t.Errorf("layer4 %s: inode %d, was %d: an unchanged layer lost its kernel entry", key, ino, ino4[key])
		}
	}
	layers := layersFileDigests(t, m)
	if layers["layer15"] == "" || layers["layer4"] == "" {
		t.Fatalf("layers file digests: %v", layers)
	}

	// The first version back in place, a SIGHUP to the server and then to
	// the mount: its features come from the server's cache.
	replaceFile(t, filepath.Join(versions, "base.onnx"), modelPath, false)
	if err := syscall.Kill(s.PID(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitServeLog(t, s, "model reloaded", 2)
	if err := syscall.Kill(m.PID(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog(t, m, "models refreshed", 2)
	waitLog(t, m, "model replaced", 2)
	back := read("layer15")
	for key := range names {
		if !bytes.Equal(back[key], old15[key]) {
			t.Errorf("layer15 %s: not the first version's feature after it came back", key)
		}
	}
	if l := layersFileDigests(t, m); l["layer15"] == layers["layer15"] || l["layer4"] != layers["layer4"] {
		t.Errorf("layers file with the first version back: layer15 %.12s (was %.12s), layer4 %.12s (was %.12s)", l["layer15"], layers["layer15"], l["layer4"], layers["layer4"])
	}
	if got := serverExtractions(); got != 4*n {
		t.Errorf("server with the first version back: %d extractions, want %d (all cached)", got, 4*n)
	}
}
