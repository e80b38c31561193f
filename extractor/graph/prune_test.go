package graph

import (
	"slices"
	"testing"
)

// A tensor that does not depend on the model's input (a Constant's) prunes
// to a model that still has the input: the extractor feeds it, and a model
// without one does not parse. FuzzParse found the model that lost it
// (testdata/fuzz/FuzzParse/bdb8a85251212352).
func TestPruneKeepsTheInput(t *testing.T) {
	g := tGraph{
		inputs:  [][]byte{encVI("x", -1, 2)},
		outputs: [][]byte{encVI("r", -1, 2)},
	}
	g.nodes = [][]byte{
		encNode("Constant", "k", nil, []string{"k"}, attrTensor("value", encFloatTensor("", []int64{2}, ones(2)))),
		encNode("Relu", "r", []string{"x"}, []string{"r"}),
	}
	m, err := Parse(encModel(g))
	if err != nil {
		t.Fatal(err)
	}
	p, err := m.Prune("k")
	if err != nil {
		t.Fatal(err)
	}
	pm, err := Parse(p)
	if err != nil {
		t.Fatalf("the pruned model does not parse: %v", err)
	}
	if pm.Input() != "x" || !slices.Equal(pm.Outputs(), []string{"k"}) || !slices.Equal(pm.NodeOutputs(), []string{"k"}) {
		t.Errorf("pruned: input %q, outputs %q, nodes %q; want x, [k], [k]", pm.Input(), pm.Outputs(), pm.NodeOutputs())
	}
}
