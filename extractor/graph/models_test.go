package graph

// Tests on torchvision models exported by scripts/export_model.py, checked
// against the layer lists featurefs promises (docs/LAYERS.md) and against
// ONNX Runtime.

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/featurefs/featurefs/test/testenv"
)

// loadModel exports (or reuses) a torchvision model and parses it.
func loadModel(t testing.TB, name string) (*Model, []byte) {
	t.Helper()
	data, err := os.ReadFile(testenv.Model(t, name))
	if err != nil {
		t.Fatal(err)
	}
	m, err := Parse(data)
	if err != nil {
		t.Fatalf("Parse(%s): %v", name, err)
	}
	return m, data
}

func layerTensors(ls []Layer) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.Tensor
	}
	return out
}

// resnetBlocks lists the output tensors of torchvision ResNet blocks: the
// last ReLU of each block (relu_2 in bottlenecks, relu_1 in basic blocks).
func resnetBlocks(counts [4]int, relu string) []string {
	var out []string
	for s, n := range counts {
		for b := 0; b < n; b++ {
			out = append(out, fmt.Sprintf("/layer%d/layer%d.%d/%s/Relu_output_0", s+1, s+1, b, relu))
		}
	}
	return out
}

// TestResNet50Layers checks ResNet-50's layer list exactly.
func TestResNet50Layers(t *testing.T) {
	m, _ := loadModel(t, "resnet50")
	if m.Input() != "input" || m.Output() != "output" {
		t.Fatalf("Input/Output = %q/%q, want input/output", m.Input(), m.Output())
	}
	ls, err := m.Layers()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/relu/Relu_output_0", "/maxpool/MaxPool_output_0"}
	want = append(want, resnetBlocks([4]int{3, 4, 6, 3}, "relu_2")...)
	want = append(want, "/Flatten_output_0", "output")
	if got := layerTensors(ls); !slices.Equal(got, want) {
		t.Fatalf("layers:\n got %q\nwant %q", got, want)
	}
	for i, l := range ls {
		if l.Index != i {
			t.Errorf("layer %d has Index %d", i, l.Index)
		}
	}
	// layer0 = conv1+relu, layer18 = avgpool+flatten.
	if got := ls[0].Merged; !slices.Equal(got, []string{"/conv1/Conv_output_0", "/relu/Relu_output_0"}) {
		t.Errorf("layer0 merges %q", got)
	}
	if got := ls[18].Merged; !slices.Equal(got, []string{"/avgpool/GlobalAveragePool_output_0", "/Flatten_output_0"}) {
		t.Errorf("layer18 merges %q", got)
	}
	wantShapes := map[int][]int64{0: {64, 112, 112}, 1: {64, 56, 56}, 12: {1024, 14, 14}, 17: {2048, 7, 7}, 18: {2048}, 19: {1000}}
	for i, s := range wantShapes {
		if !slices.Equal(ls[i].Shape, s) {
			t.Errorf("layer%d shape %v, want %v", i, ls[i].Shape, s)
		}
	}
	if !strings.Contains(ls[12].Tensor, "layer3.3") {
		t.Errorf("layer12 = %q, want the output of layer3.3", ls[12].Tensor)
	}

	shapes, err := m.Shapes()
	if err != nil {
		t.Fatal(err)
	}
	fl := m.CumulativeFLOPs(shapes)
	g := fl["output"] / 1e9
	// torchvision documents 4.09 GMACs for ResNet-50: 8.2 GFLOPs.
	if g < 8.0 || g > 8.4 {
		t.Errorf("cumulative GFLOPs at the output = %.3f, want 8.0..8.4", g)
	}
	prev := -1.0
	for _, l := range ls {
		if fl[l.Tensor] <= prev {
			t.Errorf("cumulative FLOPs not increasing at %s: %.0f after %.0f", l.Tensor, fl[l.Tensor], prev)
		}
		prev = fl[l.Tensor]
	}
	if fl[m.Input()] != 0 {
		t.Errorf("FLOPs at the input = %v, want 0", fl[m.Input()])
	}
	// Extra shapes only fill in tensors inference does not know: a wrong
	// fc shape changes nothing.
	over := map[string][]int64{"output": {2000}}
	if d := m.CumulativeFLOPs(over)["output"] - fl["output"]; d != 0 {
		t.Errorf("an extra fc shape changed FLOPs by %.0f, want 0", d)
	}
}

