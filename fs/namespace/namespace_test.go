package namespace

import (
	"bytes"
	"log/slog"
	"testing"
	"time"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/features"
	"github.com/featurefs/featurefs/fs/internal/fakes"
)

// testModel is a model with one small layer: the namespace never extracts,
// but a pipeline needs a model.
func testModel() *api.Model {
	return &api.Model{
		Name:       "tiny",
		Digest:     "d1g35t",
		Layers:     []api.Layer{{Index: 0, Name: "layer0", Tensor: "conv", Shape: []int64{4}, Bytes: 16}},
		Preprocess: api.DefaultPreprocess(),
	}
}

// testNS is a namespace over a bucket, with its pipeline's clock and logs.
type testNS struct {
	*Namespace
	p     *features.Pipeline
	clock *fakes.Clock
	logs  *bytes.Buffer
}

// pipelineConfig and Config are what newNS builds a namespace from.
type pipelineConfig = features.Config

// newNS returns a namespace over b (MetadataTTL 1h on a fake clock, unless
// modify says otherwise); it and its pipeline close when the test ends.
func newNS(t testing.TB, b bucket.Bucket, cfg Config, modify ...func(*pipelineConfig)) *testNS {
	t.Helper()
	clock, logs := fakes.NewClock(), &bytes.Buffer{}
	pc := pipelineConfig{
		Bucket:      b,
		Extractor:   fakes.NewExtractor(func(l api.Layer, data []byte, dt api.DType) []byte { return data }, testModel()),
		Cache:       fakes.NewCache(),
		Logger:      slog.New(slog.NewTextHandler(logs, nil)),
		MetadataTTL: time.Hour,
		ReadTimeout: time.Minute,
		Now:         clock.Now,
	}
	for _, m := range modify {
		m(&pc)
	}
	p, err := features.New(pc)
	if err != nil {
		t.Fatal(err)
	}
	ns := New(p, cfg, nil, nil)
	t.Cleanup(func() {
		ns.Close()
		p.Close()
	})
	return &testNS{Namespace: ns, p: p, clock: clock, logs: logs}
}
