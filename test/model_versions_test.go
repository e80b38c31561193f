package test

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/featurefs/featurefs/extractor"
	"github.com/featurefs/featurefs/test/testenv"
)

// versionLayers are the layers TestModelVersionsShareLayers reads: the last
// layer before torchvision's layer2 (layer4), the first of layer2 (layer5),
// the last of layer3 (layer14), the first of layer4 (layer15) and fc
// (layer19) (numbering: docs/LAYERS.md).
var versionLayers = []string{"layer4", "layer5", "layer14", "layer15", "layer19"}

// layersFileDigests returns the digest column of a mount's layers file,
// by layer name.
func layersFileDigests(t *testing.T, m *mounted) map[string]string {
	t.Helper()
	b, err := os.ReadFile(m.Path("features", modelName, "layers"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, row := range lines(string(b))[2:] {
		// index name tensor shape bytes/sample GFLOPs digest [aliases]
		f := strings.Fields(row)
		if len(f) < 7 {
			t.Fatalf("layers file row %q", row)
		}
		out[f[1]] = f[6]
	}
	return out
}

// readLayers reads every feature file of names under each of versionLayers.
func readLayers(t *testing.T, m *mounted, names map[string]string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, l := range versionLayers {
		for key, b := range readLayerFiles(t, m, l, names) {
			out[l+"/"+key] = b
		}
	}
	return out
}

// TestModelVersionsShareLayers: features are keyed by what computes each
// layer. Versions of one ResNet-50 (scripts/export_versions.py) mounted in
// turn over one bucket, cache and MinIO feature store: a version with other
// weights in layer4 and fc only computes layer15 and layer19 and reads
// layer0-layer14's features from the feature store (a cold cache); one with
// other BatchNorm statistics in layer2 only reads layer4 from the local
// cache (a warm one) and computes from layer5 on; a re-export of the same
// weights under other names computes nothing. The layers file shows each
// layer's digest, equal exactly where the computation is.
func TestModelVersionsShareLayers(t *testing.T) {
	versions := testenv.ModelVersions(t)
	model := func(v string) string { return filepath.Join(versions, v+".onnx") }
	d := genDataset(t, "--classes", "1", "--train", "2", "--val", "0")
	srv, env := minioBucket(t, "data", "", d.Dir)
	srv.CreateBucket(t, "features")
	names := featureNames(d.keys(t))
	n := int64(len(names))
	args := []string{"--endpoint-url", srv.Endpoint, "--feature-store", "s3://features/v", "--prefetch", "off"}
	warmCache := t.TempDir()

	// The digests the mount shows are those extractor.LayerDigests gives.
	want := map[string][]string{}
	for _, v := range []string{"base", "renamed", "layer4fc", "bn-layer2"} {
		ds, err := extractor.LayerDigests(model(v), extractor.DefaultPreprocess())
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) != 20 {
			t.Fatalf("%s: %d layers, want 20", v, len(ds))
		}
		want[v] = ds
	}
	for i := range 20 {
		if want["renamed"][i] != want["base"][i] {
			t.Errorf("renamed: layer%d's digest differs from base's", i)
		}
		if (i < 15) != (want["layer4fc"][i] == want["base"][i]) {
			t.Errorf("layer4fc: layer%d's digest equal to base's: %v, want %v", i, want["layer4fc"][i] == want["base"][i], i < 15)
		}
		if (i < 5) != (want["bn-layer2"][i] == want["base"][i]) {
			t.Errorf("bn-layer2: layer%d's digest equal to base's: %v, want %v", i, want["bn-layer2"][i] == want["base"][i], i < 5)
		}
	}

	mount := func(v, cacheDir string) *mounted {
		m := testMount(t, mountConfig{Source: "s3://data", Env: env, Model: model(v), CacheDir: cacheDir, Args: args})
		got := layersFileDigests(t, m)
		for i, d := range want[v] {
			if l := "layer" + strconv.Itoa(i); got[l] != d[:12] {
				t.Errorf("%s: the layers file gives %s digest %q, want %q", v, l, got[l], d[:12])
			}
		}
		return m
	}
	check := func(what string, m *mounted, extractions int64) map[string][]byte {
		t.Helper()
		files := readLayers(t, m, names)
		if got := extractionCount(t, mountStats(t, m)); got != extractions {
			t.Errorf("%s: %d extractions, want %d", what, got, extractions)
		}
		return files
	}

	// base computes all five layers and fills the cache and the store.
	a := mount("base", warmCache)
	base := check("base", a, 5*n)
	waitStoreField(t, a, "puts", 5*n)
	a.Unmount(t)

	// layer4fc, cold cache: layer4, layer5 and layer14 from the store.
	b := mount("layer4fc", "")
	l4fc := check("layer4fc with a cold cache and the feature store", b, 2*n)
	if hits := statsField(t, mountStats(t, b), "feature_store.hits"); hits != 3*n {
		t.Errorf("layer4fc: %d feature store hits, want %d", hits, 3*n)
	}
	b.Unmount(t)

	// bn-layer2, warm cache: layer4 from the cache.
	c := mount("bn-layer2", warmCache)
	bn := check("bn-layer2 with base's warm cache", c, 4*n)
	c.Unmount(t)

	// The same weights under other names: everything from the cache.
	r := mount("renamed", warmCache)
	renamed := check("renamed with base's warm cache", r, 0)

	for k, v := range base {
		layer := k[:strings.IndexByte(k, '/')]
		if !bytes.Equal(renamed[k], v) {
			t.Errorf("renamed: %s differs from base's", k)
		}
		shared4fc := layer != "layer15" && layer != "layer19"
		if bytes.Equal(l4fc[k], v) != shared4fc {
			t.Errorf("layer4fc: %s equal to base's: %v, want %v", k, !shared4fc, shared4fc)
		}
		if bytes.Equal(bn[k], v) != (layer == "layer4") {
			t.Errorf("bn-layer2: %s equal to base's: %v, want %v", k, layer != "layer4", layer == "layer4")
		}
	}
}

// layerDigest12 is the first 12 hex digits of the digest of a layer
// ("layer12") of the ONNX file at path under the default preprocessing:
// the feature store keeps its features under PREFIX/<model>-<these>/.
func layerDigest12(t testing.TB, path, layer string) string {
	t.Helper()
	i, err := strconv.Atoi(strings.TrimPrefix(layer, "layer"))
	if err != nil {
		t.Fatalf("layer %q", layer)
	}
	ds, err := extractor.LayerDigests(path, extractor.DefaultPreprocess())
	if err != nil || i >= len(ds) {
		t.Fatalf("layer digests of %s: %v (%d layers)", path, err, len(ds))
	}
	return ds[i][:12]
}
