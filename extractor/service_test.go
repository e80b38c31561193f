package extractor

// Service tests on the real ONNX Runtime and an exported ResNet-50.

import (
	"bytes"
	"context"
	"errors"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"io"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/test/testenv"
)

// jpegOf encodes a w x h gradient with a seed-dependent tint.
func jpegOf(t testing.TB, w, h, seed int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, color.RGBA{uint8(x * 255 / w), uint8(y * 255 / h), uint8((x*y + seed*37) % 256), 255})
		}
	}
	var b bytes.Buffer
	if err := jpeg.Encode(&b, img, &jpeg.Options{Quality: 90}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func newResNetService(t *testing.T, mutate func(*Config)) *Service {
	t.Helper()
	return newCPUService(t, mutate, ModelSpec{Name: "resnet50", Path: testenv.Model(t, "resnet50"), Aliases: map[string]string{"pool": "layer18"}})
}

// newCPUService is a Service of specs on the CPU, batch 4, without logs,
// with mutate applied to its config; it is closed when the test ends.
func newCPUService(t *testing.T, mutate func(*Config), specs ...ModelSpec) *Service {
	t.Helper()
	cfg := DefaultConfig()
	cfg.ORTLib = testenv.ORTLib(t)
	cfg.Device = "cpu"
	cfg.BatchSize = 4
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if mutate != nil {
		mutate(&cfg)
	}
	svc, err := New(cfg, specs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	return svc
}

// extracted is one input's outcome in extractEach.
type extracted struct {
	b   []byte
	err error
}

// extractEach extracts every input at once, resnet50's layer 1 of each
// (its name the key), and returns each one's outcome.
func extractEach(svc *Service, inputs map[string][]byte) map[string]extracted {
	res := map[string]extracted{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for k, b := range inputs {
		wg.Go(func() {
			out, err := svc.Extract(context.Background(), Request{Model: "resnet50", Layer: 1, Key: k, Fetch: fetchOf(b)})
			mu.Lock()
			res[k] = extracted{out, err}
			mu.Unlock()
		})
	}
	wg.Wait()
	return res
}

func fetchOf(b []byte) func(context.Context) ([]byte, error) {
	return func(context.Context) ([]byte, error) { return b, nil }
}

func TestModelLayersKnownBeforeCompute(t *testing.T) {
	svc := newResNetService(t, nil)
	if len(svc.Models()) != 1 {
		t.Fatalf("Models() = %v", svc.Models())
	}
	m, ok := svc.Model("resnet50")
	if !ok {
		t.Fatal("Model(resnet50) missing")
	}
	if len(m.Digest) != 64 || len(m.Layers) != 20 {
		t.Fatalf("digest %q, %d layers; want a sha256 and 20 layers", m.Digest, len(m.Layers))
	}
	want := map[string]string{"layer0": "64x112x112", "layer1": "64x56x56", "layer12": "1024x14x14", "layer17": "2048x7x7", "layer18": "2048", "layer19": "1000"}
	for name, shape := range want {
		l, ok := m.Lookup(name)
		if !ok || api.ShapeString(l.Shape) != shape || l.Bytes != l.Elements()*4 {
			t.Errorf("%s: %+v, want shape %s", name, l, shape)
		}
	}
	if l, ok := m.Lookup("pool"); !ok || l.Index != 18 {
		t.Errorf("alias pool: %+v %v", l, ok)
	}
	for _, bad := range []string{"layer20", "layer012", "layer-1", "12", "", "Layer12"} {
		if _, ok := m.Lookup(bad); ok {
			t.Errorf("Lookup(%q) succeeded", bad)
		}
	}
	for i := 1; i < len(m.Layers); i++ {
		if m.Layers[i].CumGFLOPs < m.Layers[i-1].CumGFLOPs {
			t.Errorf("cumulative GFLOPs decrease at layer %d", i)
		}
	}
	if g := m.Layers[19].CumGFLOPs; g < 7.5 || g > 8.5 {
		t.Errorf("ResNet-50 total %.2f GFLOPs (multiply-adds x2), want about 8.2", g)
	}
	tab := m.Table()
	for _, s := range []string{"layer12", "/layer3/layer3.3/relu_2/Relu_output_0", "1024x14x14", "802816", "pool"} {
		if !strings.Contains(tab, s) {
			t.Errorf("table lacks %q:\n%s", s, tab)
		}
	}
	if svc.Stats().SessionsCreated != 0 {
		t.Error("loading the model ran a layer session")
	}

	// The .npy sizes are what the shapes promise.
	img := jpegOf(t, 500, 375, 1)
	for _, name := range []string{"layer1", "pool"} {
		l, _ := m.Lookup(name)
		b, err := svc.Extract(context.Background(), Request{Model: "resnet50", Layer: l.Index, Key: "x.jpg", Fetch: fetchOf(img)})
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(b)) != api.NPYSize(l.Shape, Float32) {
			t.Errorf("%s: %d bytes, NPYSize says %d", name, len(b), api.NPYSize(l.Shape, Float32))
		}
	}
	if _, err := svc.Extract(context.Background(), Request{Model: "resnet50", Layer: 20, Key: "x.jpg", Fetch: fetchOf(img)}); !errors.Is(err, ErrUnknownLayer) {
		t.Errorf("layer 20: %v", err)
	}
	if _, err := svc.Extract(context.Background(), Request{Model: "nope", Key: "x.jpg", Fetch: fetchOf(img)}); !errors.Is(err, ErrUnknownModel) {
		t.Errorf("unknown model: %v", err)
	}
}

func TestBadInputsFailAlone(t *testing.T) {
	svc := newResNetService(t, func(c *Config) { c.MaxPixels = 400 * 400 })
	good := jpegOf(t, 500, 300, 2)
	huge := image.NewGray(image.Rect(0, 0, 2000, 1500))
	var hb bytes.Buffer
	if err := png.Encode(&hb, huge); err != nil {
		t.Fatal(err)
	}
	inputs := map[string][]byte{
		"good1.jpg":     good,
		"corrupt.jpg":   append(append([]byte{}, good[:200]...), bytes.Repeat([]byte{0x13, 0x37}, 2000)...),
		"empty.jpg":     nil,
		"truncated.jpg": good[:len(good)/2],
		"notes.txt":     []byte("name,label\ncat,1\n"),
		"oversized.png": hb.Bytes(),
		"good2.jpg":     jpegOf(t, 300, 300, 3),
	}
	res := extractEach(svc, inputs)
	for k := range inputs {
		r := res[k]
		if strings.HasPrefix(k, "good") {
			if r.err != nil {
				t.Errorf("%s: %v", k, r.err)
			}
			continue
		}
		var ie *ImageError
		if !errors.As(r.err, &ie) || !errors.Is(r.err, ErrBadImage) || ie.Key != k {
			t.Errorf("%s: %v; want an *ImageError naming it", k, r.err)
			continue
		}
		// The key is the record's or log line's to show, once: the
		// message is the reason only.
		if strings.Contains(r.err.Error(), k) {
			t.Errorf("%s: message %q repeats the key", k, r.err)
		}
		t.Logf("%s: %v", k, r.err)
	}
	if st := svc.Stats(); st.BadImages != 5 || st.Completed != 2 {
		t.Errorf("stats bad %d completed %d, want 5 and 2", st.BadImages, st.Completed)
	}
}

func TestSessionsAreBoundedAcrossLayers(t *testing.T) {
	svc := newResNetService(t, func(c *Config) { c.MaxSessions = 2 })
	img := jpegOf(t, 256, 256, 4)
	for _, layer := range []int{0, 1, 2, 0, 1} {
		if _, err := svc.Extract(context.Background(), Request{Model: "resnet50", Layer: layer, Key: "a.jpg", Fetch: fetchOf(img)}); err != nil {
			t.Fatal(err)
		}
		if st := svc.Stats(); st.Sessions > 2 {
			t.Fatalf("%d sessions open, bound 2", st.Sessions)
		}
	}
	if st := svc.Stats(); st.SessionsCreated != 5 || st.SessionsEvicted != 3 {
		t.Errorf("created %d evicted %d, want 5 and 3 (LRU with bound 2 over layers 0,1,2,0,1)", st.SessionsCreated, st.SessionsEvicted)
	}
	svc.Close()
	if st := svc.Stats(); st.Sessions != 0 {
		t.Errorf("%d sessions after Close", st.Sessions)
	}
	if _, err := svc.Extract(context.Background(), Request{Model: "resnet50", Layer: 0, Key: "a.jpg", Fetch: fetchOf(img)}); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
}

func TestFloat16MatchesFloat32(t *testing.T) {
	f32 := newResNetService(t, nil)
	f16 := newResNetService(t, func(c *Config) { c.DType = Float16 })
	if f16.DType() != Float16 || f32.DType() != Float32 {
		t.Fatal("DType()")
	}
	img := jpegOf(t, 333, 500, 5)
	r := Request{Model: "resnet50", Layer: 18, Key: "h.jpg", Fetch: fetchOf(img)}
	a, err := f32.Extract(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	b, err := f16.Extract(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := f16.Model("resnet50")
	if int64(len(b)) != api.NPYSize(m.Layers[18].Shape, Float16) {
		t.Fatalf("float16 file is %d bytes", len(b))
	}
	_, _, x, _ := api.DecodeNPY(a)
	_, dt, y, err := api.DecodeNPY(b)
	if err != nil || dt != Float16 {
		t.Fatalf("%v %v", dt, err)
	}
	for i := range x {
		if d := math.Abs(float64(x[i] - y[i])); d > 1e-3*math.Abs(float64(x[i]))+1e-4 {
			t.Fatalf("element %d: %v vs %v", i, x[i], y[i])
		}
	}
}

func TestMissingORTLibraryIsOneClearError(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ORTLib = "/nonexistent/libonnxruntime.so.1"
	_, err := New(cfg, nil)
	if !errors.Is(err, ErrORTLibrary) || !strings.Contains(err.Error(), "/nonexistent/libonnxruntime.so.1") || !strings.Contains(err.Error(), "FEATUREFS_ORT_LIB") {
		t.Errorf("got %v", err)
	}
}
