package graph

// Element types of pruned outputs, and the shape inference that Swin-T and
// MaxViT-T need (sliced and transposed shape tables, Einsum, ScatterND).

import (
	"slices"
	"testing"

	ort "github.com/yalue/onnxruntime_go"
)

// typesModel is x[batch,2,8,8] -> SpaceToDepth (which shape inference does
// not know) -> d[batch,8,4,4], r = Relu(d), and shape arithmetic on d:
// s = Shape(d) (int64), eq = Equal(s, s) (bool), c = Cast(s, to=int32).
func typesModel() []byte {
	g := tGraph{
		inputs:  [][]byte{encVI("x", -1, 2, 8, 8)},
		outputs: [][]byte{encVI("d", -1, 8, 4, 4)},
	}
	g.nodes = [][]byte{
		encNode("SpaceToDepth", "s2d", []string{"x"}, []string{"d"}, attrInt("blocksize", 2)),
		encNode("Shape", "shape", []string{"d"}, []string{"s"}),
		encNode("Equal", "eq", []string{"s", "s"}, []string{"eq"}),
		encNode("Cast", "cast", []string{"s"}, []string{"c"}, attrInt("to", dtInt32)),
		encNode("Relu", "relu", []string{"d"}, []string{"r"}),
	}
	return encModel(g)
}

// Prune declares each exposed tensor with the element type its operator
// gives, even where shape inference knows nothing of it: a Shape output
// declared float made ONNX Runtime refuse Swin-T and MaxViT-T ("Type
// (tensor(float)) of output arg ... of node (...Shape_6) does not match
// expected type (tensor(int64))").
func TestPruneDeclaresOperatorTypes(t *testing.T) {
	m, err := Parse(typesModel())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.SampleElems()["s"]; ok {
		t.Fatal("shape inference knows SpaceToDepth: pick an operator it does not, or the test checks nothing")
	}
	p, err := m.Prune("d", "s", "eq", "c", "r")
	if err != nil {
		t.Fatal(err)
	}
	initORT(t)
	_, outs, err := ort.GetInputOutputInfoWithONNXData(p)
	if err != nil {
		t.Fatalf("ONNX Runtime refuses the pruned model: %v", err)
	}
	want := map[string]ort.TensorElementDataType{
		"d": ort.TensorElementDataTypeFloat, "s": ort.TensorElementDataTypeInt64,
		"eq": ort.TensorElementDataTypeBool, "c": ort.TensorElementDataTypeInt32,
		"r": ort.TensorElementDataTypeFloat,
	}
	for _, o := range outs {
		if o.DataType != want[o.Name] {
			t.Errorf("output %s: type %v, want %v", o.Name, o.DataType, want[o.Name])
		}
		delete(want, o.Name)
	}
	if len(want) != 0 {
		t.Errorf("outputs missing: %v", want)
	}

	// A tensor of a type the rules do not give is declared by name alone,
	// and ONNX Runtime infers its type.
	m, err = Parse(typesModel())
	if err != nil {
		t.Fatal(err)
	}
	delete(m.elemTypes(), "s")
	p, err = m.Prune("s")
	if err != nil {
		t.Fatal(err)
	}
	_, outs, err = ort.GetInputOutputInfoWithONNXData(p)
	if err != nil {
		t.Fatalf("ONNX Runtime refuses an output declared by name alone: %v", err)
	}
	if len(outs) != 1 || outs[0].Name != "s" || outs[0].DataType != ort.TensorElementDataTypeInt64 {
		t.Errorf("outputs %+v, want s int64", outs)
	}
}

// TestElemTypeRules checks the type rules on their own.
func TestElemTypeRules(t *testing.T) {
	m, err := Parse(typesModel())
	if err != nil {
		t.Fatal(err)
	}
	types := m.elemTypes()
	want := map[string]int32{"x": dtFloat, "d": dtFloat, "s": dtInt64, "eq": dtBool, "c": dtInt32, "r": dtFloat}
	for name, w := range want {
		if types[name] != w {
			t.Errorf("%s: type %d, want %d", name, types[name], w)
		}
	}
}

