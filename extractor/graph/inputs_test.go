package graph

import (
	"slices"
	"testing"
)

// TestInputsLeaveOutInitializers checks Inputs: the graph inputs a caller
// must feed, with their declared element type and dimensions, and without
// the initializers an exporter also lists as inputs.
func TestInputsLeaveOutInitializers(t *testing.T) {
	g := tGraph{
		inits: [][]byte{encFloatTensor("w", []int64{4, 3, 1, 1}, ones(12))},
		inputs: [][]byte{
			encVI("x", -1, 3, 8, 8),
			encVI("w", 4, 3, 1, 1), // keep_initializers_as_inputs
			encodeValueInfo("ids", dtUint8, true, []dim{{value: 2}, {value: -1}}),
		},
		outputs: [][]byte{encVI("y", -1, 4, 8, 8)},
		nodes: [][]byte{
			encNode("Conv", "c", []string{"x", "w"}, []string{"c"}),
			encNode("Cast", "cast", []string{"ids"}, []string{"idsf"}, attrInt("to", dtFloat)),
			encNode("Add", "add", []string{"c", "idsf"}, []string{"y"}),
		},
	}
	m, err := Parse(encModel(g))
	if err != nil {
		t.Fatal(err)
	}
	in := m.Inputs()
	if len(in) != 2 {
		t.Fatalf("Inputs = %+v, want x and ids (w is an initializer)", in)
	}
	x, ids := in[0], in[1]
	if x.Name != "x" || x.ElemType != ElemFloat || !x.HasShape || !slices.Equal(x.Dims, []int64{-1, 3, 8, 8}) || x.Params[0] != "batch" || x.Params[1] != "" {
		t.Errorf("x = %+v", x)
	}
	if ids.Name != "ids" || ids.ElemType != dtUint8 || !slices.Equal(ids.Dims, []int64{2, -1}) {
		t.Errorf("ids = %+v", ids)
	}
	if got := ElemTypeName(ids.ElemType); got != "uint8" {
		t.Errorf("ElemTypeName(uint8) = %q", got)
	}
	if got := ElemTypeName(99); got != "type 99" {
		t.Errorf("ElemTypeName(99) = %q", got)
	}

	// A graph without a shape on its input says so.
	g.inputs = [][]byte{encodeValueInfo("x", dtFloat, false, nil), encVI("w", 4, 3, 1, 1)}
	g.nodes = g.nodes[:1]
	g.nodes[0] = encNode("Conv", "c", []string{"x", "w"}, []string{"y"})
	m, err = Parse(encModel(g))
	if err != nil {
		t.Fatal(err)
	}
	if in := m.Inputs(); len(in) != 1 || in[0].HasShape || in[0].Dims != nil {
		t.Errorf("shapeless input: %+v", in)
	}
}
