package graph

// Shape inference of operators that make tensors rather than transform
// them: Constant, ConstantOfShape, Range, and Shape and Size, whose values
// (a tensor's dimensions) start the Shape -> Gather -> Concat -> Reshape
// chains of exported models.

import (
	"fmt"
	"math"
	"slices"
)

// inferConstant is Constant (see constantNode).
func inferConstant(op opArgs) ([]*val, error) {
	return one(constantNode(op.n))
}

// inferConstantOfShape is ConstantOfShape: the shape is input 0's known
// values (a negative one makes the model invalid), filled with the value
// attribute's one element (default float 0); small results are evaluated.
func inferConstantOfShape(op opArgs) ([]*val, error) {
	x := op.arg(0)
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
	if a := op.n.attrs["value"]; a != nil && a.t != nil {
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
	return one(v)
}

// inferShape is Shape: input 0's dimensions from start to end (opset 15's
// attributes; negative counts from the end, clamped), as known int64
// values.
func inferShape(op opArgs) ([]*val, error) {
	x := op.arg(0)
	if x == nil {
		return nil, nil
	}
	r := int64(x.rank())
	start, end := intAttr(op.n, "start", 0), intAttr(op.n, "end", r)
	start, end = clampIdx(start, r), clampIdx(end, r)
	if end < start {
		end = start
	}
	vals := slices.Clone(x.shape[start:end])
	return one(&val{shape: []int64{int64(len(vals))}, dtype: dtInt64, hasVal: true, ints: vals})
}

// inferSize is Size: input 0's element count as a known int64 scalar.
func inferSize(op opArgs) ([]*val, error) {
	x := op.arg(0)
	if x == nil {
		return nil, nil
	}
	return one(&val{shape: []int64{}, dtype: dtInt64, hasVal: true, ints: []int64{numel(x.shape)}})
}

// inferRange is Range(start, limit, delta) over known integer scalars:
// ceil((limit-start)/delta) elements (at least 0), evaluated when small.
func inferRange(op opArgs) ([]*val, error) {
	st, li, de := op.arg(0), op.arg(1), op.arg(2)
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
	return one(v)
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