// Shape tables are sliced (any rank, negative steps) and transposed with
// their values, as torch's exporter computes a Pad's pads (Swin-T's window
// padding).
func TestSliceTransposeValues(t *testing.T) {
	table := &val{shape: []int64{4, 2}, dtype: dtInt64, hasVal: true, ints: []int64{0, 1, 2, 3, 4, 5, 6, 7}}
	n := &node{opType: "Slice", inputs: []string{"t", "st", "en", "ax", "sp"}}
	ints := func(v ...int64) *val {
		return &val{shape: []int64{int64(len(v))}, dtype: dtInt64, hasVal: true, ints: v}
	}
	// table[::-1] along axis 0
	v := slice(n, []*val{table, ints(-1), ints(-9223372036854775807), ints(0), ints(-1)}, 17)
	if v == nil || !slices.Equal(v.shape, []int64{4, 2}) || !v.hasVal || !slices.Equal(v.ints, []int64{6, 7, 4, 5, 2, 3, 0, 1}) {
		t.Fatalf("reversed slice = %+v", v)
	}
	// table[1:3, 1:]
	v = slice(n, []*val{table, ints(1, 1), ints(3, 2), ints(0, 1), ints(1, 1)}, 17)
	if v == nil || !slices.Equal(v.shape, []int64{2, 1}) || !slices.Equal(v.ints, []int64{3, 5}) {
		t.Fatalf("table[1:3,1:] = %+v", v)
	}
	tr := &node{opType: "Transpose", attrs: map[string]*attr{"perm": {name: "perm", ints: []int64{1, 0}}}}
	outs, err := inferTranspose(opArgs{n: tr, in: []*val{table}, opset: 17})
	if err != nil || len(outs) != 1 || !slices.Equal(outs[0].shape, []int64{2, 4}) || !slices.Equal(outs[0].ints, []int64{0, 2, 4, 6, 1, 3, 5, 7}) {
		t.Fatalf("transpose = %+v, %v", outs, err)
	}
	big := &val{shape: []int64{maxConstElems + 1}, dtype: dtInt64, hasVal: true, ints: make([]int64, maxConstElems+1)}
	outs, _ = inferTranspose(opArgs{n: &node{opType: "Transpose"}, in: []*val{big}, opset: 17})
	if len(outs) != 1 || outs[0].hasVal {
		t.Errorf("a transpose of %d values keeps them: %+v", maxConstElems+1, outs[0].shape)
	}
}

