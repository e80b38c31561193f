package graph

// Shape inference of elementwise operators: unary math, activations and
// normalizations keep their input's shape; binary and variadic operators
// broadcast their inputs (numpy rules); Where broadcasts all three. Small
// constant inputs are evaluated (binaryOp, Neg, Cast, Where) so that
// Shape -> ... -> Reshape chains resolve.

import (
	"math"
	"slices"
)

// inferSame passes its input through unchanged (Identity): the output is
// the input's val itself.
func inferSame(op opArgs) ([]*val, error) {
	x := op.arg(0)
	if x == nil {
		return nil, nil
	}
	return one(x)
}

// inferDropout is Dropout at inference: output 0 is the input itself, the
// optional mask (output 1) booleans of its shape.
func inferDropout(op opArgs) ([]*val, error) {
	x := op.arg(0)
	if x == nil {
		return nil, nil
	}
	return []*val{x, {shape: slices.Clone(x.shape), dtype: dtBool}}, nil
}

// inferUnary is an operator whose output has its input's shape and element
// type: unary math, activations, Softmax, CumSum, normalizations. Values
// are not evaluated.
func inferUnary(op opArgs) ([]*val, error) {
	x := op.arg(0)
	if x == nil {
		return nil, nil
	}
	return one(&val{shape: slices.Clone(x.shape), dtype: x.dtype})
}

// inferPredicate is a unary operator answering booleans of its input's
// shape (Not, IsNaN, IsInf).
func inferPredicate(op opArgs) ([]*val, error) {
	x := op.arg(0)
	if x == nil {
		return nil, nil
	}
	return one(&val{shape: slices.Clone(x.shape), dtype: dtBool})
}

// inferNeg is Neg, evaluated when its input's values are known.
func inferNeg(op opArgs) ([]*val, error) {
	x := op.arg(0)
	if x == nil {
		return nil, nil
	}
	v := &val{shape: slices.Clone(x.shape), dtype: x.dtype}
	if x.hasVal {
		v.hasVal = true
		for _, a := range x.ints {
			v.ints = append(v.ints, -a)
		}
		for _, a := range x.floats {
			v.floats = append(v.floats, -a)
		}
	}
	return one(v)
}

// inferCast is Cast to the "to" type, converting known values (floats
// truncate toward zero; a NaN or a float beyond ±2^62 leaves the integer
// values unknown; any nonzero value is true as a bool).
func inferCast(op opArgs) ([]*val, error) {
	x := op.arg(0)
	if x == nil {
		return nil, nil
	}
	to := int32(intAttr(op.n, "to", 0))
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
	return one(v)
}

// inferBinary is a broadcasting binary operator: arithmetic, comparisons
// and logic (booleans out), evaluated by binaryOp.
func inferBinary(op opArgs) ([]*val, error) {
	a, b := op.arg(0), op.arg(1)
	if a == nil || b == nil {
		return nil, nil
	}
	return one(binaryOp(op.n.opType, a, b))
}

// inferVariadic is Max, Min, Sum or Mean: every input broadcast together,
// the element type the last input's.
func inferVariadic(op opArgs) ([]*val, error) {
	var shape []int64
	dt := int32(0)
	for _, v := range op.in {
		if v == nil {
			return nil, nil
		}
		s, ok := broadcast(shape, v.shape)
		if !ok {
			return nil, nil
		}
		shape, dt = s, v.dtype
	}
	return one(&val{shape: shape, dtype: dt})
}

// inferWhere is Where(cond, a, b): the three inputs broadcast, evaluated
// when all are known and small (and a and b are both integers or both
// floats).
func inferWhere(op opArgs) ([]*val, error) {
	c, a, b := op.arg(0), op.arg(1), op.arg(2)
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
	return one(v)
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
