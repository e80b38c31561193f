//go:build cgo

// These tests run the real extractor (ONNX Runtime, cgo); the packages
// they test are cgo-free (TestFSIsCgoFree).

package remote

// Split execution end to end in one process: a server over a directory with
// a real ResNet-18, a client splitting the model at several points.

import (
	"bytes"
	"context"
	"image"
	"image/color"
	"image/jpeg"
	"io"
	"log/slog"
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/featurefs/featurefs/extractor"
	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/extractor/spec"
	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/test/testenv"
)

func splitJPEG(t *testing.T, w, h, seed int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, color.RGBA{uint8(x*255/w + seed), uint8(y * 255 / h), uint8((x*y + seed*41) % 256), 255})
		}
	}
	var b bytes.Buffer
	if err := jpeg.Encode(&b, img, &jpeg.Options{Quality: 90}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// splitBed is a server over three images and a client of it, with the
// mount's extractor (ResNet-18 on the CPU, batches of 2).
type splitBed struct {
	keys    []string
	imgs    map[string][]byte
	svc     *extractor.Service
	c       *Client
	srv     *Server
	profDir string
}

func newSplitBed(t *testing.T) *splitBed {
	t.Helper()
	dir := t.TempDir()
	keys := []string{"train/a/1.jpg", "train/a/2.jpg", "train/b/3.jpg"}
	imgs := map[string][]byte{}
	for i, k := range keys {
		imgs[k] = splitJPEG(t, 300+20*i, 240, i)
		p := filepath.Join(dir, filepath.FromSlash(k))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, imgs[k], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := extractor.DefaultConfig()
	cfg.ORTLib = testenv.ORTLib(t)
	cfg.Device = "cpu"
	cfg.BatchSize = 2
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := extractor.New(cfg, []extractor.ModelSpec{{Name: "resnet18", Path: testenv.Model(t, "resnet18")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	ctx := context.Background()
	b, err := bucket.Open(ctx, dir, bucket.S3Options{})
	if err != nil {
		t.Fatal(err)
	}
	profDir := t.TempDir()
	srv, err := newTestServer(t, testConfig{pipelineConfig{Bucket: b, Extractor: svc, Cache: newMemCache()}, ServerConfig{NoAuth: true, ProfileDir: profDir}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	c, err := Dial(ctx, clientLimits(ClientConfig{URLs: []string{hs.URL}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &splitBed{keys: keys, imgs: imgs, svc: svc, c: c, srv: srv, profDir: profDir}
}

func TestSplitExtractorMatchesDirectExtraction(t *testing.T) {
	bed := newSplitBed(t)
	keys, imgs, svc, c, profDir := bed.keys, bed.imgs, bed.svc, bed.c, bed.profDir
	ctx := context.Background()
	const freeze = 8
	m, _ := svc.Model("resnet18")
	want := map[string][]float32{}
	for _, k := range keys {
		npy, err := svc.Extract(ctx, api.Request{Model: "resnet18", Layer: freeze, Key: k, Fetch: func(context.Context) ([]byte, error) { return imgs[k], nil }})
		if err != nil {
			t.Fatal(err)
		}
		_, _, want[k], _ = api.DecodeNPY(npy)
	}
	for _, pol := range []string{"none", "raw", "layer3", "layer0", "auto"} {
		policy, err := spec.ParseSplitPolicy(pol)
		if err != nil {
			t.Fatal(err)
		}
		x, err := c.Split(ctx, SplitConfig{Policy: policy, Local: svc, ProfileDir: t.TempDir(), ProbeBytes: 256 << 10})
		if err != nil {
			t.Fatalf("--split %s: %v", pol, err)
		}
		// --split none plans nothing: no planner, no probe, no profile.
		split := freeze
		if p := x.Planner("resnet18"); p != nil {
			split = p.Split(freeze)
		} else if pol != "none" {
			t.Fatalf("--split %s: no planner", pol)
		}
		var wantSplit int
		switch pol {
		case "none":
			wantSplit = freeze
		case "raw":
			wantSplit = spec.SplitRaw
		case "layer3":
			wantSplit = 3
		case "layer0":
			wantSplit = 0
		default:
			wantSplit = split
		}
		if split != wantSplit {
			t.Errorf("--split %s: split %d, want %d", pol, split, wantSplit)
		}
		var wg sync.WaitGroup
		for _, k := range keys {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, err := x.Extract(ctx, api.Request{Model: "resnet18", Layer: freeze, Key: k})
				if err != nil {
					t.Errorf("--split %s %s: %v", pol, k, err)
					return
				}
				shape, _, data, err := api.DecodeNPY(got)
				if err != nil || len(data) != len(want[k]) || int64(len(data)) != m.Layers[freeze].Elements() || len(shape) != len(m.Layers[freeze].Shape) {
					t.Errorf("--split %s %s: shape %v, %v", pol, k, shape, err)
					return
				}
				worst := 0.0
				for i := range data {
					d := math.Abs(float64(data[i]) - float64(want[k][i]))
					worst = max(worst, d)
					if d > 1e-3+1e-3*math.Abs(float64(want[k][i])) {
						t.Errorf("--split %s %s: element %d: %g vs %g", pol, k, i, data[i], want[k][i])
						return
					}
				}
			}()
		}
		wg.Wait()
		if pol == "none" {
			x.Close()
			continue
		}
		st := x.Stats()
		if st.Split == nil || len(st.Split.Plans) != 1 {
			t.Fatalf("--split %s: stats %+v", pol, st.Split)
		}
		ps := st.Split.Plans[0]
		wantWire := float64(len(imgs[keys[0]])+len(imgs[keys[1]])+len(imgs[keys[2]])) / 3
		if split >= 0 {
			wantWire = float64(api.NPYSize(m.Layers[split].Shape, api.Float32))
		}
		if ps.Samples != 3 || ps.Split != split || math.Abs(ps.MeasuredWireBytes-wantWire) > 1 || ps.PredictedPerSec <= 0 || st.Split.BandwidthBps <= 0 {
			t.Errorf("--split %s: plan stats %+v (want 3 samples of %g bytes)", pol, ps, wantWire)
		}
		x.Close()
	}
	// The server's profile was measured once and cached in its directory.
	if files, _ := filepath.Glob(filepath.Join(profDir, "profile-*.json")); len(files) != 1 {
		t.Errorf("server profile cache: %v", files)
	}
}
