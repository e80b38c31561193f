package graph

import (
	"fmt"
	"slices"
)

// Layer is one block boundary of a model (docs/LAYERS.md, "The rule").
type Layer struct {
	// Index counts the layers from 0 in topological order.
	Index int
	// Tensor is the ONNX tensor name of the layer's output.
	Tensor string
	// Shape is the per-sample shape of Tensor (no batch axis), nil when
	// shape inference could not determine it.
	Shape []int64
	// Merged lists the cut points folded into this layer, in order, the last
	// being Tensor itself.
	Merged []string
}

// elementwise ops keep the element count of their (first) input whatever
// the shapes; used only when inference has no shape for a tensor.
var elementwise = map[string]bool{
	"Relu": true, "BatchNormalization": true, "Identity": true, "Flatten": true,
	"Dropout": true, "Sigmoid": true, "Tanh": true, "Clip": true, "LeakyRelu": true,
	"HardSwish": true, "HardSigmoid": true, "Gelu": true, "Erf": true, "Softmax": true,
	"LayerNormalization": true, "InstanceNormalization": true, "Elu": true, "Selu": true,
	"Cast": true, "Neg": true, "Sqrt": true, "Exp": true, "Abs": true, "Mish": true,
}

// computeOps do a layer's main, weighted computation. A cut point such an op
// produces always starts a new layer, even when it keeps the element count
// (VGG's 512->512 3x3 convolutions, a 4096->4096 Linear): the merge rule is
// for the cheap ops that follow a layer (activation, normalization, Identity,
// Flatten, bias or constant Add, pooling that keeps the size).
var computeOps = map[string]bool{
	"Conv": true, "ConvTranspose": true, "ConvInteger": true, "QLinearConv": true,
	"Gemm": true, "MatMul": true, "MatMulInteger": true, "QLinearMatMul": true,
	"Einsum": true, "LSTM": true, "GRU": true, "RNN": true, "Attention": true,
}

// constants returns the set of tensors computed only from initializers and
// Constant nodes (more precisely: not depending on a graph input that is
// not an initializer).
func (m *Model) constants() map[string]bool {
	nonConst := map[string]bool{}
	for _, in := range m.inputs {
		if _, ok := m.inits[in.name]; !ok {
			nonConst[in.name] = true
		}
	}
	c := map[string]bool{}
	for name := range m.inits {
		if !nonConst[name] {
			c[name] = true
		}
	}
	for _, n := range m.nodes {
		dep := false
		for _, r := range n.reads() {
			if r != "" && nonConst[r] {
				dep = true
				break
			}
		}
		for _, o := range n.outputs {
			if o == "" {
				continue
			}
			if dep {
				nonConst[o] = true
			} else {
				c[o] = true
			}
		}
	}
	return c
}

// CutPoints returns, in topological order, every tensor that is the only
// live non-constant tensor right after the node producing it (rule 1 in
// docs/LAYERS.md). Graph outputs stay live to the end.
func (m *Model) CutPoints() []string {
	consts := m.constants()
	isOut := map[string]bool{}
	for _, o := range m.outputs {
		isOut[o.name] = true
	}
	last := map[string]int{}
	for t, cs := range m.consumers {
		last[t] = cs[len(cs)-1]
	}
	live := map[string]bool{}
	for _, in := range m.inputs {
		if !consts[in.name] && (len(m.consumers[in.name]) > 0 || isOut[in.name]) {
			live[in.name] = true
		}
	}
	var cuts []string
	for i, n := range m.nodes {
		for _, o := range n.outputs {
			if o != "" && !consts[o] && (len(m.consumers[o]) > 0 || isOut[o]) {
				live[o] = true
			}
		}
		for _, r := range n.reads() {
			if r != "" && !isOut[r] && last[r] == i {
				delete(live, r)
			}
		}
		if len(live) != 1 {
			continue
		}
		for _, o := range n.outputs {
			if o != "" && live[o] {
				cuts = append(cuts, o)
			}
		}
	}
	return cuts
}

// Layers returns the model's block boundaries: the cut points, with each
// cut point merged into the next when the next is computed by one node from
// it alone (plus constants) and has the same number of elements per sample
// (rule 2). A layer is named by the last tensor of its run. A cut point
// produced by a weighted op (Conv, Gemm, MatMul...) always starts a layer.
func (m *Model) Layers() ([]Layer, error) {
	cuts := m.CutPoints()
	if len(cuts) == 0 {
		return nil, fmt.Errorf("graph: no cut points between %q and %q", m.input, m.Output())
	}
	shapes, err := m.Shapes()
	if err != nil {
		return nil, err
	}
	consts := m.constants()
	var layers []Layer
	for i, c := range cuts {
		if i > 0 && m.mergeable(cuts[i-1], c, consts) {
			l := &layers[len(layers)-1]
			l.Tensor = c
			l.Merged = append(l.Merged, c)
			l.Shape = slices.Clone(shapes[c])
			continue
		}
		layers = append(layers, Layer{Index: len(layers), Tensor: c, Shape: slices.Clone(shapes[c]), Merged: []string{c}})
	}
	return layers, nil
}

// mergeable reports whether cut point b is produced by one node reading only
// a and constants, with the same element count per sample as a.
func (m *Model) mergeable(a, b string, consts map[string]bool) bool {
	p, ok := m.producer[b]
	if !ok {
		return false
	}
	n := m.nodes[p]
	if computeOps[n.opType] {
		return false
	}
	readsA := false
	for _, r := range n.reads() {
		switch {
		case r == "" || consts[r]:
		case r == a:
			readsA = true
		default:
			return false
		}
	}
	if !readsA {
		return false
	}
	ea, eb := m.elemsPerSample(a), m.elemsPerSample(b)
	if ea >= 0 && eb >= 0 {
		return ea == eb
	}
	return elementwise[n.opType]
}