// TestModelLayers checks the block structure of the other models.
func TestModelLayers(t *testing.T) {
	vggConvs := []int{1, 3, 6, 8, 11, 13, 15, 18, 20, 22, 25, 27, 29} // ReLU indices in features
	var vgg []string
	for i, r := range vggConvs {
		vgg = append(vgg, fmt.Sprintf("/features/features.%d/Relu_output_0", r))
		if i == 1 || i == 3 || i == 6 || i == 9 {
			vgg = append(vgg, fmt.Sprintf("/features/features.%d/MaxPool_output_0", r+1))
		}
	}
	vgg = append(vgg, "/Flatten_output_0", "/classifier/classifier.1/Relu_output_0", "/classifier/classifier.4/Relu_output_0", "output")

	dense := []string{"/features/relu0/Relu_output_0", "/features/pool0/MaxPool_output_0"}
	for i := 1; i <= 3; i++ {
		dense = append(dense,
			fmt.Sprintf("/features/transition%d/relu/Relu_output_0", i), // end of dense block i (+norm, relu)
			fmt.Sprintf("/features/transition%d/pool/Pad_output_0", i),  // transition conv (+zero Pad)
			fmt.Sprintf("/features/transition%d/pool/AveragePool_output_0", i))
	}
	dense = append(dense, "/Relu_output_0", "/Flatten_output_0", "output")

	vit := []string{"/Transpose_output_0", "/encoder/Add_output_0"} // patches; +class token +position
	for i := 0; i < 12; i++ {
		vit = append(vit, fmt.Sprintf("/encoder/layers/encoder_layer_%d/Add_output_0", i)) // after attention
		if i < 11 {
			vit = append(vit, fmt.Sprintf("/encoder/layers/encoder_layer_%d/Add_1_output_0", i)) // after MLP
		}
	}
	vit = append(vit, "/encoder/ln/LayerNormalization_output_0", "/Gather_4_output_0", "output")

	// Swin-T: patch embedding (+norm); per block, after the attention and
	// after the MLP residual (the last block's MLP merges with the final
	// norm and permute); per patch merging, its Pad, concat+norm, reduction.
	swin := []string{"/features/features.0/features.0.2/LayerNormalization_output_0"}
	for stage, depth := range []int{2, 2, 6, 2} {
		f := 2*stage + 1
		if stage > 0 {
			for _, t := range []string{"Pad_output_0", "norm/LayerNormalization_output_0", "reduction/MatMul_output_0"} {
				swin = append(swin, fmt.Sprintf("/features/features.%d/%s", f-1, t))
			}
		}
		for b := 0; b < depth; b++ {
			swin = append(swin, fmt.Sprintf("/features/features.%d/features.%d.%d/Add_output_0", f, f, b))
			if stage < 3 || b < depth-1 {
				swin = append(swin, fmt.Sprintf("/features/features.%d/features.%d.%d/Add_1_output_0", f, f, b))
			}
		}
	}
	swin = append(swin, "/permute/Transpose_output_0", "/flatten/Flatten_output_0", "output")

	// MaxViT-T: the stem's conv, GELU and conv; per layer the MBConv
	// residual, window attention (partition, attention residual, MLP
	// residual, departition) and grid attention (partition+swap, attention
	// residual, MLP residual+swap back, departition); the classifier.
	maxvit := []string{"/stem/stem.0/stem.0.0/Conv_output_0", "/stem/stem.0/stem.0.2/Mul_1_output_0", "/stem/stem.1/stem.1.0/Conv_output_0"}
	for blk, depth := range []int{2, 2, 5, 2} {
		for l := 0; l < depth; l++ {
			p := fmt.Sprintf("/blocks.%d/layers.%d/layers/", blk, l)
			for _, t := range []string{"MBconv/Add_output_0",
				"window_attention/partition_op/Reshape_1_output_0", "window_attention/Add_output_0",
				"window_attention/Add_1_output_0", "window_attention/departition_op/Reshape_1_output_0",
				"grid_attention/partition_swap/Transpose_output_0", "grid_attention/Add_output_0",
				"grid_attention/departition_swap/Transpose_output_0", "grid_attention/departition_op/Reshape_1_output_0"} {
				maxvit = append(maxvit, p+t)
			}
		}
	}
	maxvit = append(maxvit, "/classifier/classifier.2/LayerNormalization_output_0", "/classifier/classifier.4/Tanh_output_0", "output")

	resnet18 := []string{"/relu/Relu_output_0", "/maxpool/MaxPool_output_0"}
	resnet18 = append(resnet18, resnetBlocks([4]int{2, 2, 2, 2}, "relu_1")...)
	resnet18 = append(resnet18, "/Flatten_output_0", "output")

	cases := []struct {
		model string
		want  []string
		// shapes of some layers, checked against ONNX Runtime anyway
		shapes map[int][]int64
		gflops [2]float64 // cumulative at the output
	}{
		{"resnet18", resnet18, map[int][]int64{9: {512, 7, 7}, 10: {512}}, [2]float64{3.5, 3.8}},
		{"vgg16", vgg, map[int][]int64{0: {64, 224, 224}, 17: {25088}, 18: {4096}}, [2]float64{30, 32}},
		{"densenet121", dense, map[int][]int64{2: {256, 56, 56}, 3: {128, 56, 56}, 4: {128, 28, 28}, 11: {1024, 7, 7}}, [2]float64{5.5, 6}},
		{"vit_b_16", vit, map[int][]int64{0: {196, 768}, 1: {197, 768}, 26: {768}}, [2]float64{34.5, 36}},
		// torchvision lists 4.49 and 5.56 billion multiply-adds.
		{"swin_t", swin, map[int][]int64{0: {56, 56, 96}, 6: {28, 28, 384}, 7: {28, 28, 192}, 33: {768, 7, 7}, 34: {768}}, [2]float64{8.9, 9.3}},
		{"maxvit_t", maxvit, map[int][]int64{2: {64, 112, 112}, 3: {64, 56, 56}, 4: {64, 49, 64}, 10: {49, 64, 64}, 102: {512}}, [2]float64{11.0, 11.6}},
	}
	for _, c := range cases {
		t.Run(c.model, func(t *testing.T) {
			m, _ := loadModel(t, c.model)
			ls, err := m.Layers()
			if err != nil {
				t.Fatal(err)
			}
			if got := layerTensors(ls); !slices.Equal(got, c.want) {
				t.Fatalf("layers:\n got %q\nwant %q", got, c.want)
			}
			for i, s := range c.shapes {
				if !slices.Equal(ls[i].Shape, s) {
					t.Errorf("layer%d (%s) shape %v, want %v", i, ls[i].Tensor, ls[i].Shape, s)
				}
			}
			g := m.CumulativeFLOPs(nil)["output"] / 1e9
			if g < c.gflops[0] || g > c.gflops[1] {
				t.Errorf("GFLOPs at the output = %.3f, want %v", g, c.gflops)
			}
		})
	}
}

