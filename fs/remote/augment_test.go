package remote

import (
	"bytes"
	"context"
	"crypto/sha256"
	"strings"
	"testing"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/extractor/augment"
	"github.com/featurefs/featurefs/fs/features"
	"github.com/featurefs/featurefs/fs/internal/fakes"
)

// hashFeature is a fake feature of every byte of its input (the package's
// expectedFeature reads only the first 8, which an augmented view's input
// shares with the plain one).
func hashFeature(l api.Layer, b []byte, _ api.DType) []byte {
	sum := sha256.Sum256(append([]byte{byte(l.Index)}, b...))
	data := make([]float32, l.Elements())
	for i := range data {
		data[i] = float32(sum[i%len(sum)])
	}
	return api.EncodeNPY(l.Shape, data, api.Float32)
}

// TestRemoteAugmentedViews: a server lists FeatureAugment and computes the
// augmented view a batch item asks for (drawn from the item's key and
// ETag, as a local mount draws it), not the plain feature; GET
// /v1/viewparams tells its parameters; a client's pipeline reads a view
// and its parameters through the server; a view the server would not draw
// (a ratio range not positive) is refused as a bad request.
func TestRemoteAugmentedViews(t *testing.T) {
	m := newFakeExtractor().Models()[0]
	ex := fakes.NewExtractor(hashFeature, m)
	dir := writeObjects(t, map[string]string{"d/a.jpg": "abcd", "d/b.jpg": "efghij"})
	ts := startServerEx(t, dir, ex, nil)
	c := dial(t, ClientConfig{URLs: []string{ts.URL}})
	if !c.ServesViews() {
		t.Fatal("the server does not list FeatureAugment")
	}
	ctx := context.Background()
	etag := etagOf(t, c, "d/a.jpg")
	spec := augment.Spec{View: 1, Seed: 2, Scale: augment.DefaultScale, Ratio: augment.DefaultRatio}
	withID := spec
	withID.Identity = augment.Identity("d/a.jpg", etag)

	req := featureReq("d/a.jpg", 1, etag)
	req.Augment = &spec
	got, err := c.Extractor().Extract(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if want := hashFeature(m.Layers[1], fakes.ViewInput([]byte("abcd"), withID), api.Float32); !bytes.Equal(got, want) {
		t.Errorf("the server's view 1 of d/a.jpg is not that view's feature")
	}
	plain, err := c.Extractor().Extract(ctx, featureReq("d/a.jpg", 1, etag))
	if err != nil || bytes.Equal(plain, got) {
		t.Errorf("plain feature: %v, equal to the view: %v", err, bytes.Equal(plain, got))
	}
	params, err := c.Extractor().ObjectViewParams(ctx, "tiny", 1, spec, "d/a.jpg", etag)
	if want := withID.Params(64+4, 48, m.Preprocess.Crop); err != nil || params != want {
		t.Errorf("view parameters through the server: %+v, %v; want %+v", params, err, want)
	}

	// A client's pipeline, as a --remote --augment mount builds it.
	p, err := features.New(features.Config{Bucket: c.Bucket(), Extractor: c.Extractor(), Cache: newMemCache(),
		Augment: features.AugmentConfig{Views: 2, Seed: 2}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	obj, err := c.Bucket().Stat(ctx, "d/a.jpg")
	if err != nil {
		t.Fatal(err)
	}
	v := p.NewAugView(m, m.Layers[1], p.Config().Augment.Spec(1))
	if data, err := p.Read(ctx, v, obj); err != nil || !bytes.Equal(data, got) {
		t.Errorf("the pipeline's view through the server: %v, same bytes %v", err, bytes.Equal(data, got))
	}
	if pp, err := p.ViewParams(ctx, v, obj); err != nil || pp != params {
		t.Errorf("the pipeline's view parameters: %+v, %v; want %+v", pp, err, params)
	}

	bad := spec
	bad.Ratio = [2]float64{0, 1}
	req.Augment = &bad
	if _, err := c.Extractor().Extract(ctx, req); err == nil || !strings.Contains(err.Error(), "ratio") {
		t.Errorf("a view with ratio (0, 1): %v, want a bad request naming the ratio", err)
	}
	if _, err := c.Extractor().ObjectViewParams(ctx, "tiny", 1, bad, "d/a.jpg", etag); err == nil || !strings.Contains(err.Error(), "ratio") {
		t.Errorf("view parameters with ratio (0, 1): %v, want a bad request naming the ratio", err)
	}
}

// FuzzViewParamsItem: GET /v1/viewparams's query parser never panics, and
// what it accepts and check passes is a view Draw takes (a box inside any
// image).
func FuzzViewParamsItem(f *testing.F) {
	f.Add("tiny", "1", "d/a.jpg", "3", "7", "0.08,1", "0.75,1.3333333333333333")
	f.Add("", "x", "", "-1", "18446744073709551615", "1,0", "NaN,Inf")
	f.Fuzz(func(t *testing.T, model, layer, key, view, seed, scale, ratio string) {
		q := map[string][]string{"model": {model}, "layer": {layer}, "key": {key}, "view": {view}, "seed": {seed}, "scale": {scale}, "ratio": {ratio}}
		it, err := viewParamsItem(q)
		if err != nil {
			return
		}
		if !it.Aug.On {
			t.Fatal("a parsed view item is not on")
		}
		if it.Aug.check() != nil {
			return
		}
		p := it.Aug.Spec().Params(37, 53, 224)
		if p.Top < 0 || p.Left < 0 || p.Height < 1 || p.Width < 1 || p.Top+p.Height > 53 || p.Left+p.Width > 37 {
			t.Fatalf("box %+v outside a 37x53 image", p)
		}
		back, err := viewParamsItem(viewParamsQuery(it))
		if err != nil || back != it {
			t.Fatalf("round trip: %+v, %v; want %+v", back, err, it)
		}
	})
}
