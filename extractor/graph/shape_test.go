package graph

import "testing"

// Each operator has one shape function: an operator listed in two families
// would silently take the later family's rule.
func TestInferFamiliesListEachOperatorOnce(t *testing.T) {
	seen := map[string]bool{}
	n := 0
	for _, f := range inferFamilies {
		if f.infer == nil || len(f.ops) == 0 {
			t.Errorf("family %v has no function or no operator", f.ops)
		}
		for _, op := range f.ops {
			if seen[op] {
				t.Errorf("operator %s is listed twice", op)
			}
			seen[op] = true
			n++
		}
	}
	if len(inferOps) != n {
		t.Errorf("inferOps has %d operators, the families list %d", len(inferOps), n)
	}
}

// An operator outside the default domain is unknown even when its name is
// one of ONNX's.
func TestInferNodeOtherDomain(t *testing.T) {
	x := &val{shape: []int64{1, 3}, dtype: dtFloat}
	for _, domain := range []string{"", "ai.onnx", "com.microsoft"} {
		n := &node{opType: "Relu", domain: domain, inputs: []string{"x"}, outputs: []string{"y"}}
		outs, err := inferNode(n, map[string]*val{"x": x}, 13)
		known := err == nil && len(outs) == 1 && outs[0] != nil
		if want := domain != "com.microsoft"; known != want {
			t.Errorf("Relu in domain %q: %v %v, known=%v want %v", domain, outs, err, known, want)
		}
	}
}