// TestLayerShapesMatchORT runs each model once, pruned to emit every layer
// tensor and every weighted product (MatMul, Gemm, Einsum), at batch 2, and
// compares ONNX Runtime's shapes with the inferred per-sample shapes of the
// layers and with the inferred elements per sample of the products (which
// the FLOPs count, wherever the batch axis is: ViT folds it into the heads,
// Swin and MaxViT into the windows); every layer tensor must also be a
// valid split point.
func TestLayerShapesMatchORT(t *testing.T) {
	for _, name := range []string{"resnet50", "resnet18", "densenet121", "vit_b_16", "vgg16", "swin_t", "maxvit_t"} {
		t.Run(name, func(t *testing.T) {
			m, _ := loadModel(t, name)
			ls, err := m.Layers()
			if err != nil {
				t.Fatal(err)
			}
			tensors := layerTensors(ls)
			var products []string
			for _, n := range m.nodes {
				switch n.opType {
				case "MatMul", "Gemm", "Einsum":
					if !slices.Contains(tensors, n.outputs[0]) {
						products = append(products, n.outputs[0])
					}
				}
			}
			all, err := m.Prune(append(slices.Clone(tensors), products...)...)
			if err != nil {
				t.Fatal(err)
			}
			out := runORT(t, all, m.Input(), []int64{2, 3, 224, 224}, randomInput(1, 2, 3, 224, 224))
			for _, l := range ls {
				o, ok := out[l.Tensor]
				if !ok {
					t.Fatalf("ORT did not return %s", l.Tensor)
				}
				if len(o.shape) == 0 || o.shape[0] != 2 || !slices.Equal(o.shape[1:], l.Shape) {
					t.Errorf("layer%d %s: ORT shape %v, inferred per-sample %v", l.Index, l.Tensor, o.shape, l.Shape)
				}
			}
			elems := m.SampleElems()
			for _, p := range products {
				o, ok := out[p]
				if !ok {
					t.Fatalf("ORT did not return %s", p)
				}
				if n := numel(o.shape); n != 2*elems[p] {
					t.Errorf("%s: ORT shape %v at batch 2, inferred %d elements per sample", p, o.shape, elems[p])
				}
			}
			t.Logf("%d layers, %d products checked", len(ls), len(products))
			for i := 0; i+1 < len(ls); i++ {
				if _, err := m.PruneFrom(ls[i].Tensor, ls[i+1].Tensor, m.Output()); err != nil {
					t.Errorf("PruneFrom(layer%d): %v", i, err)
				}
			}
		})
	}
}

