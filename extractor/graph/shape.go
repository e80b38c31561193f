package graph

// Light shape inference. ONNX exporters (torch 1.13 included) write no
// value_info for intermediate tensors, so the package infers shapes itself
// for the operators common in vision and transformer models, evaluating small
// integer tensors (Shape -> Gather -> Concat -> Reshape chains) on the way.
// It runs twice, at batch 1 and batch 2: a tensor's per-sample shape is its
// batch-1 shape without the one axis that doubles at batch 2.

import (
	"fmt"
	"slices"
)

// val is what inference knows about one tensor.
type val struct {
	shape  []int64 // full shape, batch included
	dtype  int32
	hasVal bool
	ints   []int64   // values, integer and boolean types
	floats []float64 // values, floating types
}

func (v *val) rank() int { return len(v.shape) }

// inference holds the results of both runs.
type inference struct {
	b1, b2 map[string]*val
}

// infer runs shape inference once and caches the result.
func (m *Model) infer() (*inference, error) {
	m.once.Do(func() {
		b1, err := m.inferBatch(1)
		if err != nil {
			m.infOK = err
			return
		}
		b2, err := m.inferBatch(2)
		if err != nil {
			m.infOK = err
			return
		}
		m.inf = &inference{b1: b1, b2: b2}
	})
	return m.inf, m.infOK
}

// Shapes returns the per-sample shape (batch axis removed) of every tensor
// whose shape inference could determine, graph input and initializers
// included. Tensors that do not depend on the batch keep their full shape.
func (m *Model) Shapes() (map[string][]int64, error) {
	inf, err := m.infer()
	if err != nil {
		return nil, err
	}
	out := make(map[string][]int64, len(inf.b1))
	for name, v1 := range inf.b1 {
		if s, ok := perSample(v1, inf.b2[name]); ok {
			out[name] = s
		}
	}
	return out, nil
}

// perSample derives the per-sample shape from the batch-1 and batch-2 runs.
func perSample(v1, v2 *val) ([]int64, bool) {
	if v1 == nil || v2 == nil || len(v1.shape) != len(v2.shape) {
		return nil, false
	}
	axis := -1
	for i := range v1.shape {
		if v1.shape[i] == v2.shape[i] {
			continue
		}
		if axis >= 0 || v1.shape[i] != 1 || v2.shape[i] != 2 {
			return nil, false
		}
		axis = i
	}
	if axis < 0 {
		return slices.Clone(v1.shape), true
	}
	out := make([]int64, 0, len(v1.shape)-1)
	out = append(out, v1.shape[:axis]...)
	return append(out, v1.shape[axis+1:]...), true
}

// SampleElems returns the number of elements per sample of every tensor
// whose shape inference found, graph input and initializers included,
// whatever axis holds the batch (attention folds it into the heads, window
// partitions into the windows): the tensor's elements at batch 1. Where the
// graph's input fixes the batch at B, inference runs at B and a tensor's
// elements are divided by B when they divide (every tensor that scales with
// the batch, and the few small shape tensors whose count B happens to
// divide); constants keep their count.
func (m *Model) SampleElems() map[string]int64 {
	inf, err := m.infer()
	if err != nil {
		return map[string]int64{}
	}
	fixed := m.fixedBatch()
	consts := m.constants()
	out := make(map[string]int64, len(inf.b1))
	for name, v := range inf.b1 {
		n := numel(v.shape)
		if n < 0 {
			continue
		}
		if fixed > 1 && n%fixed == 0 && !consts[name] {
			n /= fixed
		}
		out[name] = n
	}
	return out
}

// fixedBatch is the batch size the graph input fixes (its first dimension
// a number), or 1 when the batch is symbolic or unknown.
func (m *Model) fixedBatch() int64 {
	for _, in := range m.inputs {
		if in.name == m.input && in.hasShape && len(in.dims) > 0 && in.dims[0].value > 0 {
			return in.dims[0].value
		}
	}
	return 1
}

