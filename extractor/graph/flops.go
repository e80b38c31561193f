package graph

import "math/bits"

// CumulativeFLOPs returns, for the graph input and every node output, the
// floating-point operations per sample of all the nodes it depends on, its
// own producer included. shapes gives per-sample shapes (no batch axis) and
// overrides the package's own inference; tensors missing from both count as
// zero work. Conv counts 2*outElems*Cin/groups*kh*kw, Gemm and MatMul
// 2*M*N*K, and every other op one operation per output element. Nodes
// computing only constants count zero (ONNX Runtime folds them).
func (m *Model) CumulativeFLOPs(shapes map[string][]int64) map[string]float64 {
	// At batch 1 a tensor's elements are its per-sample elements, whichever
	// axis is the batch (attention reshapes fold it into the heads).
	var batch1 map[string]*val
	if inf, err := m.infer(); err == nil {
		batch1 = inf.b1
	}
	shapeOf := func(name string) ([]int64, bool) {
		if s, ok := shapes[name]; ok {
			return s, true
		}
		if t, ok := m.inits[name]; ok {
			return t.dims, true
		}
		if v := batch1[name]; v != nil {
			return v.shape, true
		}
		return nil, false
	}
	consts := m.constants()
	own := make([]float64, len(m.nodes))
	for i, n := range m.nodes {
		allConst := true
		for _, o := range n.outputs {
			if o != "" && !consts[o] {
				allConst = false
			}
		}
		if !allConst {
			own[i] = nodeFLOPs(n, shapeOf)
		}
	}

	// Ancestor sets as bitsets over node indices (topological order).
	words := (len(m.nodes) + 63) / 64
	anc := make([][]uint64, len(m.nodes))
	out := map[string]float64{}
	for _, in := range m.inputs {
		if _, isInit := m.inits[in.name]; !isInit {
			out[in.name] = 0
		}
	}
	for i, n := range m.nodes {
		set := make([]uint64, words)
		set[i/64] |= 1 << (i % 64)
		for _, r := range n.reads() {
			if p, ok := m.producer[r]; ok {
				for w, x := range anc[p] {
					set[w] |= x
				}
			}
		}
		anc[i] = set
		var sum float64
		for w, x := range set {
			for x != 0 {
				b := bits.TrailingZeros64(x)
				sum += own[w*64+b]
				x &= x - 1
			}
		}
		for _, o := range n.outputs {
			if o != "" {
				out[o] = sum
			}
		}
	}
	return out
}

// nodeFLOPs estimates one node's per-sample work.
func nodeFLOPs(n *node, shapeOf func(string) ([]int64, bool)) float64 {
	elems := func(name string) float64 {
		s, ok := shapeOf(name)
		if !ok {
			return 0
		}
		e := numel(s)
		if e < 0 {
			return 0
		}
		return float64(e)
	}
	out := 0.0
	for _, o := range n.outputs {
		if o != "" {
			out += elems(o)
		}
	}
	if len(n.outputs) == 0 || n.outputs[0] == "" {
		return out
	}
	first := elems(n.outputs[0])
	switch n.opType {
	case "Conv":
		if len(n.inputs) < 2 {
			return out
		}
		w, ok := shapeOf(n.inputs[1])
		if !ok || len(w) < 2 {
			return out
		}
		k := numel(w[1:]) // Cin/groups * kh * kw
		if k < 0 {
			return out
		}
		return 2 * first * float64(k)
	case "ConvTranspose":
		if len(n.inputs) < 2 {
			return out
		}
		w, ok := shapeOf(n.inputs[1])
		if !ok || len(w) < 2 {
			return out
		}
		k := numel(w[1:]) // Cout/groups * kh * kw per input element
		if k < 0 {
			return out
		}
		return 2 * elems(n.inputs[0]) * float64(k)
	case "Gemm":
		if len(n.inputs) < 2 {
			return out
		}
		if b, ok := shapeOf(n.inputs[1]); ok && len(b) == 2 {
			k := b[0]
			if intAttr(n, "transB", 0) != 0 {
				k = b[1]
			}
			return 2 * first * float64(k)
		}
		return out
	case "MatMul":
		if len(n.inputs) < 2 {
			return out
		}
		if a, ok := shapeOf(n.inputs[0]); ok && len(a) > 0 {
			return 2 * first * float64(a[len(a)-1])
		}
		return out
	}
	return out
}