// TestPruneResNet50 checks pruned models in ONNX Runtime: declared and
// computed shapes, equality with the full model, and split execution.
func TestPruneResNet50(t *testing.T) {
	m, data := loadModel(t, "resnet50")
	ls, err := m.Layers()
	if err != nil {
		t.Fatal(err)
	}
	initORT(t)
	const batch = 2
	inShape := []int64{batch, 3, 224, 224}
	x := randomInput(7, inShape...)

	// (a) per-sample output shapes of layers 0, 1, 12, 18, 19 as
	// docs/LAYERS.md lists them, both declared by the pruned model and
	// computed by ORT.
	want := map[int][]int64{0: {64, 112, 112}, 1: {64, 56, 56}, 12: {1024, 14, 14}, 18: {2048}, 19: {1000}}
	pruned := map[int][]byte{}
	for _, i := range []int{0, 1, 12, 18, 19} {
		p, err := m.Prune(ls[i].Tensor)
		if err != nil {
			t.Fatal(err)
		}
		pruned[i] = p
		ins, outs, err := ortInfo(p)
		if err != nil {
			t.Fatalf("layer%d: ORT rejects the pruned model: %v", i, err)
		}
		if len(ins) != 1 || ins[0].name != "input" || len(outs) != 1 || outs[0].name != ls[i].Tensor {
			t.Fatalf("layer%d: pruned model has inputs %v outputs %v", i, ins, outs)
		}
		if d := outs[0].dims; len(d) == 0 || d[0] != -1 || !slices.Equal(d[1:], want[i]) {
			t.Errorf("layer%d: declared output dims %v, want [-1 %v]", i, d, want[i])
		}
		res := runORT(t, p, "input", inShape, x)[ls[i].Tensor]
		if !slices.Equal(res.shape, append([]int64{batch}, want[i]...)) {
			t.Errorf("layer%d: ORT output shape %v, want batch %d x %v", i, res.shape, batch, want[i])
		}
		pm, err := Parse(p)
		if err != nil {
			t.Fatalf("pruned model does not parse: %v", err)
		}
		if pm.Output() != ls[i].Tensor || pm.Input() != "input" {
			t.Errorf("pruned model: input %q output %q", pm.Input(), pm.Output())
		}
		if i < 19 && len(pm.NodeOutputs()) >= len(m.NodeOutputs()) {
			t.Errorf("layer%d: pruned model keeps %d of %d node outputs", i, len(pm.NodeOutputs()), len(m.NodeOutputs()))
		}
	}

	// (b) the full model and the layer19-pruned model agree.
	full := runORT(t, data, "input", inShape, x)["output"]
	p19 := runORT(t, pruned[19], "input", inShape, x)["output"]
	if d := maxAbsDiff(t, full.data, p19.data); d != 0 {
		t.Errorf("full vs pruned-at-layer19 outputs differ by %g", d)
	}
	// Pruning at the output keeps the model byte for byte (torch writes no
	// value_info and lists outputs last).
	if !slices.Equal(pruned[19], data) {
		t.Errorf("Prune(output) is not the original model (%d vs %d bytes)", len(pruned[19]), len(data))
	}

	// (c) split execution: layer12 features fed to PruneFrom(layer12, layer18)
	// equal the layer18 features computed in one go.
	l12 := runORT(t, pruned[12], "input", inShape, x)[ls[12].Tensor]
	tail, err := m.PruneFrom(ls[12].Tensor, ls[18].Tensor)
	if err != nil {
		t.Fatal(err)
	}
	ins, _, err := ortInfo(tail)
	if err != nil {
		t.Fatal(err)
	}
	if len(ins) != 1 || ins[0].name != ls[12].Tensor || !slices.Equal(ins[0].dims, []int64{-1, 1024, 14, 14}) {
		t.Fatalf("PruneFrom inputs %v, want %s [-1 1024 14 14]", ins, ls[12].Tensor)
	}
	split := runORT(t, tail, ls[12].Tensor, l12.shape, l12.data)[ls[18].Tensor]
	direct := runORT(t, pruned[18], "input", inShape, x)[ls[18].Tensor]
	// Different graphs may fuse and order float operations differently:
	// allow float32 rounding relative to the features' magnitude.
	scale := maxAbsDiff(t, direct.data, make([]float32, len(direct.data)))
	if d := maxAbsDiff(t, split.data, direct.data); d > 1e-5*scale {
		t.Errorf("split layer18 differs from direct layer18 by %g (max |x| %g)", d, scale)
	}
	t.Logf("split vs direct layer18: max |x| %g", scale)
	if !slices.Equal(split.shape, []int64{batch, 2048}) {
		t.Errorf("split output shape %v", split.shape)
	}
}

