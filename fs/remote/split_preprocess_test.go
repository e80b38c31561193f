//go:build cgo

// These tests run the real extractor (ONNX Runtime, cgo); the packages
// they test are cgo-free (TestFSIsCgoFree).

package remote

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/featurefs/featurefs/extractor"
	"github.com/featurefs/featurefs/extractor/spec"
	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/test/testenv"
)

// A split mount decodes raw images itself: it must do so as the servers
// do, since their preprocessing is in the cache key. A model whose local
// preprocessing (--fast-decode here) differs from the servers' is not
// split, with a warning naming both.
func TestSplitRefusesOtherPreprocessing(t *testing.T) {
	cfg := extractor.DefaultConfig()
	cfg.ORTLib = testenv.ORTLib(t)
	cfg.Device = "cpu"
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	path := testenv.Model(t, "resnet18")
	server, err := extractor.New(cfg, []extractor.ModelSpec{{Name: "resnet18", Path: path}})
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	fast := extractor.DefaultPreprocess()
	fast.FastDecode = true
	local, err := extractor.New(cfg, []extractor.ModelSpec{{Name: "resnet18", Path: path, Preprocess: &fast}})
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	ctx := context.Background()
	b, err := bucket.Open(ctx, t.TempDir(), bucket.S3Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := newTestServer(t, testConfig{pipelineConfig{Bucket: b, Extractor: server, Cache: newMemCache()}, ServerConfig{NoAuth: true, ProfileDir: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	c, err := Dial(ctx, clientLimits(ClientConfig{URLs: []string{hs.URL}}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var logBuf bytes.Buffer
	x, err := c.Split(ctx, SplitConfig{Policy: spec.SplitPolicy{Mode: "raw"}, Local: local, ProfileDir: t.TempDir(),
		ProbeBytes: 64 << 10, Logger: slog.New(slog.NewTextHandler(&logBuf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if p := x.Planner("resnet18"); p != nil {
		t.Errorf("the model is split although the mount decodes with --fast-decode and the servers exactly")
	}
	if log := logBuf.String(); !strings.Contains(log, "preprocessing") || !strings.Contains(log, "jpeg-dct-scale") {
		t.Errorf("no warning naming both preprocessings: %s", log)
	}
}
