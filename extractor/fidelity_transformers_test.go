package extractor

// Fidelity of the window-attention transformers: Swin-T and MaxViT-T
// (random seeded weights), whose batch is folded into the windows, against
// torchvision's own forward pass, at layers inside and after their stages,
// by the bar TestLayer12MatchesTorchvision sets for ResNet-50.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/test/testenv"
)

// TestTransformersMatchTorchvision loads Swin-T and MaxViT-T (which
// featurefs refused until its pruned models declared a Shape output as
// float), checks the ONNX layers against torchvision's modules on
// torchvision's own input tensors, and then extracts every image end to
// end (decode, preprocess, batch, run).
func TestTransformersMatchTorchvision(t *testing.T) {
	py := testenv.RequireTorch(t)
	// Four images (JPEG, PNG, another JPEG, a .jpeg of another class): a
	// torchvision forward of these models takes seconds per image on two
	// cores.
	images := genImages(t, py, filepath.Join(t.TempDir(), "images"), 2)[:4]
	cases := []struct {
		model string
		// layer -> torchvision module whose output it is, and its shape
		layers []struct {
			layer, module string
			shape         []int64
		}
	}{
		{"swin_t", []struct {
			layer, module string
			shape         []int64
		}{
			{"layer11", "features.3", []int64{28, 28, 192}}, // end of stage 2 (channels last)
			{"layer35", "head", []int64{1000}},
		}},
		{"maxvit_t", []struct {
			layer, module string
			shape         []int64
		}{
			{"layer7", "blocks.0.layers.0.layers.window_attention", []int64{64, 56, 56}},
			{"layer38", "blocks.1", []int64{128, 28, 28}},
			{"layer104", "classifier", []int64{1000}},
		}},
	}
	for _, c := range cases {
		t.Run(c.model, func(t *testing.T) {
			refDir := filepath.Join(t.TempDir(), "ref")
			args := []string{filepath.Join(testenv.RepoRoot(t), "scripts", "ref_features.py"),
				"--model", c.model, "--seed", "0", "--threads", "2", "--out", refDir}
			for _, l := range c.layers {
				args = append(args, "--module", l.module)
			}
			start := time.Now()
			if out, err := exec.Command(py, append(args, images...)...).CombinedOutput(); err != nil {
				t.Fatalf("ref_features.py: %v\n%s", err, out)
			}
			t.Logf("torchvision reference: %v", time.Since(start).Round(time.Millisecond))
			start = time.Now()
			svc := newCPUService(t, nil, ModelSpec{Name: c.model, Path: testenv.Model(t, c.model)})
			m := svc.reg.Load().models[c.model]
			ctx := context.Background()
			for _, lc := range c.layers {
				l, ok := m.Lookup(lc.layer)
				if !ok || !slices.Equal(l.Shape, lc.shape) {
					t.Fatalf("%s: %+v, want shape %v", lc.layer, l, lc.shape)
				}
				ref := func(i int) []float32 {
					_, r := readNPY(t, filepath.Join(refDir, strconv.Itoa(i)+"."+lc.module+".npy"))
					return r
				}
				// Same weights: the ONNX layer on torchvision's input tensors.
				out := make([]float32, l.Elements())
				for i := range min(2, len(images)) {
					_, in := readNPY(t, filepath.Join(refDir, strconv.Itoa(i)+".input.npy"))
					if err := (ortRunner{pool: svc.pool}).run(ctx, segment{m: m, l: l}, 1, in, out); err != nil {
						t.Fatal(err)
					}
					if cs := cosine(out, ref(i)); cs < 0.99999 {
						t.Fatalf("%s on torchvision's input %d: cosine %.6f with %s", lc.layer, i, cs, lc.module)
					}
				}
				// End to end, all images at once.
				errs := make([]error, len(images))
				got := make([][]byte, len(images))
				done := make(chan struct{})
				for i, p := range images {
					go func() {
						got[i], errs[i] = svc.Extract(ctx, Request{Model: c.model, Layer: l.Index, Key: p, Priority: Background,
							Fetch: func(context.Context) ([]byte, error) { return os.ReadFile(p) }})
						done <- struct{}{}
					}()
				}
				for range images {
					<-done
				}
				var sum float64
				worst := 1.0
				for i, p := range images {
					if errs[i] != nil {
						t.Fatalf("%s %s: %v", lc.layer, p, errs[i])
					}
					shape, dt, feat, err := api.DecodeNPY(got[i])
					if err != nil {
						t.Fatal(err)
					}
					if dt != Float32 || !slices.Equal(shape, l.Shape) {
						t.Fatalf("%s %s: shape %v dtype %s", lc.layer, p, shape, dt)
					}
					cs := cosine(feat, ref(i))
					sum += cs
					worst = min(worst, cs)
					if cs < 0.995 {
						t.Errorf("%s %s: cosine %.6f < 0.995", lc.layer, p, cs)
					}
				}
				mean := sum / float64(len(images))
				t.Logf("%s %s (%s): %d images, mean cosine %.6f, worst %.6f (%v)", c.model, lc.layer, lc.module, len(images), mean, worst, time.Since(start).Round(time.Millisecond))
				start = time.Now()
				if mean < 0.999 {
					t.Errorf("%s: mean cosine %.6f < 0.999", lc.layer, mean)
				}
			}
		})
	}
}