// TestPruneFromErrors checks the split-point validation on ResNet-50.
func TestPruneFromErrors(t *testing.T) {
	m, _ := loadModel(t, "resnet50")
	// Inside the first bottleneck the shortcut still needs the max-pool
	// output: conv1's output does not separate the block from the input.
	_, err := m.PruneFrom("/layer1/layer1.0/conv1/Conv_output_0", "/layer1/layer1.0/relu_2/Relu_output_0")
	if !errors.Is(err, ErrNotCut) {
		t.Errorf("PruneFrom inside a block: err = %v, want ErrNotCut", err)
	}
	if _, err := m.Prune("no-such-tensor"); !errors.Is(err, ErrUnknownTensor) {
		t.Errorf("Prune(unknown): err = %v, want ErrUnknownTensor", err)
	}
	if _, err := m.PruneFrom("no-such-tensor", "output"); !errors.Is(err, ErrUnknownTensor) {
		t.Errorf("PruneFrom(unknown): err = %v, want ErrUnknownTensor", err)
	}
	if _, err := m.Prune(); err == nil {
		t.Error("Prune() with no outputs succeeded")
	}
	// PruneFrom the graph input is Prune.
	a, err := m.PruneFrom("input", "/maxpool/MaxPool_output_0")
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Prune("/maxpool/MaxPool_output_0")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a, b) {
		t.Error("PruneFrom(input, x) != Prune(x)")
	}
}
