package extractor

import (
	"math"
	"os"
	"slices"
	"testing"

	"github.com/featurefs/featurefs/extractor/graph"
	"github.com/featurefs/featurefs/test/testenv"
)

// Loading a model takes its shapes from the graph's own shape inference
// (goShapes) and builds an ONNX Runtime session only for the tensors that
// inference leaves unknown (ortShapes). For the models the tests export,
// transformers included (ViT folds the batch into the attention heads,
// Swin and MaxViT into their windows), inference leaves nothing, and its
// per-sample shapes of the input and of every layer equal ONNX Runtime's.
func TestGoShapesEqualONNXRuntimes(t *testing.T) {
	if err := initORT(testenv.ORTLib(t)); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"resnet18", "resnet50", "vit_b_16", "swin_t", "maxvit_t"} {
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(testenv.Model(t, name))
			if err != nil {
				t.Fatal(err)
			}
			g, err := graph.Parse(data)
			if err != nil {
				t.Fatal(err)
			}
			input, _, err := checkInput(g, DefaultPreprocess())
			if err != nil {
				t.Fatal(err)
			}
			gl, err := g.Layers()
			if err != nil {
				t.Fatal(err)
			}
			got, missing := goShapes(g, input, gl, g.NodeOutputs(), 0)
			if len(missing) > 0 {
				t.Errorf("the graph's shape inference leaves %d tensors to ONNX Runtime, the first %q", len(missing), missing[0])
			}
			tensors := []string{input}
			for _, l := range gl {
				tensors = append(tensors, l.Tensor)
			}
			want, err := ortShapes(g, input, tensors)
			if err != nil {
				t.Fatal(err)
			}
			for _, tensor := range tensors {
				if w := want[tensor]; w == nil || !slices.Equal(got[tensor], w) {
					t.Errorf("%s: graph inference %v, ONNX Runtime %v", tensor, got[tensor], w)
				}
			}
		})
	}
}

// A graph that fixes its batch (here at 1 and at 3) lists the same layers,
// per-sample shapes and FLOPs as the same network with a symbolic batch:
// shape inference runs at the fixed batch, and its counts are divided by it.
func TestFixedBatchLayersMatchSymbolic(t *testing.T) {
	if err := initORT(testenv.ORTLib(t)); err != nil {
		t.Fatal(err)
	}
	load := func(name string) *model {
		m, err := loadModel(ModelSpec{Name: name, Path: testenv.OddModel(t, name)})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	want := load("tiny")
	if want.FixedBatch != 0 || len(want.Layers) == 0 || want.Layers[len(want.Layers)-1].CumGFLOPs <= 0 {
		t.Fatalf("tiny: fixed batch %d, layers %+v", want.FixedBatch, want.Layers)
	}
	for _, name := range []string{"batch1", "batch3"} {
		m := load(name)
		if m.FixedBatch == 0 || len(m.Layers) != len(want.Layers) {
			t.Fatalf("%s: fixed batch %d, %d layers, want %d", name, m.FixedBatch, len(m.Layers), len(want.Layers))
		}
		for i, l := range m.Layers {
			w := want.Layers[i]
			if !slices.Equal(l.Shape, w.Shape) || l.Bytes != w.Bytes || math.Abs(l.CumGFLOPs-w.CumGFLOPs) > 1e-12 {
				t.Errorf("%s layer%d: shape %v, %d bytes, %g GFLOPs; symbolic batch: %v, %d bytes, %g GFLOPs",
					name, i, l.Shape, l.Bytes, l.CumGFLOPs, w.Shape, w.Bytes, w.CumGFLOPs)
			}
		}
	}
}
