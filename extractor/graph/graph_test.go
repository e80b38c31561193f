package graph

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

func TestParseSynthetic(t *testing.T) {
	m, err := Parse(smallCNN())
	if err != nil {
		t.Fatal(err)
	}
	if m.Input() != "x" || m.Output() != "y" {
		t.Errorf("Input/Output = %q/%q", m.Input(), m.Output())
	}
	// The file lists Add before the Conv it reads: NodeOutputs is topological.
	want := []string{"c1o", "r1o", "c2o", "addo", "r2o", "mpo", "gapo", "flato", "y"}
	if got := m.NodeOutputs(); !slices.Equal(got, want) {
		t.Errorf("NodeOutputs = %q, want %q", got, want)
	}
	if m.OpsetVersion() != 17 {
		t.Errorf("opset %d", m.OpsetVersion())
	}
	if op, name, ok := m.Producer("addo"); !ok || op != "Add" || name != "add" {
		t.Errorf("Producer(addo) = %q %q %v", op, name, ok)
	}
}

func TestLayersSynthetic(t *testing.T) {
	m, err := Parse(smallCNN())
	if err != nil {
		t.Fatal(err)
	}
	// c2o is not a cut point: the shortcut keeps r1o live beside it.
	if got, want := m.CutPoints(), []string{"c1o", "r1o", "addo", "r2o", "mpo", "gapo", "flato", "y"}; !slices.Equal(got, want) {
		t.Errorf("CutPoints = %q, want %q", got, want)
	}
	ls, err := m.Layers()
	if err != nil {
		t.Fatal(err)
	}
	type lay struct {
		tensor string
		shape  []int64
		merged []string
	}
	want := []lay{
		{"r1o", []int64{4, 8, 8}, []string{"c1o", "r1o"}},
		{"r2o", []int64{4, 8, 8}, []string{"addo", "r2o"}}, // Add reads two activations: new layer
		{"mpo", []int64{4, 4, 4}, []string{"mpo"}},
		{"flato", []int64{4}, []string{"gapo", "flato"}}, // Reshape by a constant shape
		{"y", []int64{3}, []string{"y"}},
	}
	if len(ls) != len(want) {
		t.Fatalf("got %d layers %+v, want %d", len(ls), ls, len(want))
	}
	for i, w := range want {
		l := ls[i]
		if l.Index != i || l.Tensor != w.tensor || !slices.Equal(l.Shape, w.shape) || !slices.Equal(l.Merged, w.merged) {
			t.Errorf("layer %d = %+v, want %+v", i, l, w)
		}
	}
	// Per-sample FLOPs by the documented convention: conv 2*out*Cin*k*k,
	// Gemm 2*M*N*K, others one per output element.
	fl := m.CumulativeFLOPs(nil)
	conv1 := 2.0 * 4 * 8 * 8 * 2 * 3 * 3
	if fl["c1o"] != conv1 {
		t.Errorf("FLOPs(c1o) = %v, want %v", fl["c1o"], conv1)
	}
	// c2o depends on c1, r1 and c2 but not on anything after.
	if want := conv1 + 256 + 2*256*4; fl["c2o"] != want {
		t.Errorf("FLOPs(c2o) = %v, want %v", fl["c2o"], want)
	}
	if want := conv1 + 256 + 2*256*4 + 256 + 256 + 64 + 4 + 4 + 2*3*4; fl["y"] != want {
		t.Errorf("FLOPs(y) = %v, want %v", fl["y"], want)
	}
}

