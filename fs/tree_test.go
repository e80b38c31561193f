package fs

import (
	"encoding/json"
	"github.com/featurefs/featurefs/fs/figures"
	"os"
	"testing"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/fs/views"
)

func TestTreeShape(t *testing.T) {
	b := newFakeBucket(1000)
	b.put("train/cat/1.jpg", []byte("cat1"))
	b.put("train/dog/1.png", []byte("dog1"))
	b.put("README.txt", []byte("hello"))
	b.put("top.jpeg", []byte("top"))
	e := testMount(t, b)

	if got := names(t, e.mnt); !same(got, []string{"features/", "arrays/", "predictions/", ".featurefs/"}) {
		t.Errorf("root = %q", got)
	}
	if got := names(t, e.path("features")); !same(got, []string{"tiny/"}) {
		t.Errorf("features = %q", got)
	}
	if got := names(t, e.path("features", "tiny")); !same(got, []string{"layer0/", "layer1/", "layer2/", "pool/", "layers"}) {
		t.Errorf("model dir = %q", got)
	}
	if got := names(t, e.path("features", "tiny", "layer1")); !same(got, []string{"train/", "top.npy"}) {
		t.Errorf("layer dir = %q (README.txt must not show)", got)
	}
	if got := names(t, e.path("arrays", "tiny")); !same(got, []string{"layer0/", "layer0.npy", "layer0.labels.npy", "layer0.rows.jsonl",
		"layer1/", "layer1.npy", "layer1.labels.npy", "layer1.rows.jsonl", "layer2/", "layer2.npy", "layer2.labels.npy", "layer2.rows.jsonl",
		"pool/", "pool.npy", "pool.labels.npy", "pool.rows.jsonl"}) {
		t.Errorf("arrays/tiny = %q", got)
	}
	if got := names(t, e.path("arrays", "tiny", "layer1")); !same(got, []string{"train/", "train.npy", "train.labels.npy", "train.rows.jsonl"}) {
		t.Errorf("arrays/tiny/layer1 = %q (directories and their arrays only)", got)
	}
	if got := names(t, e.path("features", "tiny", "layer1", "train")); !same(got, []string{"cat/", "dog/"}) {
		t.Errorf("train = %q", got)
	}
	if got := names(t, e.path("features", "tiny", "pool", "train", "dog")); !same(got, []string{"1.npy"}) {
		t.Errorf("alias dir = %q", got)
	}

	table, err := os.ReadFile(e.path("features", "tiny", "layers"))
	if err != nil {
		t.Fatal(err)
	}
	if string(table) != e.x.Models()[0].Table() {
		t.Errorf("layers file = %q, want the model's Table()", table)
	}

	// The alias serves the aliased layer's features.
	a, err := os.ReadFile(e.path("features", "tiny", "pool", "train", "dog", "1.npy"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := os.ReadFile(e.path("features", "tiny", "layer1", "train", "dog", "1.npy"))
	if err != nil {
		t.Fatal(err)
	}
	if string(a) != string(l) || string(a) != string(expectedNPY(e.x.Models()[0].Layers[1], []byte("dog1"), api.Float32)) {
		t.Error("pool/ and layer1/ differ or are not the extractor's answer")
	}

	raw, err := os.ReadFile(e.path(".featurefs", "stats"))
	if err != nil {
		t.Fatal(err)
	}
	var st figures.Stats
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatalf("stats is not JSON: %v\n%s", err, raw)
	}
	if st.Device != "fake" || st.Source != "fake://bucket" || st.FS.Extractions < 1 || st.Cache.Puts+int64(st.FS.WriteQueued) < 1 || st.Extractor.Device != "fake" {
		t.Errorf("stats = %+v", st)
	}

	for _, p := range []string{"nope", "features/nope", "features/tiny/layer9", "features/tiny/layer1/nope", "features/tiny/layer1/top.jpeg.npy", "features/tiny/layer1/README.npy"} {
		if _, err := os.Stat(e.path(p)); !os.IsNotExist(err) {
			t.Errorf("stat %s: %v, want ENOENT", p, err)
		}
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	if _, err := New(nil, Config{}); err == nil {
		t.Error("New without a bucket passed")
	}
	x := newFakeExtractor()
	x.Models()[0].Name = "layers"
	if _, err := newTree(t, testConfig{pipelineConfig: pipelineConfig{Bucket: newFakeBucket(10), Extractor: x, Cache: newFakeCache()}}); err == nil {
		t.Error("a model named layers passed")
	}
}

// TestInoAvoidsReservedNumbers: a hash that lands on 0, the root's number
// or ^0 is moved off them (^0 used to wrap to 1, the root's).
func TestInoAvoidsReservedNumbers(t *testing.T) {
	for v, want := range map[uint64]uint64{0: 2, 1: 3, 2: 2, ^uint64(0): ^uint64(0) - 1, 12345: 12345} {
		if got := views.InoFrom(v); got != want {
			t.Errorf("views.InoFrom(%#x) = %#x, want %#x", v, got, want)
		}
	}
}