// TestEinsumShapes checks inferEinsum's shapes, and that Einsum's FLOPs
// count its summed axes.
func TestEinsumShapes(t *testing.T) {
	f := func(s ...int64) *val { return &val{shape: s, dtype: dtFloat} }
	cases := []struct {
		eq   string
		in   []*val
		want []int64 // nil: unknown
	}{
		{"bhid,bhjd->bhij", []*val{f(2, 3, 5, 8), f(2, 3, 7, 8)}, []int64{2, 3, 5, 7}},
		{"ij,jk", []*val{f(4, 5), f(5, 6)}, []int64{4, 6}},
		{"...ij,...jk->...ik", []*val{f(2, 1, 4, 5), f(3, 5, 6)}, []int64{2, 3, 4, 6}},
		{"ii->i", []*val{f(3, 3)}, []int64{3}},
		{"ij->ji", []*val{f(3, 4)}, []int64{4, 3}},
		{"ij,jk->ik", []*val{f(4, 5), f(6, 7)}, nil}, // j differs
		{"ijk->ij", []*val{f(3, 4)}, nil},            // rank differs
		{"ij,jk->ik", []*val{f(4, 5), nil}, nil},     // unknown input
	}
	for _, c := range cases {
		n := &node{opType: "Einsum", inputs: make([]string, len(c.in)), attrs: map[string]*attr{"equation": {name: "equation", s: []byte(c.eq)}}}
		outs, err := inferEinsum(opArgs{n: n, in: c.in, opset: 17})
		if err != nil {
			t.Fatalf("%s: %v", c.eq, err)
		}
		var got []int64
		if len(outs) == 1 && outs[0] != nil {
			got = outs[0].shape
		}
		if !slices.Equal(got, c.want) || (c.want != nil && got == nil) {
			t.Errorf("%s: shape %v, want %v", c.eq, got, c.want)
		}
	}

	// bhid,bhjd->bhij over [1,3,5,8] x [1,3,7,8]: 2 * (3*5*7) * 8.
	g := tGraph{
		inputs:  [][]byte{encVI("q", -1, 3, 5, 8), encVI("k", -1, 3, 7, 8)},
		outputs: [][]byte{encVI("a", -1, 3, 5, 7)},
		nodes:   [][]byte{encNode("Einsum", "e", []string{"q", "k"}, []string{"a"}, attrString("equation", "bhid,bhjd->bhij"))},
	}
	m, err := Parse(encModel(g))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m.CumulativeFLOPs(nil)["a"], 2.0*3*5*7*8; got != want {
		t.Errorf("Einsum FLOPs %v, want %v", got, want)
	}
}

// CumulativeFLOPs takes elements per sample from shape inference, whatever
// axis holds the batch, and extra shapes only for tensors inference does not
// know: ONNX Runtime's shapes (batch taken as the first axis) once made
// `featurefs layers` report ViT-B/16 at 31.1 GFLOPs instead of 35.2.
func TestFLOPsExtraShapesFillOnly(t *testing.T) {
	// x[batch,4,6] -> Transpose -> xt[4,batch,6] -> MatMul w[6,5] ->
	// y[4,batch,5] -> u, by Relu or by an operator of another domain.
	model := func(uDomain string) *Model {
		u := encNode("Relu", "u", []string{"y"}, []string{"u"})
		if uDomain != "" {
			u = appendString(u, fNodeDomain, uDomain)
		}
		g := tGraph{
			inits:   [][]byte{encFloatTensor("w", []int64{6, 5}, ones(30))},
			inputs:  [][]byte{encVI("x", -1, 4, 6)},
			outputs: [][]byte{encVI("u", 4, -1, 5)},
			nodes: [][]byte{
				encNode("Transpose", "t", []string{"x"}, []string{"xt"}, attrInts("perm", 1, 0, 2)),
				encNode("MatMul", "mm", []string{"xt", "w"}, []string{"y"}),
				u,
			},
		}
		m, err := Parse(encModel(g))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	m := model("")
	mm := 2.0 * 4 * 5 * 6
	// A batch-first reading of y's [4,-1,5] would be [-1,5] or nothing:
	// extra shapes do not override what inference knows.
	fl := m.CumulativeFLOPs(map[string][]int64{"y": {5}})
	if got := fl["y"] - fl["xt"]; got != mm {
		t.Errorf("MatMul FLOPs %v, want %v", got, mm)
	}
	if got := fl["u"] - fl["y"]; got != 20 {
		t.Errorf("Relu FLOPs %v, want 20", got)
	}
	// An operator inference does not know: extra fills in its output.
	m = model("com.example")
	if _, ok := m.SampleElems()["u"]; ok {
		t.Fatal("inference knows a custom-domain operator")
	}
	if fl := m.CumulativeFLOPs(nil); fl["u"] != fl["y"] {
		t.Errorf("u with no shape counts %v", fl["u"]-fl["y"])
	}
	if fl := m.CumulativeFLOPs(map[string][]int64{"u": {4, 5}}); fl["u"]-fl["y"] != 20 {
		t.Errorf("u with an extra shape counts %v, want 20", fl["u"]-fl["y"])
	}
}