// elemsPerSample returns the number of elements per sample of tensor, or -1
// when unknown.
func (m *Model) elemsPerSample(name string) int64 {
	inf, err := m.infer()
	if err != nil {
		return -1
	}
	v1, v2 := inf.b1[name], inf.b2[name]
	if v1 == nil || v2 == nil {
		return -1
	}
	n1, n2 := numel(v1.shape), numel(v2.shape)
	if n1 < 0 || n2 != 2*n1 {
		return -1
	}
	return n1
}

func (m *Model) inferBatch(batch int64) (map[string]*val, error) {
	vals := map[string]*val{}
	for name, t := range m.inits {
		v := &val{shape: slices.Clone(t.dims), dtype: t.dtype}
		ints, floats, ok, err := t.values()
		if err != nil {
			return nil, err
		}
		if ok {
			v.hasVal, v.ints, v.floats = true, ints, floats
		}
		vals[name] = v
	}
	for _, in := range m.inputs {
		if _, isInit := m.inits[in.name]; isInit || !in.hasShape {
			continue
		}
		shape := make([]int64, len(in.dims))
		ok := true
		for i, d := range in.dims {
			switch {
			case d.value >= 0:
				shape[i] = d.value
			case i == 0:
				shape[i] = batch
			default:
				ok = false
			}
		}
		if ok {
			vals[in.name] = &val{shape: shape, dtype: in.elem}
		}
	}
	for _, n := range m.nodes {
		outs, err := inferNode(n, vals, m.opset)
		if err != nil {
			return nil, fmt.Errorf("node %q (%s): %w", n.name, n.opType, err)
		}
		for i, o := range outs {
			if i < len(n.outputs) && n.outputs[i] != "" && o != nil {
				vals[n.outputs[i]] = o
			}
		}
	}
	return vals, nil
}

// inferNode returns the outputs of one node, nil entries where unknown. An
// error is returned only for inconsistencies that make the model invalid.
// Operators outside the default domain, and those inferOps does not list,
// are unknown.
func inferNode(n *node, vals map[string]*val, opset int64) ([]*val, error) {
	if n.domain != "" && n.domain != "ai.onnx" {
		return nil, nil
	}
	infer := inferOps[n.opType]
	if infer == nil {
		return nil, nil
	}
	in := make([]*val, len(n.inputs))
	for i, name := range n.inputs {
		if name != "" {
			in[i] = vals[name]
		}
	}
	return infer(opArgs{n: n, in: in, opset: opset})
}

// opArgs is one node as an inferFunc sees it: the node (attributes, output
// count), what inference knows of each input (nil where unknown or absent)
// and the model's opset.
type opArgs struct {
	n     *node
	in    []*val
	opset int64
}

// arg returns input i, nil when it is unknown or the node has fewer inputs.
func (op opArgs) arg(i int) *val {
	if i < len(op.in) {
		return op.in[i]
	}
	return nil
}

// inferFunc infers the outputs of one node (see inferNode).
type inferFunc func(op opArgs) ([]*val, error)

// one is the answer of a node with one output.
func one(v *val) ([]*val, error) { return []*val{v}, nil }

// inferOps maps each operator shape inference knows to its family's
// function. The families and the files that hold them:
//
//	elementwise  shape_elementwise.go  unary math and activations, normalization,
//	                                   predicates, Cast, broadcasting binary and
//	                                   variadic ops, Where
//	conv, pool   shape_conv.go         Conv and its quantized forms, pools
//	matmul       shape_matmul.go       Gemm, MatMul, Einsum
//	layout       shape_layout.go       Flatten, Reshape, Transpose, (Un)Squeeze,
//	                                   Expand, Tile, Pad
//	reductions   shape_reduce.go       Reduce*, ArgMax, ArgMin
//	indexing     shape_index.go        Concat, Split, Slice, Gather, Scatter*
//	constants    shape_const.go        Constant, ConstantOfShape, Shape, Size,
//	                                   Range
var inferOps = opTable(inferFamilies)

