package features

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/internal/fakes"
)

// fakeExtractor "extracts" a feature by copying the object's first bytes
// into the layer's shape (expectedNPY), through req.Fetch. Objects starting
// with "BAD" are bad images.
type fakeExtractor = fakes.Extractor

// testModel returns a model with two small layers.
func testModel() *api.Model {
	return &api.Model{
		Name:   "tiny",
		Digest: "d1g35t",
		Layers: []api.Layer{
			{Index: 0, Name: "layer0", Tensor: "conv", Shape: []int64{4}, Bytes: 16},
			{Index: 1, Name: "layer1", Tensor: "pool", Shape: []int64{2}, Bytes: 8},
		},
		Preprocess: api.DefaultPreprocess(),
	}
}

func newFakeExtractor() *fakeExtractor {
	return fakes.NewExtractor(func(l api.Layer, data []byte, _ api.DType) []byte { return expectedNPY(l, data) }, testModel())
}

// expectedNPY is the fake extractor's answer for an object's bytes.
func expectedNPY(l api.Layer, data []byte) []byte {
	vals := make([]float32, l.Elements())
	for i := range vals {
		if i < len(data) {
			vals[i] = float32(data[i])
		}
	}
	return api.EncodeNPY(l.Shape, vals, api.Float32)
}

// localBucket writes objects (key -> content) into a directory and opens it
// as a bucket.
func localBucket(t *testing.T, objects map[string]string) (bucket.Bucket, string) {
	t.Helper()
	dir := t.TempDir()
	for k, v := range objects {
		p := filepath.Join(dir, filepath.FromSlash(k))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := bucket.Open(context.Background(), dir, bucket.S3Options{})
	if err != nil {
		t.Fatal(err)
	}
	return b, dir
}
