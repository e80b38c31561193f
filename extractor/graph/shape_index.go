package graph

// Shape inference of operators that join, cut or pick along an axis:
// Concat, Split, Slice and Gather. On 1-D tensors with known values (shape
// vectors) Concat, Slice and Gather evaluate them.

import (
	"fmt"
	"slices"
)

// inferConcat is Concat along the axis attribute; every input must be
// known, of one rank, and agree on the other axes. 1-D inputs with known
// values (all integers or all floats) are concatenated.
func inferConcat(op opArgs) ([]*val, error) {
	in := op.in
	if len(in) == 0 || in[0] == nil {
		return nil, nil
	}
	r := in[0].rank()
	axis, ok := normAxis(intAttr(op.n, "axis", 0), r)
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
	return one(out)
}

// inferSplit is Split along the axis attribute into one output per node
// output: sizes from input 1 when given, else the split attribute, else
// equal parts (the last one smaller when the axis does not divide).
func inferSplit(op opArgs) ([]*val, error) {
	x := op.arg(0)
	if x == nil {
		return nil, nil
	}
	axis, ok := normAxis(intAttr(op.n, "axis", 0), x.rank())
	if !ok {
		return nil, nil
	}
	split := intsAttr(op.n, "split")
	if s := op.arg(1); s != nil {
		if !s.hasVal || s.ints == nil {
			return nil, nil
		}
		split = s.ints
	}
	k := int64(len(op.n.outputs))
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
}

// inferSlice is Slice (see slice).
func inferSlice(op opArgs) ([]*val, error) {
	return one(slice(op.n, op.in, op.opset))
}

// inferGather is Gather along the axis attribute: the indices' shape
// replaces that axis. A 1-D input with known values is indexed when the
// indices are known; an index out of range makes the model invalid.
func inferGather(op opArgs) ([]*val, error) {
	x, idx := op.arg(0), op.arg(1)
	if x == nil || idx == nil || x.rank() == 0 {
		return nil, nil
	}
	axis, ok := normAxis(intAttr(op.n, "axis", 0), x.rank())
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
	return one(v)
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
	if !x.hasVal {
		return v
	}
	// Known values are sliced at any rank (torch's pad arithmetic reverses
	// a [n,2] table with a step of -1).
	src := make([]int64, len(ranges))
	ok := gatherStrided(v, x, s, func(idx []int64) (int64, bool) {
		for ax, rg := range ranges {
			src[ax] = rg.start + idx[ax]*rg.step
			if src[ax] < 0 || src[ax] >= x.shape[ax] {
				return 0, false
			}
		}
		return flatIndex(src, x.shape), true
	})
	if !ok {
		return &val{shape: s, dtype: x.dtype}
	}
	return v
}

// inferScatter is ScatterND, ScatterElements or Scatter: the output is the
// data input's shape and type (values are not evaluated).
func inferScatter(op opArgs) ([]*val, error) {
	x := op.arg(0)
	if x == nil {
		return nil, nil
	}
	return one(&val{shape: slices.Clone(x.shape), dtype: x.dtype})
}
