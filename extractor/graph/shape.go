package graph

// Light shape inference. ONNX exporters (torch 1.13 included) write no
// value_info for intermediate tensors, so the package infers shapes itself
// for the operators common in vision and transformer models, evaluating small
// integer tensors (Shape -> Gather -> Concat -> Reshape chains) on the way.
// It runs twice, at batch 1 and batch 2: a tensor's per-sample shape is its
// batch-1 shape without the one axis that doubles at batch 2.

import (
	"fmt"
	"math"
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
func inferNode(n *node, vals map[string]*val, opset int64) ([]*val, error) {
	in := make([]*val, len(n.inputs))
	for i, name := range n.inputs {
		if name != "" {
			in[i] = vals[name]
		}
	}
	arg := func(i int) *val {
		if i < len(in) {
			return in[i]
		}
		return nil
	}
	x := arg(0)
	one := func(v *val) []*val { return []*val{v} }
	if n.domain != "" && n.domain != "ai.onnx" {
		return nil, nil
	}
	switch n.opType {
	case "Constant":
		return one(constantNode(n)), nil

	case "Identity", "Dropout":
		if x == nil {
			return nil, nil
		}
		return one(x), nil

	case "Relu", "Sigmoid", "Tanh", "Erf", "Sqrt", "Exp", "Log", "Abs", "Neg",
		"Reciprocal", "Floor", "Ceil", "Round", "Sign", "Clip", "LeakyRelu",
		"Elu", "Selu", "Softplus", "Softsign", "HardSigmoid", "HardSwish", "Mish",
		"Gelu", "Softmax", "LogSoftmax", "Hardmax", "LRN", "InstanceNormalization",
		"BatchNormalization", "LayerNormalization", "GroupNormalization", "Not",
		"IsNaN", "IsInf", "Sin", "Cos", "PRelu", "Celu", "ThresholdedRelu",
		"MeanVarianceNormalization", "CumSum":
		if x == nil {
			return nil, nil
		}
		v := &val{shape: slices.Clone(x.shape), dtype: x.dtype}
		switch n.opType {
		case "Not", "IsNaN", "IsInf":
			v.dtype = dtBool
		case "Neg":
			if x.hasVal {
				v.hasVal = true
				for _, a := range x.ints {
					v.ints = append(v.ints, -a)
				}
				for _, a := range x.floats {
					v.floats = append(v.floats, -a)
				}
			}
		}
		return one(v), nil

	case "Cast":
		if x == nil {
			return nil, nil
		}
		to := int32(intAttr(n, "to", 0))
		v := &val{shape: slices.Clone(x.shape), dtype: to}
		if x.hasVal {
			v.hasVal = true
			switch {
			case isIntType(to) && x.ints != nil:
				v.ints = slices.Clone(x.ints)
			case isIntType(to):
				for _, f := range x.floats {
					if math.IsNaN(f) || math.Abs(f) > 1<<62 {
						v.hasVal, v.ints = false, nil
						break
					}
					v.ints = append(v.ints, int64(f))
				}
			case x.ints != nil:
				for _, a := range x.ints {
					v.floats = append(v.floats, float64(a))
				}
			default:
				v.floats = slices.Clone(x.floats)
			}
			if isIntType(to) && to == dtBool {
				for i := range v.ints {
					if v.ints[i] != 0 {
						v.ints[i] = 1
					}
				}
			}
		}
		return one(v), nil

	case "Add", "Sub", "Mul", "Div", "Pow", "Mod", "Equal", "Less", "Greater",
		"LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "BitShift":
		a, b := arg(0), arg(1)
		if a == nil || b == nil {
			return nil, nil
		}
		return one(binaryOp(n.opType, a, b)), nil

	case "Max", "Min", "Sum", "Mean":
		var shape []int64
		dt := int32(0)
		for _, v := range in {
			if v == nil {
				return nil, nil
			}
			s, ok := broadcast(shape, v.shape)
			if !ok {
				return nil, nil
			}
			shape, dt = s, v.dtype
		}
		return one(&val{shape: shape, dtype: dt}), nil

	case "Where":
		c, a, b := arg(0), arg(1), arg(2)
		if c == nil || a == nil || b == nil {
			return nil, nil
		}
		s, ok := broadcast(c.shape, a.shape)
		if ok {
			s, ok = broadcast(s, b.shape)
		}
		if !ok {
			return nil, nil
		}
		v := &val{shape: s, dtype: a.dtype}
		if nel := numel(s); c.hasVal && a.hasVal && b.hasVal && c.ints != nil && nel >= 0 && nel <= maxConstElems {
			v.hasVal = true
			cs, as, bs := bcastIndex(c.shape, s), bcastIndex(a.shape, s), bcastIndex(b.shape, s)
			for i := range cs {
				pick := b
				j := bs[i]
				if c.ints[cs[i]] != 0 {
					pick, j = a, as[i]
				}
				if pick.ints != nil {
					v.ints = append(v.ints, pick.ints[j])
				} else {
					v.floats = append(v.floats, pick.floats[j])
				}
			}
			if len(v.ints) > 0 && len(v.floats) > 0 {
				v.hasVal, v.ints, v.floats = false, nil, nil
			}
		}
		return one(v), nil

	case "Conv", "ConvInteger", "QLinearConv":
		w := arg(1)
		if n.opType == "QLinearConv" {
			x, w = arg(0), arg(3)
		}
		if x == nil || w == nil || x.rank() < 3 || w.rank() != x.rank() {
			return nil, nil
		}
		kernel := intsAttr(n, "kernel_shape")
		if kernel == nil {
			kernel = w.shape[2:]
		}
		sp, ok := spatial(n, x.shape[2:], kernel, false)
		if !ok {
			return nil, nil
		}
		return one(&val{shape: append([]int64{x.shape[0], w.shape[0]}, sp...), dtype: x.dtype}), nil

	case "MaxPool", "AveragePool", "LpPool":
		if x == nil || x.rank() < 3 {
			return nil, nil
		}
		sp, ok := spatial(n, x.shape[2:], intsAttr(n, "kernel_shape"), intAttr(n, "ceil_mode", 0) != 0)
		if !ok {
			return nil, nil
		}
		v := &val{shape: append([]int64{x.shape[0], x.shape[1]}, sp...), dtype: x.dtype}
		if n.opType == "MaxPool" && len(n.outputs) > 1 {
			return []*val{v, {shape: slices.Clone(v.shape), dtype: dtInt64}}, nil
		}
		return one(v), nil

	case "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool":
		if x == nil || x.rank() < 2 {
			return nil, nil
		}
		s := slices.Clone(x.shape)
		for i := 2; i < len(s); i++ {
			s[i] = 1
		}
		return one(&val{shape: s, dtype: x.dtype}), nil

	case "Flatten":
		if x == nil {
			return nil, nil
		}
		axis, ok := normAxis(intAttr(n, "axis", 1), x.rank()+1)
		if !ok {
			return nil, nil
		}
		a, b := numel(x.shape[:axis]), numel(x.shape[axis:])
		if a < 0 || b < 0 {
			return nil, nil
		}
		return one(&val{shape: []int64{a, b}, dtype: x.dtype}), nil

	case "Gemm":
		a, b := arg(0), arg(1)
		if a == nil || b == nil || a.rank() != 2 || b.rank() != 2 {
			return nil, nil
		}
		m := a.shape[0]
		if intAttr(n, "transA", 0) != 0 {
			m = a.shape[1]
		}
		nn := b.shape[1]
		if intAttr(n, "transB", 0) != 0 {
			nn = b.shape[0]
		}
		return one(&val{shape: []int64{m, nn}, dtype: a.dtype}), nil

	case "MatMul", "MatMulInteger":
		a, b := arg(0), arg(1)
		if a == nil || b == nil {
			return nil, nil
		}
		s, ok := matmulShape(a.shape, b.shape)
		if !ok {
			return nil, nil
		}
		return one(&val{shape: s, dtype: a.dtype}), nil

	case "Reshape":
		sh := arg(1)
		if x == nil || sh == nil || !sh.hasVal || sh.ints == nil {
			return nil, nil
		}
		allowZero := intAttr(n, "allowzero", 0) != 0
		s, ok := reshape(x.shape, sh.ints, allowZero)
		if !ok {
			return nil, nil
		}
		v := &val{shape: s, dtype: x.dtype}
		if x.hasVal {
			v.hasVal, v.ints, v.floats = true, x.ints, x.floats
		}
		return one(v), nil

	case "Transpose":
		if x == nil {
			return nil, nil
		}
		perm := intsAttr(n, "perm")
		r := x.rank()
		if perm == nil {
			for i := r - 1; i >= 0; i-- {
				perm = append(perm, int64(i))
			}
		}
		if len(perm) != r {
			return nil, nil
		}
		s := make([]int64, r)
		seen := make([]bool, r)
		for i, p := range perm {
			if p < 0 || p >= int64(r) || seen[p] {
				return nil, nil
			}
			seen[p] = true
			s[i] = x.shape[p]
		}
		return one(&val{shape: s, dtype: x.dtype}), nil

	case "Concat":
		if len(in) == 0 || in[0] == nil {
			return nil, nil
		}
		r := in[0].rank()
		axis, ok := normAxis(intAttr(n, "axis", 0), r)
		if !ok {
			return nil, nil
		}
		s := slices.Clone(in[0].shape)
		s[axis] = 0
		allVal := true
		for _, v := range in {
			if v == nil || v.rank() != r {
				return nil, nil
			}
			for i := range s {
				if i != axis && v.shape[i] != s[i] {
					return nil, nil
				}
			}
			s[axis] += v.shape[axis]
			allVal = allVal && v.hasVal
		}
		out := &val{shape: s, dtype: in[0].dtype}
		if allVal && r == 1 {
			out.hasVal = true
			for _, v := range in {
				out.ints = append(out.ints, v.ints...)
				out.floats = append(out.floats, v.floats...)
			}
			if len(out.ints) > 0 && len(out.floats) > 0 {
				out.hasVal, out.ints, out.floats = false, nil, nil
			}
		}
		return one(out), nil

	case "Shape":
		if x == nil {
			return nil, nil
		}
		r := int64(x.rank())
		start, end := intAttr(n, "start", 0), intAttr(n, "end", r)
		start, end = clampIdx(start, r), clampIdx(end, r)
		if end < start {
			end = start
		}
		vals := slices.Clone(x.shape[start:end])
		return one(&val{shape: []int64{int64(len(vals))}, dtype: dtInt64, hasVal: true, ints: vals}), nil

	case "Size":
		if x == nil {
			return nil, nil
		}
		return one(&val{shape: []int64{}, dtype: dtInt64, hasVal: true, ints: []int64{numel(x.shape)}}), nil

	case "Gather":
		idx := arg(1)
		if x == nil || idx == nil || x.rank() == 0 {
			return nil, nil
		}
		axis, ok := normAxis(intAttr(n, "axis", 0), x.rank())
		if !ok {
			return nil, nil
		}
		s := append(append(slices.Clone(x.shape[:axis]), idx.shape...), x.shape[axis+1:]...)
		v := &val{shape: s, dtype: x.dtype}
		if x.hasVal && idx.hasVal && x.rank() == 1 && idx.ints != nil {
			v.hasVal = true
			for _, i := range idx.ints {
				if i < 0 {
					i += x.shape[0]
				}
				if i < 0 || i >= x.shape[0] {
					return nil, fmt.Errorf("%w: Gather index %d out of range", ErrBadModel, i)
				}
				if x.ints != nil {
					v.ints = append(v.ints, x.ints[i])
				} else {
					v.floats = append(v.floats, x.floats[i])
				}
			}
		}
		return one(v), nil

	case "Unsqueeze", "Squeeze":
		if x == nil {
			return nil, nil
		}
		axes := intsAttr(n, "axes")
		if opset >= 13 || axes == nil {
			if a := arg(1); a != nil {
				if !a.hasVal || a.ints == nil {
					return nil, nil
				}
				axes = a.ints
			}
		}
		var s []int64
		if n.opType == "Unsqueeze" {
			r := x.rank() + len(axes)
			ins := make([]bool, r)
			for _, a := range axes {
				i, ok := normAxis(a, r)
				if !ok || ins[i] {
					return nil, nil
				}
				ins[i] = true
			}
			j := 0
			for i := 0; i < r; i++ {
				if ins[i] {
					s = append(s, 1)
				} else {
					if j >= x.rank() {
						return nil, nil
					}
					s = append(s, x.shape[j])
					j++
				}
			}
		} else {
			drop := make([]bool, x.rank())
			for _, a := range axes {
				i, ok := normAxis(a, x.rank())
				if !ok {
					return nil, nil
				}
				drop[i] = true
			}
			s = []int64{}
			for i, d := range x.shape {
				if (axes == nil && d == 1) || drop[i] {
					continue
				}
				s = append(s, d)
			}
		}
		v := &val{shape: s, dtype: x.dtype}
		if x.hasVal {
			v.hasVal, v.ints, v.floats = true, x.ints, x.floats
		}
		return one(v), nil

	case "Slice":
		return one(slice(n, in, opset)), nil

	case "ConstantOfShape":
		if x == nil || !x.hasVal || x.ints == nil {
			return nil, nil
		}
		for _, d := range x.ints {
			if d < 0 {
				return nil, fmt.Errorf("%w: ConstantOfShape with negative dimension", ErrBadModel)
			}
		}
		v := &val{shape: slices.Clone(x.ints), dtype: dtFloat}
		fill, ok := 0.0, true
		var ifill int64
		if a := n.attrs["value"]; a != nil && a.t != nil {
			v.dtype = a.t.dtype
			ints, floats, got, err := a.t.values()
			if err != nil {
				return nil, err
			}
			switch {
			case got && len(ints) == 1:
				ifill = ints[0]
			case got && len(floats) == 1:
				fill = floats[0]
			default:
				ok = false
			}
		}
		if nel := numel(v.shape); ok && nel >= 0 && nel <= maxConstElems {
			v.hasVal = true
			for i := int64(0); i < nel; i++ {
				if isIntType(v.dtype) {
					v.ints = append(v.ints, ifill)
				} else {
					v.floats = append(v.floats, fill)
				}
			}
		}
		return one(v), nil

	case "Expand":
		sh := arg(1)
		if x == nil || sh == nil || !sh.hasVal || sh.ints == nil {
			return nil, nil
		}
		s, ok := broadcast(x.shape, sh.ints)
		if !ok {
			return nil, nil
		}
		return one(&val{shape: s, dtype: x.dtype}), nil

	case "Pad":
		if x == nil {
			return nil, nil
		}
		pads := intsAttr(n, "pads")
		if p := arg(1); p != nil {
			if !p.hasVal || p.ints == nil {
				return nil, nil
			}
			pads = p.ints
		}
		axes := make([]int64, 0, x.rank())
		if a := arg(3); a != nil {
			if !a.hasVal || a.ints == nil {
				return nil, nil
			}
			axes = a.ints
		} else {
			for i := 0; i < x.rank(); i++ {
				axes = append(axes, int64(i))
			}
		}
		if len(pads) != 2*len(axes) {
			return nil, nil
		}
		s := slices.Clone(x.shape)
		for i, a := range axes {
			ax, ok := normAxis(a, x.rank())
			if !ok {
				return nil, nil
			}
			s[ax] += pads[i] + pads[i+len(axes)]
			if s[ax] < 0 {
				return nil, nil
			}
		}
		return one(&val{shape: s, dtype: x.dtype}), nil

	case "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd",
		"ReduceL1", "ReduceL2", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin":
		if x == nil {
			return nil, nil
		}
		keep := intAttr(n, "keepdims", 1) != 0
		var axes []int64
		if n.opType == "ArgMax" || n.opType == "ArgMin" {
			axes = []int64{intAttr(n, "axis", 0)}
		} else {
			axes = intsAttr(n, "axes")
			if a := arg(1); a != nil {
				if !a.hasVal || a.ints == nil {
					return nil, nil
				}
				axes = a.ints
			}
		}
		red := make([]bool, x.rank())
		if len(axes) == 0 {
			if intAttr(n, "noop_with_empty_axes", 0) != 0 {
				return one(&val{shape: slices.Clone(x.shape), dtype: x.dtype}), nil
			}
			for i := range red {
				red[i] = true
			}
		}
		for _, a := range axes {
			i, ok := normAxis(a, x.rank())
			if !ok {
				return nil, nil
			}
			red[i] = true
		}
		s := []int64{}
		for i, d := range x.shape {
			switch {
			case !red[i]:
				s = append(s, d)
			case keep:
				s = append(s, 1)
			}
		}
		dt := x.dtype
		if n.opType == "ArgMax" || n.opType == "ArgMin" {
			dt = dtInt64
		}
		return one(&val{shape: s, dtype: dt}), nil

	case "Split":
		if x == nil {
			return nil, nil
		}
		axis, ok := normAxis(intAttr(n, "axis", 0), x.rank())
		if !ok {
			return nil, nil
		}
		split := intsAttr(n, "split")
		if s := arg(1); s != nil {
			if !s.hasVal || s.ints == nil {
				return nil, nil
			}
			split = s.ints
		}
		k := int64(len(n.outputs))
		if split == nil {
			if k == 0 {
				return nil, nil
			}
			d := x.shape[axis]
			size := (d + k - 1) / k
			for i := int64(0); i < k; i++ {
				split = append(split, min(size, max(d-i*size, 0)))
			}
		}
		if int64(len(split)) != k {
			return nil, nil
		}
		var outs []*val
		for _, sz := range split {
			s := slices.Clone(x.shape)
			s[axis] = sz
			outs = append(outs, &val{shape: s, dtype: x.dtype})
		}
		return outs, nil

	case "Tile":
		r := arg(1)
		if x == nil || r == nil || !r.hasVal || r.ints == nil || len(r.ints) != x.rank() {
			return nil, nil
		}
		s := slices.Clone(x.shape)
		for i := range s {
			s[i] *= r.ints[i]
		}
		return one(&val{shape: s, dtype: x.dtype}), nil

	case "Range":
		st, li, de := arg(0), arg(1), arg(2)
		if st == nil || li == nil || de == nil || !st.hasVal || !li.hasVal || !de.hasVal ||
			st.ints == nil || li.ints == nil || de.ints == nil || len(st.ints) != 1 || len(li.ints) != 1 || len(de.ints) != 1 || de.ints[0] == 0 {
			return nil, nil
		}
		a, b, d := st.ints[0], li.ints[0], de.ints[0]
		cnt := max(int64(math.Ceil(float64(b-a)/float64(d))), 0)
		v := &val{shape: []int64{cnt}, dtype: st.dtype}
		if cnt <= maxConstElems {
			v.hasVal = true
			for i := int64(0); i < cnt; i++ {
				v.ints = append(v.ints, a+i*d)
			}
		}
		return one(v), nil
	}
	return nil, nil
}

// constantNode evaluates a Constant node.
func constantNode(n *node) *val {
	for name, a := range n.attrs {
		switch name {
		case "value":
			if a.t == nil {
				return nil
			}
			v := &val{shape: slices.Clone(a.t.dims), dtype: a.t.dtype}
			ints, floats, ok, err := a.t.values()
			if err == nil && ok {
				v.hasVal, v.ints, v.floats = true, ints, floats
			}
			return v
		case "value_int":
			return &val{shape: []int64{}, dtype: dtInt64, hasVal: true, ints: []int64{a.i}}
		case "value_ints":
			return &val{shape: []int64{int64(len(a.ints))}, dtype: dtInt64, hasVal: true, ints: slices.Clone(a.ints)}
		case "value_float":
			return &val{shape: []int64{}, dtype: dtFloat, hasVal: true, floats: []float64{a.f}}
		case "value_floats":
			return &val{shape: []int64{int64(len(a.floats))}, dtype: dtFloat, hasVal: true, floats: slices.Clone(a.floats)}
		}
	}
	return nil
}

func intAttr(n *node, name string, def int64) int64 {
	if a := n.attrs[name]; a != nil {
		return a.i
	}
	return def
}

func intsAttr(n *node, name string) []int64 {
	if a := n.attrs[name]; a != nil {
		return a.ints
	}
	return nil
}

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

func clampIdx(i, n int64) int64 {
	if i < 0 {
		i += n
	}
	return min(max(i, 0), n)
}

// spatial computes the output spatial dims of a convolution or pooling.
func spatial(n *node, in, kernel []int64, ceil bool) ([]int64, bool) {
	r := len(in)
	if len(kernel) != r {
		return nil, false
	}
	strides := intsAttr(n, "strides")
	dil := intsAttr(n, "dilations")
	pads := intsAttr(n, "pads")
	autoPad := strAttr(n, "auto_pad", "NOTSET")
	out := make([]int64, r)
	for i := 0; i < r; i++ {
		s, d := int64(1), int64(1)
		if i < len(strides) {
			s = strides[i]
		}
		if i < len(dil) {
			d = dil[i]
		}
		if s <= 0 || d <= 0 || kernel[i] <= 0 || in[i] < 0 {
			return nil, false
		}
		ek := d*(kernel[i]-1) + 1
		switch autoPad {
		case "SAME_UPPER", "SAME_LOWER":
			out[i] = (in[i] + s - 1) / s
		case "VALID":
			out[i] = (in[i] - ek + s) / s
		default:
			var pb, pe int64
			if len(pads) == 2*r {
				pb, pe = pads[i], pads[i+r]
			}
			span := in[i] + pb + pe - ek
			if span < 0 {
				return nil, false
			}
			if ceil {
				out[i] = (span+s-1)/s + 1
				// The last window must start inside the input or left padding.
				if (out[i]-1)*s >= in[i]+pb {
					out[i]--
				}
			} else {
				out[i] = span/s + 1
			}
		}
		if out[i] < 0 {
			return nil, false
		}
	}
	return out, true
}

// broadcast returns the numpy broadcast of two shapes.
func broadcast(a, b []int64) ([]int64, bool) {
	r := max(len(a), len(b))
	out := make([]int64, r)
	for i := 0; i < r; i++ {
		x, y := int64(1), int64(1)
		if j := i - (r - len(a)); j >= 0 {
			x = a[j]
		}
		if j := i - (r - len(b)); j >= 0 {
			y = b[j]
		}
		switch {
		case x == y, y == 1:
			out[i] = x
		case x == 1:
			out[i] = y
		default:
			return nil, false
		}
	}
	return out, true
}

// bcastIndex maps each flat index of shape out to the flat index of a
// tensor of shape s broadcast to it.
func bcastIndex(s, out []int64) []int64 {
	n := numel(out)
	idx := make([]int64, n)
	r := len(out)
	off := r - len(s)
	for k := int64(0); k < n; k++ {
		rem, src, stride := k, int64(0), int64(1)
		for i := r - 1; i >= 0; i-- {
			c := rem % out[i]
			rem /= out[i]
			if j := i - off; j >= 0 {
				if s[j] != 1 {
					src += c * stride
				}
				stride *= s[j]
			}
		}
		idx[k] = src
	}
	return idx
}

// binaryOp infers an elementwise binary op, evaluating small constant inputs.
func binaryOp(op string, a, b *val) *val {
	s, ok := broadcast(a.shape, b.shape)
	if !ok {
		return nil
	}
	v := &val{shape: s, dtype: a.dtype}
	switch op {
	case "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor":
		v.dtype = dtBool
	}
	nel := numel(s)
	if !a.hasVal || !b.hasVal || nel < 0 || nel > maxConstElems {
		return v
	}
	if (a.ints == nil) != (b.ints == nil) && numel(a.shape) > 0 && numel(b.shape) > 0 {
		return v
	}
	ai, bi := bcastIndex(a.shape, s), bcastIndex(b.shape, s)
	if a.ints != nil || b.ints != nil || (a.floats == nil && b.floats == nil) {
		for k := range ai {
			if int(ai[k]) >= len(a.ints) || int(bi[k]) >= len(b.ints) {
				return v
			}
			x, y := a.ints[ai[k]], b.ints[bi[k]]
			var r int64
			switch op {
			case "Add":
				r = x + y
			case "Sub":
				r = x - y
			case "Mul":
				r = x * y
			case "Div":
				if y == 0 {
					return v
				}
				r = x / y
			case "Mod":
				if y == 0 {
					return v
				}
				r = x % y
			case "Equal":
				r = b2i(x == y)
			case "Less":
				r = b2i(x < y)
			case "Greater":
				r = b2i(x > y)
			case "LessOrEqual":
				r = b2i(x <= y)
			case "GreaterOrEqual":
				r = b2i(x >= y)
			case "And":
				r = b2i(x != 0 && y != 0)
			case "Or":
				r = b2i(x != 0 || y != 0)
			default:
				return v
			}
			v.ints = append(v.ints, r)
		}
		v.hasVal = true
		return v
	}
	for k := range ai {
		if int(ai[k]) >= len(a.floats) || int(bi[k]) >= len(b.floats) {
			return v
		}
		x, y := a.floats[ai[k]], b.floats[bi[k]]
		switch op {
		case "Add":
			v.floats = append(v.floats, x+y)
		case "Sub":
			v.floats = append(v.floats, x-y)
		case "Mul":
			v.floats = append(v.floats, x*y)
		case "Div":
			v.floats = append(v.floats, x/y)
		case "Pow":
			v.floats = append(v.floats, math.Pow(x, y))
		case "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual":
			var r bool
			switch op {
			case "Equal":
				r = x == y
			case "Less":
				r = x < y
			case "Greater":
				r = x > y
			case "LessOrEqual":
				r = x <= y
			default:
				r = x >= y
			}
			v.ints = append(v.ints, b2i(r))
		default:
			return &val{shape: s, dtype: v.dtype}
		}
	}
	v.hasVal = true
	return v
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// matmulShape is numpy.matmul's shape rule.
func matmulShape(a, b []int64) ([]int64, bool) {
	if len(a) == 0 || len(b) == 0 {
		return nil, false
	}
	a1, b1 := len(a) == 1, len(b) == 1
	if a1 {
		a = []int64{1, a[0]}
	}
	if b1 {
		b = []int64{b[0], 1}
	}
	if a[len(a)-1] != b[len(b)-2] {
		return nil, false
	}
	batch, ok := broadcast(a[:len(a)-2], b[:len(b)-2])
	if !ok {
		return nil, false
	}
	out := batch
	if !a1 {
		out = append(out, a[len(a)-2])
	}
	if !b1 {
		out = append(out, b[len(b)-1])
	}
	return out, true
}

// reshape applies an ONNX Reshape target to shape.
func reshape(in, target []int64, allowZero bool) ([]int64, bool) {
	total := numel(in)
	if total < 0 {
		return nil, false
	}
	out := make([]int64, len(target))
	neg := -1
	known := int64(1)
	for i, t := range target {
		switch {
		case t == -1:
			if neg >= 0 {
				return nil, false
			}
			neg = i
			continue
		case t == 0 && !allowZero:
			if i >= len(in) {
				return nil, false
			}
			t = in[i]
		case t < 0:
			return nil, false
		}
		out[i] = t
		if t != 0 && known > math.MaxInt64/t {
			return nil, false
		}
		known *= t
	}
	if neg >= 0 {
		if known == 0 || total%known != 0 {
			return nil, false
		}
		out[neg] = total / known
	} else if known != total {
		return nil, false
	}
	return out, true
}

// slice infers Slice (opset 10+: starts, ends, axes, steps inputs; opset 1:
// attributes).
func slice(n *node, in []*val, opset int64) *val {
	if len(in) == 0 || in[0] == nil {
		return nil
	}
	x := in[0]
	get := func(i int, attr string) ([]int64, bool) {
		if i < len(in) && n.inputs[i] != "" {
			v := in[i]
			if v == nil || !v.hasVal || v.ints == nil {
				return nil, false
			}
			return v.ints, true
		}
		return intsAttr(n, attr), true
	}
	starts, ok1 := get(1, "starts")
	ends, ok2 := get(2, "ends")
	axes, ok3 := get(3, "axes")
	steps, ok4 := get(4, "steps")
	if !ok1 || !ok2 || !ok3 || !ok4 || len(starts) != len(ends) {
		return nil
	}
	r := x.rank()
	if axes == nil {
		for i := range starts {
			axes = append(axes, int64(i))
		}
	}
	if len(axes) != len(starts) || (steps != nil && len(steps) != len(starts)) {
		return nil
	}
	s := slices.Clone(x.shape)
	type rng struct{ start, step, count int64 }
	ranges := make([]rng, r)
	for i := range ranges {
		ranges[i] = rng{0, 1, s[i]}
	}
	for i, a := range axes {
		ax, ok := normAxis(a, r)
		if !ok {
			return nil
		}
		step := int64(1)
		if steps != nil {
			step = steps[i]
		}
		if step == 0 {
			return nil
		}
		d := s[ax]
		st, en := starts[i], ends[i]
		if st < 0 {
			st += d
		}
		if en < 0 {
			en += d
		}
		var cnt int64
		if step > 0 {
			st, en = min(max(st, 0), d), min(max(en, 0), d)
			cnt = max((en-st+step-1)/step, 0)
		} else {
			st, en = min(max(st, -1), d-1), min(max(en, -1), d-1)
			cnt = max((st-en-step-1)/(-step), 0)
		}
		s[ax] = cnt
		ranges[ax] = rng{st, step, cnt}
	}
	v := &val{shape: s, dtype: x.dtype}
	if x.hasVal && r == 1 {
		v.hasVal = true
		rg := ranges[0]
		for k := int64(0); k < rg.count; k++ {
			j := rg.start + k*rg.step
			if x.ints != nil {
				if j < 0 || j >= int64(len(x.ints)) {
					return &val{shape: s, dtype: x.dtype}
				}
				v.ints = append(v.ints, x.ints[j])
			} else {
				if j < 0 || j >= int64(len(x.floats)) {
					return &val{shape: s, dtype: x.dtype}
				}
				v.floats = append(v.floats, x.floats[j])
			}
		}
	}
	return v
}
