package features

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/fs/internal/fakes"
)

// versionModel is testModel as the model file digest file, with layer
// digests l0 and l1 ("" for none: a featurefs before layer digests).
func versionModel(file, l0, l1 string) *api.Model {
	m := testModel()
	m.Digest = file
	m.Layers[0].Digest, m.Layers[1].Digest = l0, l1
	return m
}

// versionExtractor computes testModel's features, offset by the layer's
// digest's first byte so that two computations of a layer differ.
func versionExtractor(m *api.Model) *fakeExtractor {
	return fakes.NewExtractor(func(l api.Layer, data []byte, _ api.DType) []byte {
		d := append([]byte{}, data...)
		if l.Digest != "" {
			d[0] += l.Digest[0]
		}
		return expectedNPY(l, d)
	}, m)
}

var (
	digestA = strings.Repeat("a", 64)
	digestB = strings.Repeat("b", 64)
	digestC = strings.Repeat("c", 64)
)

// Features are keyed by the layer's digest: a model version that keeps a
// layer's digest reads it from the cache and from the feature store of
// another version; a layer whose digest changed is computed, never served
// from the other version.
func TestLayerDigestSharesFeaturesAcrossVersions(t *testing.T) {
	b, _ := localBucket(t, map[string]string{"a.jpg": "abcd"})
	ctx := context.Background()
	obj, _ := b.Stat(ctx, "a.jpg")
	storeDir := filepath.Join(t.TempDir(), "fst")
	c := fakes.NewCache()
	read := func(m *api.Model, c *fakes.Cache) (l0, l1 []byte, extractions int64) {
		t.Helper()
		x := versionExtractor(m)
		fst := openFeatureStore(t, storeDir)
		p, err := New(Config{Bucket: b, Extractor: x, Cache: c, FeatureStore: fst})
		if err != nil {
			t.Fatal(err)
		}
		if l0, err = p.Feature(ctx, "tiny", 0, obj); err != nil {
			t.Fatal(err)
		}
		if l1, err = p.Feature(ctx, "tiny", 1, obj); err != nil {
			t.Fatal(err)
		}
		fst.Flush(ctx)
		p.Close()
		return l0, l1, x.Calls.Load()
	}
	v1 := versionModel("file1", digestA, digestB)
	v2 := versionModel("file2", digestA, digestC) // layer1 computed otherwise
	a0, a1, n := read(v1, c)
	if n != 2 {
		t.Fatalf("v1: %d extractions, want 2", n)
	}
	// v2 with v1's cache: layer0 from the cache.
	b0, b1, n := read(v2, c)
	if n != 1 || !bytes.Equal(b0, a0) || bytes.Equal(b1, a1) {
		t.Errorf("v2, warm cache: %d extractions (want 1), layer0 shared %v (want true), layer1 shared %v (want false)", n, bytes.Equal(b0, a0), bytes.Equal(b1, a1))
	}
	// v2 with a cold cache: layer0 from the feature store, under its digest.
	c0, c1, n := read(v2, fakes.NewCache())
	if n != 0 || !bytes.Equal(c0, a0) || !bytes.Equal(c1, b1) {
		t.Errorf("v2, cold cache: %d extractions (want 0: both layers are in the store)", n)
	}
	for _, d := range []string{digestA, digestB, digestC} {
		if _, err := os.Stat(filepath.Join(storeDir, "tiny-"+d[:12], "_model.json")); err != nil {
			t.Errorf("store directory of layer digest %.12s: %v", d, err)
		}
	}
}

// Features cached and stored before layer digests (keyed by the model
// file's digest and the tensor name) are read, for the very same model
// file only, and moved under the layer digest as they are read.
func TestLegacyFeaturesAreRead(t *testing.T) {
	b, _ := localBucket(t, map[string]string{"a.jpg": "abcd"})
	ctx := context.Background()
	obj, _ := b.Stat(ctx, "a.jpg")
	storeDir := filepath.Join(t.TempDir(), "fst")
	oldCache := fakes.NewCache()
	open := func(m *api.Model, c *fakes.Cache) (*Pipeline, *fakeExtractor) {
		t.Helper()
		x := versionExtractor(m)
		p, err := New(Config{Bucket: b, Extractor: x, Cache: c, FeatureStore: openFeatureStore(t, storeDir)})
		if err != nil {
			t.Fatal(err)
		}
		return p, x
	}
	// The old layout: no layer digests.
	old, x := open(versionModel("file1", "", ""), oldCache)
	want, err := old.Feature(ctx, "tiny", 1, obj)
	if err != nil || x.Calls.Load() != 1 {
		t.Fatalf("old layout: %v, %d extractions", err, x.Calls.Load())
	}
	old.cfg.FeatureStore.Flush(ctx)
	old.Close()
	if _, err := os.Stat(filepath.Join(storeDir, "tiny-file1", "layer1", "a.npy")); err != nil {
		t.Fatalf("old layout in the store: %v", err)
	}

	m := versionModel("file1", digestA, digestB)
	for what, c := range map[string]*fakes.Cache{"old cache": oldCache, "cold cache, old store": fakes.NewCache()} {
		p, x := open(m, c)
		got, err := p.Feature(ctx, "tiny", 1, obj)
		if err != nil || x.Calls.Load() != 0 || !bytes.Equal(got, want) {
			t.Errorf("%s: %v, %d extractions (want 0), same bytes %v", what, err, x.Calls.Load(), bytes.Equal(got, want))
		}
		p.cfg.FeatureStore.Flush(ctx)
		p.Close()
		if !c.Has(p.cacheKey(p.NewView(m, m.Layers[1]), obj)) {
			t.Errorf("%s: the feature is not cached under its layer digest", what)
		}
	}
	if _, err := os.Stat(filepath.Join(storeDir, "tiny-"+digestB[:12], "layer1", "a.npy")); err != nil {
		t.Errorf("not moved under the layer digest in the store: %v", err)
	}

	// Another model file: nothing of the old layout answers for it.
	p, x := open(versionModel("file2", digestA, digestC), oldCache)
	got, err := p.Feature(ctx, "tiny", 1, obj)
	if err != nil || x.Calls.Load() != 1 || bytes.Equal(got, want) {
		t.Errorf("another file: %v, %d extractions (want 1), served the old file's feature %v", err, x.Calls.Load(), bytes.Equal(got, want))
	}
	p.Close()
}
