package graph

// Shape inference of reductions: Reduce* over a set of axes, ArgMax and
// ArgMin over one, each axis kept as 1 (keepdims, the default) or removed.

import "slices"

// inferReduce is a Reduce* operator: the axes are input 1 when given (opset
// 18, and ReduceSum from 13), else the attribute; no axes means all of
// them, or none with noop_with_empty_axes.
func inferReduce(op opArgs) ([]*val, error) {
	x := op.arg(0)
	if x == nil {
		return nil, nil
	}
	axes := intsAttr(op.n, "axes")
	if a := op.arg(1); a != nil {
		if !a.hasVal || a.ints == nil {
			return nil, nil
		}
		axes = a.ints
	}
	return reduceOver(op, x, axes, x.dtype)
}

// inferArgReduce is ArgMax or ArgMin: int64 indices, reduced over the axis
// attribute (default 0).
func inferArgReduce(op opArgs) ([]*val, error) {
	x := op.arg(0)
	if x == nil {
		return nil, nil
	}
	return reduceOver(op, x, []int64{intAttr(op.n, "axis", 0)}, dtInt64)
}

// reduceOver is x reduced over axes (none: every axis, unless
// noop_with_empty_axes asks for x's shape) with keepdims, answering
// element type dt.
func reduceOver(op opArgs, x *val, axes []int64, dt int32) ([]*val, error) {
	keep := intAttr(op.n, "keepdims", 1) != 0
	red := make([]bool, x.rank())
	if len(axes) == 0 {
		if intAttr(op.n, "noop_with_empty_axes", 0) != 0 {
			return one(&val{shape: slices.Clone(x.shape), dtype: x.dtype})
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
	return one(&val{shape: s, dtype: dt})
}
