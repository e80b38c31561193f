package extractor

// Models whose graph fixes the batch size, on the real ONNX Runtime with
// the small models of scripts/export_odd_models.py.

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/featurefs/featurefs/extractor/api"
)

// extractAll extracts n distinct images from every layer of model name, n
// at a time, and returns the decoded features by layer and image.
func extractAll(t *testing.T, svc *Service, name string, n int) [][][]float32 {
	t.Helper()
	m, _ := svc.Model(name)
	out := make([][][]float32, len(m.Layers))
	for _, l := range m.Layers {
		out[l.Index] = make([][]float32, n)
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				img := jpegOf(t, 240+i, 230, i)
				b, err := svc.Extract(context.Background(), Request{Model: name, Layer: l.Index, Key: fmt.Sprintf("img%d.jpg", i), Fetch: fetchOf(img)})
				if err != nil {
					errs[i] = err
					return
				}
				_, _, data, err := api.DecodeNPY(b)
				out[l.Index][i], errs[i] = data, err
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("%s %s img%d: %v", name, l.Name, i, err)
			}
		}
	}
	return out
}

// sameFeatures fails unless got and want agree within float32 rounding.
func sameFeatures(t *testing.T, what string, got, want [][][]float32) {
	t.Helper()
	for l := range want {
		for i := range want[l] {
			g, w := got[l][i], want[l][i]
			if len(g) != len(w) {
				t.Fatalf("%s layer%d img%d: %d values, want %d", what, l, i, len(g), len(w))
			}
			for k := range w {
				if math.Abs(float64(g[k]-w[k])) > 1e-4*(1+math.Abs(float64(w[k]))) {
					t.Fatalf("%s layer%d img%d [%d] = %g, want %g", what, l, i, k, g[k], w[k])
				}
			}
		}
	}
}

// logLines returns the log lines holding every one of subs.
func logLines(logs string, subs ...string) []string {
	var out []string
	for _, line := range strings.Split(logs, "\n") {
		ok := line != ""
		for _, s := range subs {
			ok = ok && strings.Contains(line, s)
		}
		if ok {
			out = append(out, line)
		}
	}
	return out
}

// TestFixedBatchOneIsNotMeasured: with an automatic batch size, a model
// whose graph fixes batch 1 runs batches of 1 without measuring, and says
// so in one INFO line at load (issue 15, item 7). Before, the measurement
// ran batch 2 on every layer's first use and logged "WARN batch size
// measurement failed; using 1 ... Got: 2 Expected: 1" each time.
func TestFixedBatchOneIsNotMeasured(t *testing.T) {
	ref, _, err := oddService(t, nil, "tiny")
	if err != nil {
		t.Fatal(err)
	}
	want := extractAll(t, ref, "tiny", 3)

	svc, logs, err := oddService(t, nil, "batch1")
	if err != nil {
		t.Fatal(err)
	}
	got := extractAll(t, svc, "batch1", 3)
	sameFeatures(t, "batch1", got, want)
	if w := logLines(logs.String(), "level=WARN"); len(w) > 0 {
		t.Errorf("warnings with a fixed-batch-1 model:\n%s", strings.Join(w, "\n"))
	}
	if n := len(logLines(logs.String(), "level=INFO", "fixed batch size of 1", "model=batch1")); n != 1 {
		t.Errorf("%d INFO lines about the fixed batch, want 1:\n%s", n, logs.String())
	}
	if n := len(logLines(logs.String(), "batch size measured")); n != 0 {
		t.Errorf("the batch size of a fixed-batch model was measured %d times", n)
	}
	for lane, bs := range svc.Stats().BatchSizes {
		if bs != 1 {
			t.Errorf("lane %s batch size %d, want 1", lane, bs)
		}
	}
}

// TestFixedBatchCapsBatchSize: --batch-size 4 with models whose graphs fix
// batch 1 and batch 3. Batch 1 is capped at 1; batch 3 runs exactly 3 at a
// time, the short batch padded; nothing is retried, nothing warns, and the
// features equal the dynamic-batch model's (issue 16, item 9). Before,
// every batch of the batch-1 model failed and was retried item by item with
// a WARN each time, and the batch-3 model failed every read.
func TestFixedBatchCapsBatchSize(t *testing.T) {
	ref, _, err := oddService(t, nil, "tiny")
	if err != nil {
		t.Fatal(err)
	}
	const n = 7 // two full batches of 3 and one short one
	want := extractAll(t, ref, "tiny", n)

	svc, logs, err := oddService(t, func(c *Config) { c.BatchSize = 4 }, "batch1", "batch3")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"batch1", "batch3"} {
		sameFeatures(t, name, extractAll(t, svc, name, n), want)
	}
	st := svc.Stats()
	if st.Retries != 0 || st.Failed != 0 {
		t.Errorf("retries %d, failed %d; want 0", st.Retries, st.Failed)
	}
	if w := logLines(logs.String(), "level=WARN"); len(w) > 0 {
		t.Errorf("warnings:\n%s", strings.Join(w, "\n"))
	}
	for _, line := range []string{"model=batch1 batch=1 batch_size_asked=4", "model=batch3 batch=3 batch_size_asked=4"} {
		if n := len(logLines(logs.String(), "level=INFO", "fixed batch size", line)); n != 1 {
			t.Errorf("%d INFO lines with %q, want 1:\n%s", n, line, logs.String())
		}
	}
	for lane, bs := range st.BatchSizes {
		wantBS := 1
		if strings.HasPrefix(lane, "batch3/") {
			wantBS = 3
		}
		if bs != wantBS {
			t.Errorf("lane %s batch size %d, want %d", lane, bs, wantBS)
		}
	}
	if len(st.BatchSizes) != 8 {
		t.Errorf("batch sizes of %d lanes, want 8: %v", len(st.BatchSizes), st.BatchSizes)
	}
}
