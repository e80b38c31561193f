package graph

import (
	"math/bits"
	"strings"
)

// CumulativeFLOPs returns, for the graph input and every node output, the
// floating-point operations per sample of all the nodes it depends on, its
// own producer included. A tensor's elements per sample come from the
// package's shape inference (SampleElems), whatever axis holds the batch;
// extra gives per-sample shapes (no batch axis) of tensors inference does
// not know, such as ONNX Runtime's, and is not consulted for the others.
// Tensors missing from both count as zero work. Conv counts
// 2*outElems*Cin/groups*kh*kw, Gemm and MatMul 2*M*N*K, and every other op
// one operation per output element. Nodes computing only constants count
// zero (ONNX Runtime folds them). This is the one FLOPs figure featurefs
// reports (its layer table, docs/LAYERS.md).
func (m *Model) CumulativeFLOPs(extra map[string][]int64) map[string]float64 {
	sample := m.SampleElems()
	var batch1 map[string]*val
	if inf, err := m.infer(); err == nil {
		batch1 = inf.b1
	}
	elems := func(name string) (float64, bool) {
		if n, ok := sample[name]; ok {
			return float64(n), true
		}
		if s, ok := extra[name]; ok {
			if n := numel(s); n >= 0 {
				return float64(n), true
			}
		}
		return 0, false
	}
	// dims gives the axes of weights and of a MatMul's reduced axis, which
	// do not depend on the batch.
	dims := func(name string) ([]int64, bool) {
		if t, ok := m.inits[name]; ok {
			return t.dims, true
		}
		if v := batch1[name]; v != nil {
			return v.shape, true
		}
		if s, ok := extra[name]; ok {
			return s, true
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
			own[i] = nodeFLOPs(n, elems, dims)
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

// nodeFLOPs estimates one node's per-sample work from the elements per
// sample of its tensors (elems) and the axes of its weights (dims).
func nodeFLOPs(n *node, elemsOf func(string) (float64, bool), shapeOf func(string) ([]int64, bool)) float64 {
	elems := func(name string) float64 {
		e, _ := elemsOf(name)
		return e
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
	case "Einsum":
		if k, ok := einsumReduced(n, shapeOf); ok {
			return 2 * first * float64(k)
		}
		return out
	}
	return out
}

// einsumReduced returns the product of the sizes of an Einsum's summed
// letters (in its inputs, not in its output): the multiply-adds per output
// element.
func einsumReduced(n *node, shapeOf func(string) ([]int64, bool)) (int64, bool) {
	eq := strings.ReplaceAll(strAttr(n, "equation", ""), " ", "")
	lhs, rhs, explicit := strings.Cut(eq, "->")
	terms := strings.Split(lhs, ",")
	if !explicit || len(terms) != len(n.inputs) || strings.Contains(eq, "...") {
		return 0, false
	}
	size := map[rune]int64{}
	for i, term := range terms {
		s, ok := shapeOf(n.inputs[i])
		if !ok || len(s) != len([]rune(term)) {
			return 0, false
		}
		for j, c := range term {
			size[c] = max(size[c], s[j])
		}
	}
	k := int64(1)
	for c, d := range size {
		if !strings.ContainsRune(rhs, c) {
			k *= d
		}
	}
	return k, true
}
