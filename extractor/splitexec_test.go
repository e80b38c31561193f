package extractor

// Split execution tests on the real ONNX Runtime: layer F computed from a
// layer S tensor equals layer F extracted from the image.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/featurefs/featurefs/extractor/api"
)

// npyClose compares two .npy files' values: the largest |a-b| and whether
// every element is within atol + rtol*|b|.
func npyClose(t *testing.T, a, b []byte, atol, rtol float64) (float64, bool) {
	t.Helper()
	sa, _, da, err := api.DecodeNPY(a)
	if err != nil {
		t.Fatal(err)
	}
	sb, _, db, err := api.DecodeNPY(b)
	if err != nil {
		t.Fatal(err)
	}
	if api.ShapeString(sa) != api.ShapeString(sb) || len(da) != len(db) {
		t.Fatalf("shapes %v vs %v", sa, sb)
	}
	worst, ok := 0.0, true
	for i := range da {
		d := math.Abs(float64(da[i]) - float64(db[i]))
		if math.IsNaN(d) {
			return d, false
		}
		worst = max(worst, d)
		if d > atol+rtol*math.Abs(float64(db[i])) {
			ok = false
		}
	}
	return worst, ok
}

func TestExtractFromEqualsDirectExtraction(t *testing.T) {
	svc := newResNetService(t, nil)
	ctx := context.Background()
	imgs := [][]byte{jpegOf(t, 320, 240, 1), jpegOf(t, 240, 320, 2), jpegOf(t, 300, 300, 3), jpegOf(t, 256, 256, 4)}
	direct := func(i, layer int) []byte {
		b, err := svc.Extract(ctx, Request{Model: "resnet50", Layer: layer, Key: fmt.Sprintf("img%d", i), Fetch: fetchOf(imgs[i])})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, c := range []struct{ from, to int }{{1, 12}, {12, 18}, {5, 19}, {0, 1}, {12, 12}} {
		froms := make([][]byte, len(imgs))
		for i := range imgs {
			froms[i] = direct(i, c.from)
		}
		// All images at once: they share batches.
		outs := make([][]byte, len(imgs))
		errs := make([]error, len(imgs))
		var wg sync.WaitGroup
		for i := range imgs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				outs[i], errs[i] = svc.ExtractFrom(ctx, "resnet50", c.from, c.to, froms[i])
			}()
		}
		wg.Wait()
		for i := range imgs {
			if errs[i] != nil {
				t.Fatalf("ExtractFrom(%d, %d): %v", c.from, c.to, errs[i])
			}
			want := direct(i, c.to)
			if d, ok := npyClose(t, outs[i], want, 1e-4, 1e-4); !ok {
				t.Errorf("layer%d from layer%d, image %d: max |diff| %g vs direct extraction", c.to, c.from, i, d)
			}
		}
	}
	st := svc.SplitStats()
	if st.Items != 4*4 || st.Batches >= st.Items || st.Lanes != 4 {
		t.Errorf("split stats %+v: want 16 items in fewer batches over 4 lanes", st)
	}
}

func TestExtractFromFloat16Input(t *testing.T) {
	svc := newResNetService(t, nil)
	ctx := context.Background()
	img := jpegOf(t, 320, 240, 5)
	from, err := svc.Extract(ctx, Request{Model: "resnet50", Layer: 12, Key: "a", Fetch: fetchOf(img)})
	if err != nil {
		t.Fatal(err)
	}
	shape, _, data, err := api.DecodeNPY(from)
	if err != nil {
		t.Fatal(err)
	}
	half := api.EncodeNPY(shape, data, Float16)
	got, err := svc.ExtractFrom(ctx, "resnet50", 12, 18, half)
	if err != nil {
		t.Fatal(err)
	}
	want, err := svc.Extract(ctx, Request{Model: "resnet50", Layer: 18, Key: "a", Fetch: fetchOf(img)})
	if err != nil {
		t.Fatal(err)
	}
	// float16 rounding of the input (relative 2^-11) carries through.
	if d, ok := npyClose(t, got, want, 1e-2, 1e-2); !ok {
		t.Errorf("layer18 from a float16 layer12: max |diff| %g", d)
	}
}

func TestExtractFromBadInput(t *testing.T) {
	svc := newResNetService(t, nil)
	ctx := context.Background()
	m, _ := svc.Model("resnet50")
	wrong := api.EncodeNPY(m.Layers[11].Shape, make([]float32, m.Layers[11].Elements()), Float32)
	if m.Layers[11].Elements() == m.Layers[12].Elements() {
		wrong = api.EncodeNPY([]int64{3}, []float32{1, 2, 3}, Float32)
	}
	for name, c := range map[string]struct {
		model    string
		from, to int
		in       []byte
		want     error
	}{
		"wrong shape":   {"resnet50", 12, 18, wrong, ErrBadTensor},
		"not npy":       {"resnet50", 12, 18, []byte("not a tensor"), ErrBadTensor},
		"empty":         {"resnet50", 12, 18, nil, ErrBadTensor},
		"backwards":     {"resnet50", 18, 12, wrong, ErrUnknownLayer},
		"out of range":  {"resnet50", 12, 20, wrong, ErrUnknownLayer},
		"negative":      {"resnet50", -1, 12, wrong, ErrUnknownLayer},
		"unknown model": {"vgg", 1, 2, wrong, ErrUnknownModel},
	} {
		if _, err := svc.ExtractFrom(ctx, c.model, c.from, c.to, c.in); !errors.Is(err, c.want) {
			t.Errorf("%s: err %v, want %v", name, err, c.want)
		}
	}
	// A cancelled caller gets its context's error.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	good := api.EncodeNPY(m.Layers[12].Shape, make([]float32, m.Layers[12].Elements()), Float32)
	if _, err := svc.ExtractFrom(cctx, "resnet50", 12, 18, good); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: err %v", err)
	}
	svc.Close()
	if _, err := svc.ExtractFrom(ctx, "resnet50", 12, 18, good); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: err %v, want ErrClosed", err)
	}
}