func TestPruneSynthetic(t *testing.T) {
	orig := smallCNN()
	m, err := Parse(orig)
	if err != nil {
		t.Fatal(err)
	}
	p, err := m.Prune("r2o")
	if err != nil {
		t.Fatal(err)
	}
	pm, err := Parse(p)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := pm.NodeOutputs(), []string{"c1o", "r1o", "c2o", "addo", "r2o"}; !slices.Equal(got, want) {
		t.Errorf("pruned NodeOutputs = %q, want %q", got, want)
	}
	if got := sortedKeys(pm.inits); !slices.Equal(got, []string{"w1", "w2"}) {
		t.Errorf("pruned initializers = %q", got)
	}
	if pm.Output() != "r2o" || len(pm.outputs) != 1 || pm.Input() != "x" || len(pm.inputs) != 1 {
		t.Errorf("pruned io: %q %q", pm.Input(), pm.Outputs())
	}
	o := pm.outputs[0]
	if o.elem != dtFloat || len(o.dims) != 4 || o.dims[0].param != "batch" || o.dims[1].value != 4 || o.dims[3].value != 8 {
		t.Errorf("pruned output value info %+v", o)
	}
	// Fields the package does not interpret survive byte for byte.
	for _, s := range []string{"featurefs-test", "graph doc string"} {
		if !bytes.Contains(p, []byte(s)) {
			t.Errorf("pruned model lost %q", s)
		}
	}
	if !bytes.Equal(fieldBytes(t, p, 14), fieldBytes(t, orig, 14)) || !bytes.Equal(fieldBytes(t, p, fModelOpset), fieldBytes(t, orig, fModelOpset)) {
		t.Error("metadata or opset changed")
	}

	tail, err := m.PruneFrom("r1o", "flato")
	if err != nil {
		t.Fatal(err)
	}
	tm, err := Parse(tail)
	if err != nil {
		t.Fatal(err)
	}
	if tm.Input() != "r1o" || tm.Output() != "flato" {
		t.Errorf("PruneFrom io %q -> %q", tm.Input(), tm.Output())
	}
	if got, want := tm.NodeOutputs(), []string{"c2o", "addo", "r2o", "mpo", "gapo", "flato"}; !slices.Equal(got, want) {
		t.Errorf("PruneFrom NodeOutputs = %q, want %q", got, want)
	}
	if got := sortedKeys(tm.inits); !slices.Equal(got, []string{"shape", "w2"}) {
		t.Errorf("PruneFrom initializers = %q", got)
	}
	if _, err := m.PruneFrom("c2o", "y"); !errors.Is(err, ErrNotCut) {
		t.Errorf("PruneFrom(c2o): %v, want ErrNotCut", err)
	}
	if _, err := m.PruneFrom("w1", "y"); err == nil {
		t.Error("PruneFrom(initializer) succeeded")
	}
	// Several outputs, deduplicated, in the order asked.
	multi, err := m.Prune("mpo", "r1o", "mpo")
	if err != nil {
		t.Fatal(err)
	}
	mm, err := Parse(multi)
	if err != nil {
		t.Fatal(err)
	}
	if got := mm.Outputs(); !slices.Equal(got, []string{"mpo", "r1o"}) {
		t.Errorf("outputs %q", got)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// fieldBytes returns the concatenated raw fields num of a message.
func fieldBytes(t *testing.T, b []byte, num protowire.Number) []byte {
	t.Helper()
	fs, err := fields(b)
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	for _, f := range fs {
		if f.num == num {
			out = append(out, f.raw...)
		}
	}
	return out
}

func TestParseErrors(t *testing.T) {
	good := smallCNN()
	cycle := tGraph{
		inputs:  [][]byte{encVI("x", -1, 4)},
		outputs: [][]byte{encVI("b", -1, 4)},
		nodes: [][]byte{
			encNode("Add", "a", []string{"x", "b"}, []string{"a"}),
			encNode("Relu", "b", []string{"a"}, []string{"b"}),
		},
	}
	undefined := tGraph{
		inputs:  [][]byte{encVI("x", -1, 4)},
		outputs: [][]byte{encVI("y", -1, 4)},
		nodes:   [][]byte{encNode("Add", "a", []string{"x", "nope"}, []string{"y"})},
	}
	twice := tGraph{
		inputs:  [][]byte{encVI("x", -1, 4)},
		outputs: [][]byte{encVI("y", -1, 4)},
		nodes: [][]byte{
			encNode("Relu", "a", []string{"x"}, []string{"y"}),
			encNode("Relu", "b", []string{"x"}, []string{"y"}),
		},
	}
	noOutput := tGraph{
		inputs: [][]byte{encVI("x", -1, 4)},
		nodes:  [][]byte{encNode("Relu", "a", []string{"x"}, []string{"y"})},
	}
	cases := map[string][]byte{
		"empty":          nil,
		"garbage":        []byte("not an onnx model at all"),
		"truncated":      good[:len(good)/2],
		"cycle":          encModel(cycle),
		"undefined":      encModel(undefined),
		"defined twice":  encModel(twice),
		"no output":      encModel(noOutput),
		"graph is a int": protowire.AppendVarint(protowire.AppendTag(nil, fModelGraph, protowire.VarintType), 3),
	}
	for name, b := range cases {
		if _, err := Parse(b); !errors.Is(err, ErrBadModel) {
			t.Errorf("%s: err = %v, want ErrBadModel", name, err)
		}
	}
}

// opsModel exercises shape inference on operators the torchvision models do
// not use, including opset-13+ inputs that carry axes and sizes.
func opsModel() []byte {
	i64 := func(name string, v ...int64) []byte { return encInt64Tensor(name, []int64{int64(len(v))}, v) }
	g := tGraph{
		inits: [][]byte{
			i64("sl_starts", 1), i64("sl_ends", 7), i64("sl_axes", 1), i64("sl_steps", 2),
			i64("split", 3, 5),
			i64("pads", 0, 0, 1, 0, 0, 0, 0, 2),
			i64("zero", 0),
			i64("tail", -1, 5),
			i64("ax0", 0),
			i64("tile", 2, 1, 1),
			i64("expand", 1, 1, 4, 1),
			encFloatTensor("mw", []int64{5, 3}, ones(15)),
			encFloatTensor("cw", []int64{2, 4, 3, 3}, ones(72)),
			encFloatTensor("col", []int64{1, 1, 1, 3}, ones(3)),
		},
		inputs: [][]byte{encVI("x", -1, 4, 9, 9)},
	}
	g.nodes = [][]byte{
		encNode("MaxPool", "mp", []string{"x"}, []string{"mp"}, attrInts("kernel_shape", 2, 2), attrInts("strides", 2, 2), attrInt("ceil_mode", 1)),
		encNode("AveragePool", "ap", []string{"x"}, []string{"ap"}, attrInts("kernel_shape", 3, 3), attrInts("strides", 2, 2), attrInts("pads", 1, 1, 1, 1)),
		encNode("Concat", "cat", []string{"mp", "ap"}, []string{"cat"}, attrInt("axis", 1)),
		encNode("Slice", "sl", []string{"cat", "sl_starts", "sl_ends", "sl_axes", "sl_steps"}, []string{"sl"}),
		encNode("Split", "sp", []string{"cat", "split"}, []string{"sp1", "sp2"}, attrInt("axis", 1)),
		encNode("Pad", "pad", []string{"sp2", "pads"}, []string{"pad"}),
		encNode("Transpose", "tr", []string{"pad"}, []string{"tr"}, attrInts("perm", 0, 2, 3, 1)),
		encNode("Shape", "shape", []string{"tr"}, []string{"shape"}),
		encNode("Gather", "batch", []string{"shape", "zero"}, []string{"batch"}, attrInt("axis", 0)),
		encNode("Concat", "target", []string{"batch", "tail"}, []string{"target"}, attrInt("axis", 0)),
		encNode("Reshape", "rs", []string{"tr", "target"}, []string{"rs"}),
		encNode("MatMul", "mm", []string{"rs", "mw"}, []string{"mm"}),
		encNode("ReduceMean", "rm", []string{"mm"}, []string{"rm"}, attrInts("axes", 1), attrInt("keepdims", 0)),
		encNode("Unsqueeze", "us", []string{"rm", "ax0"}, []string{"us"}),
		encNode("Tile", "tile", []string{"us", "tile"}, []string{"tiled"}),
		encNode("Conv", "conv", []string{"x", "cw"}, []string{"conv"}, attrString("auto_pad", "SAME_UPPER"), attrInts("strides", 2, 2)),
		encNode("GlobalAveragePool", "gap", []string{"conv"}, []string{"gap"}),
		encNode("Expand", "ex", []string{"gap", "expand"}, []string{"ex"}),
		encNode("Mul", "mul", []string{"ex", "col"}, []string{"mul"}),
		encNode("Squeeze", "sq", []string{"us", "ax0"}, []string{"sq"}),
		encNode("Flatten", "fl", []string{"sl"}, []string{"fl"}, attrInt("axis", 1)),
		encNode("Softmax", "sm", []string{"fl"}, []string{"sm"}, attrInt("axis", -1)),
	}
	for _, o := range []string{"sl", "sp1", "pad", "rs", "rm", "tiled", "sq", "conv", "mul", "sm"} {
		g.outputs = append(g.outputs, encodeValueInfo(o, dtFloat, false, nil))
	}
	return encModel(g)
}

// TestShapeInferenceMatchesORT compares inferred shapes with the shapes
// ONNX Runtime computes, at a batch size of 3.
func TestShapeInferenceMatchesORT(t *testing.T) {
	b := opsModel()
	m, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	inf, err := m.infer()
	if err != nil {
		t.Fatal(err)
	}
	shapes, err := m.Shapes()
	if err != nil {
		t.Fatal(err)
	}
	out := runORT(t, b, "x", []int64{3, 4, 9, 9}, randomInput(3, 3, 4, 9, 9))
	for _, name := range m.Outputs() {
		got, ok := out[name]
		if !ok {
			t.Fatalf("ORT did not return %s", name)
		}
		v1 := inf.b1[name]
		if v1 == nil {
			t.Errorf("%s: no inferred shape (ORT: %v)", name, got.shape)
			continue
		}
		// Scale the inferred batch-1 shape's batch axis to 3.
		ps, ok := shapes[name]
		if !ok {
			t.Errorf("%s: no per-sample shape", name)
			continue
		}
		if numel(got.shape) != 3*numel(ps) {
			t.Errorf("%s: ORT shape %v, inferred per-sample %v (batch-1 %v)", name, got.shape, ps, v1.shape)
		}
		want := slices.Clone(v1.shape)
		for i := range want {
			if i < len(inf.b2[name].shape) && inf.b2[name].shape[i] != want[i] {
				want[i] = 3
			}
		}
		if !slices.Equal(got.shape, want) {
			t.Errorf("%s: ORT shape %v, inferred %v at batch 1", name, got.shape, v1.shape)
		}
	}
	// Pruned to an intermediate output, the model still runs and declares the
	// inferred shape with a symbolic batch.
	p, err := m.Prune("rs")
	if err != nil {
		t.Fatal(err)
	}
	_, outs, err := ortInfo(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(outs) != 1 || !slices.Equal(outs[0].dims, []int64{-1, 42, 5}) {
		t.Errorf("declared %v, want rs [-1 42 5]", outs)
	}
}

// TestConcurrentUse runs the analyses from several goroutines on one Model
// (run with -race).
func TestConcurrentUse(t *testing.T) {
	m, err := Parse(smallCNN())
	if err != nil {
		t.Fatal(err)
	}
	want, err := m.Prune("mpo")
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			if _, err := m.Layers(); err != nil {
				errs <- err
				return
			}
			shapes, err := m.Shapes()
			if err != nil {
				errs <- err
				return
			}
			_ = m.CumulativeFLOPs(shapes)
			p, err := m.Prune("mpo")
			if err == nil && !bytes.Equal(p, want) {
				err = errors.New("Prune is not deterministic")
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
