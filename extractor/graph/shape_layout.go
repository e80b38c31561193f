package graph

// Shape inference of operators that rearrange, add or remove axes without
// computing: Flatten, Reshape, Transpose, Squeeze, Unsqueeze, Expand, Tile
// and Pad. Reshape, Squeeze and Unsqueeze keep known values (the values
// are in the same order), so Shape -> ... -> Reshape chains resolve.

import (
	"math"
	"slices"
)

// inferFlatten is Flatten: [prod(dims before axis), prod(dims from axis)].
func inferFlatten(op opArgs) ([]*val, error) {
	x := op.arg(0)
	if x == nil {
		return nil, nil
	}
	axis, ok := normAxis(intAttr(op.n, "axis", 1), x.rank()+1)
	if !ok {
		return nil, nil
	}
	a, b := numel(x.shape[:axis]), numel(x.shape[axis:])
	if a < 0 || b < 0 {
		return nil, nil
	}
	return one(&val{shape: []int64{a, b}, dtype: x.dtype})
}

// inferReshape is Reshape to the known values of input 1 (see reshape).
func inferReshape(op opArgs) ([]*val, error) {
	x, sh := op.arg(0), op.arg(1)
	if x == nil || sh == nil || !sh.hasVal || sh.ints == nil {
		return nil, nil
	}
	allowZero := intAttr(op.n, "allowzero", 0) != 0
	s, ok := reshape(x.shape, sh.ints, allowZero)
	if !ok {
		return nil, nil
	}
	return one(withValues(&val{shape: s, dtype: x.dtype}, x))
}

// withValues gives v the known values of x, in the same order (a
// reshaped x), and returns v.
func withValues(v, x *val) *val {
	if x.hasVal {
		v.hasVal, v.ints, v.floats = true, x.ints, x.floats
	}
	return v
}

// inferTranspose is Transpose by the perm attribute (default: the axes
// reversed); a perm that is not a permutation of the axes is unknown.
func inferTranspose(op opArgs) ([]*val, error) {
	x := op.arg(0)
	if x == nil {
		return nil, nil
	}
	perm := intsAttr(op.n, "perm")
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
	v := &val{shape: s, dtype: x.dtype}
	// Known values are permuted too (torch's pad arithmetic transposes a
	// small table).
	src := make([]int64, r)
	gatherStrided(v, x, s, func(idx []int64) (int64, bool) {
		for i, p := range perm {
			src[p] = idx[i]
		}
		return flatIndex(src, x.shape), true
	})
	return one(v)
}

// squeezeAxes returns the axes of Squeeze or Unsqueeze: input 1 from opset
// 13 on (or when the axes attribute is absent), else the attribute; nil
// when absent. ok is false when input 1 is given but its values are not
// known.
func squeezeAxes(op opArgs) (axes []int64, ok bool) {
	axes = intsAttr(op.n, "axes")
	if op.opset >= 13 || axes == nil {
		if a := op.arg(1); a != nil {
			if !a.hasVal || a.ints == nil {
				return nil, false
			}
			axes = a.ints
		}
	}
	return axes, true
}

// inferUnsqueeze is Unsqueeze: a 1 inserted at each of the axes (counted in
// the output's rank), values kept.
func inferUnsqueeze(op opArgs) ([]*val, error) {
	x := op.arg(0)
	if x == nil {
		return nil, nil
	}
	axes, ok := squeezeAxes(op)
	if !ok {
		return nil, nil
	}
	r := x.rank() + len(axes)
	ins := make([]bool, r)
	for _, a := range axes {
		i, ok := normAxis(a, r)
		if !ok || ins[i] {
			return nil, nil
		}
		ins[i] = true
	}
	var s []int64
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
	return one(withValues(&val{shape: s, dtype: x.dtype}, x))
}

// inferSqueeze is Squeeze: the axes removed (without axes, every axis of
// size 1), values kept.
func inferSqueeze(op opArgs) ([]*val, error) {
	x := op.arg(0)
	if x == nil {
		return nil, nil
	}
	axes, ok := squeezeAxes(op)
	if !ok {
		return nil, nil
	}
	drop := make([]bool, x.rank())
	for _, a := range axes {
		i, ok := normAxis(a, x.rank())
		if !ok {
			return nil, nil
		}
		drop[i] = true
	}
	s := []int64{}
	for i, d := range x.shape {
		if (axes == nil && d == 1) || drop[i] {
			continue
		}
		s = append(s, d)
	}
	return one(withValues(&val{shape: s, dtype: x.dtype}, x))
}

// inferExpand is Expand: the input broadcast with the known shape in
// input 1.
func inferExpand(op opArgs) ([]*val, error) {
	x, sh := op.arg(0), op.arg(1)
	if x == nil || sh == nil || !sh.hasVal || sh.ints == nil {
		return nil, nil
	}
	s, ok := broadcast(x.shape, sh.ints)
	if !ok {
		return nil, nil
	}
	return one(&val{shape: s, dtype: x.dtype})
}

// inferTile is Tile: each axis multiplied by the known repeats in input 1.
func inferTile(op opArgs) ([]*val, error) {
	x, r := op.arg(0), op.arg(1)
	if x == nil || r == nil || !r.hasVal || r.ints == nil || len(r.ints) != x.rank() {
		return nil, nil
	}
	s := slices.Clone(x.shape)
	for i := range s {
		s[i] *= r.ints[i]
	}
	return one(&val{shape: s, dtype: x.dtype})
}

// inferPad is Pad: pads (input 1 when given, else the attribute) are
// [begins..., ends...] over the axes (input 3 when given, else all); an
// axis padded below 0 is unknown.
func inferPad(op opArgs) ([]*val, error) {
	x := op.arg(0)
	if x == nil {
		return nil, nil
	}
	pads := intsAttr(op.n, "pads")
	if p := op.arg(1); p != nil {
		if !p.hasVal || p.ints == nil {
			return nil, nil
		}
		pads = p.ints
	}
	axes := make([]int64, 0, x.rank())
	if a := op.arg(3); a != nil {
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
	return one(&val{shape: s, dtype: x.dtype})
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
