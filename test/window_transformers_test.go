package test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/featurefs/featurefs/test/testenv"
)

// TestWindowTransformersLoad: torchvision's Swin-T and MaxViT-T (random
// weights, opset 17, dynamic batch) are listed by `featurefs layers`,
// extracted by `featurefs extract` and served by a kernel mount, whose
// features equal extract's (issue 24, item 7). Before, all three refused
// them: "onnx runtime shape info: ... Type (tensor(float)) of output arg
// (.../Shape_6_output_0) ... does not match expected type (tensor(int64))",
// exit 4 from extract. Their fidelity against torchvision is
// extractor.TestTransformersMatchTorchvision.
func TestWindowTransformersLoad(t *testing.T) {
	src := t.TempDir()
	writeJPEGs(t, src, 2)
	for _, c := range []struct {
		model  string
		layers int    // rows of `featurefs layers`
		layer  string // the layer read
		shape  []int64
		tensor string
	}{
		{"swin_t", 36, "layer11", []int64{28, 28, 192}, "/features/features.3/features.3.1/Add_1_output_0"},
		{"maxvit_t", 105, "layer5", []int64{64, 49, 64}, "/blocks.0/layers.0/layers/window_attention/Add_output_0"},
	} {
		t.Run(c.model, func(t *testing.T) {
			model := testenv.Model(t, c.model)
			r := runCLI(t, 2*time.Minute, nil, "layers", model)
			if r.Code != 0 {
				t.Fatalf("featurefs layers: %s", r)
			}
			rows := lines(r.Stdout)[2:]
			if len(rows) != c.layers {
				t.Fatalf("featurefs layers: %d layers, want %d:\n%s", len(rows), c.layers, r.Stdout)
			}
			var row []string
			for _, l := range rows {
				if f := strings.Fields(l); len(f) >= 4 && f[1] == c.layer {
					row = f
				}
			}
			if row == nil || row[2] != c.tensor {
				t.Fatalf("featurefs layers: %s is %q, want %s:\n%s", c.layer, row, c.tensor, r.Stdout)
			}

			out := t.TempDir()
			img := filepath.Join(src, "d", "img0.jpg")
			r = runCLI(t, 3*time.Minute, nil, "extract", "--model", model, "--layer", c.layer, "--device", "cpu", "-o", out, img)
			if r.Code != 0 {
				t.Fatalf("featurefs extract: %s", r)
			}
			want := readNPY(t, filepath.Join(out, "img0.npy"))
			if !slices.Equal(want.Shape, c.shape) {
				t.Fatalf("extract: shape %v, want %v", want.Shape, c.shape)
			}

			m := testMount(t, mountConfig{Source: src, NoModel: true, Args: []string{"--model", c.model + "=" + model}})
			table, err := os.ReadFile(m.Path("features", c.model, "layers"))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(table), c.tensor) {
				t.Errorf("the mount's layers file does not list %s:\n%s", c.tensor, table)
			}
			got := readNPY(t, m.Path("features", c.model, c.layer, "d", "img0.npy"))
			if !slices.Equal(got.Shape, c.shape) {
				t.Fatalf("mount: shape %v, want %v", got.Shape, c.shape)
			}
			if worst, ok := closeEnough(got.Data, want.Data); !ok {
				t.Errorf("mount vs extract: largest difference %g", worst)
			}
		})
	}
}