// inferFamilies lists the operators of each family, grouped as in the
// table above.
var inferFamilies = []opFamily{
	{inferSame, []string{"Identity"}},
	{inferDropout, []string{"Dropout"}},
	{inferUnary, []string{
		"Relu", "Sigmoid", "Tanh", "Erf", "Sqrt", "Exp", "Log", "Abs",
		"Reciprocal", "Floor", "Ceil", "Round", "Sign", "Clip", "LeakyRelu",
		"Elu", "Selu", "Softplus", "Softsign", "HardSigmoid", "HardSwish", "Mish",
		"Gelu", "Softmax", "LogSoftmax", "Hardmax", "Sin", "Cos", "PRelu", "Celu",
		"ThresholdedRelu", "CumSum",
	}},
	{inferUnary, []string{
		"LRN", "InstanceNormalization", "BatchNormalization", "LayerNormalization",
		"GroupNormalization", "MeanVarianceNormalization",
	}},
	{inferPredicate, []string{"Not", "IsNaN", "IsInf"}},
	{inferNeg, []string{"Neg"}},
	{inferCast, []string{"Cast"}},
	{inferBinary, []string{
		"Add", "Sub", "Mul", "Div", "Pow", "Mod", "Equal", "Less", "Greater",
		"LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "BitShift",
	}},
	{inferVariadic, []string{"Max", "Min", "Sum", "Mean"}},
	{inferWhere, []string{"Where"}},

	{inferConvAt(1), []string{"Conv", "ConvInteger"}},
	{inferConvAt(3), []string{"QLinearConv"}},
	{inferPool, []string{"AveragePool", "LpPool"}},
	{inferMaxPool, []string{"MaxPool"}},
	{inferGlobalPool, []string{"GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"}},

	{inferGemm, []string{"Gemm"}},
	{inferMatMul, []string{"MatMul", "MatMulInteger"}},
	{inferEinsum, []string{"Einsum"}},

	{inferFlatten, []string{"Flatten"}},
	{inferReshape, []string{"Reshape"}},
	{inferTranspose, []string{"Transpose"}},
	{inferUnsqueeze, []string{"Unsqueeze"}},
	{inferSqueeze, []string{"Squeeze"}},
	{inferExpand, []string{"Expand"}},
	{inferTile, []string{"Tile"}},
	{inferPad, []string{"Pad"}},

	{inferReduce, []string{
		"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd",
		"ReduceL1", "ReduceL2", "ReduceLogSumExp", "ReduceSumSquare",
	}},
	{inferArgReduce, []string{"ArgMax", "ArgMin"}},

	{inferConcat, []string{"Concat"}},
	{inferSplit, []string{"Split"}},
	{inferSlice, []string{"Slice"}},
	{inferGather, []string{"Gather"}},
	{inferScatter, []string{"ScatterND", "ScatterElements", "Scatter"}},

	{inferConstant, []string{"Constant"}},
	{inferConstantOfShape, []string{"ConstantOfShape"}},
	{inferShape, []string{"Shape"}},
	{inferSize, []string{"Size"}},
	{inferRange, []string{"Range"}},
}

// opFamily is a group of operators one inferFunc handles.
type opFamily struct {
	infer inferFunc
	ops   []string
}

// opTable maps each operator of fams to its family's function (a test
// checks that no operator is listed twice).
func opTable(fams []opFamily) map[string]inferFunc {
	t := map[string]inferFunc{}
	for _, f := range fams {
		for _, op := range f.ops {
			t[op] = f.infer
		}
	}
	return t
}

// intAttr returns n's integer attribute name, def when n has none.
func intAttr(n *node, name string, def int64) int64 {
	if a := n.attrs[name]; a != nil {
		return a.i
	}
	return def
}

// intsAttr returns n's integer-list attribute name, nil when n has none.
func intsAttr(n *node, name string) []int64 {
	if a := n.attrs[name]; a != nil {
		return a.ints
	}
	return nil
}

// strAttr returns n's string attribute name, def when n has none.
func strAttr(n *node, name, def string) string {
	if a := n.attrs[name]; a != nil {
		return string(a.s)
	}
	return def
}

// normAxis maps a possibly negative axis into [0, rank).
func normAxis(a int64, rank int) (int, bool) {
	if a < 0 {
		a += int64(rank)
	}
	if a < 0 || a >= int64(rank) {
		return 0, false
	}
	return int(a), true
}

// clampIdx maps a possibly negative index into [0, n], clamping.
func clampIdx(i, n int64) int64 {
	if i < 0 {
		i += n
	}
	return min(max(i, 0), n)
}
