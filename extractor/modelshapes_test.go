package extractor

import (
	"os"
	"slices"
	"testing"

	"github.com/featurefs/featurefs/extractor/graph"
	"github.com/featurefs/featurefs/test/testenv"
)

// Loading a model takes its shapes from the graph's own shape inference
// (goShapes) and builds an ONNX Runtime session for them only when that
// inference falls short (ortShapes). Both must give the same per-sample
// shape of the input, of every layer and of every node output, for the
// models the tests export.
func TestGoShapesEqualONNXRuntimes(t *testing.T) {
	if err := initORT(testenv.ORTLib(t)); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"resnet18", "resnet50"} {
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
			outs := g.NodeOutputs()
			got, ok := goShapes(g, input, gl, outs)
			if !ok {
				t.Fatal("the graph's shape inference misses a tensor: loading falls back to ONNX Runtime")
			}
			want, err := ortShapes(g, input, gl, outs)
			if err != nil {
				t.Fatal(err)
			}
			for _, tensor := range append([]string{input}, outs...) {
				if w, ok := want[tensor]; ok && !slices.Equal(got[tensor], w) {
					t.Errorf("%s: graph inference %v, ONNX Runtime %v", tensor, got[tensor], w)
				}
			}
			for _, l := range gl {
				if w := want[l.Tensor]; w == nil || !slices.Equal(got[l.Tensor], w) {
					t.Errorf("layer %d (%s): graph inference %v, ONNX Runtime %v", l.Index, l.Tensor, got[l.Tensor], w)
				}
			}
		})
	}
}
