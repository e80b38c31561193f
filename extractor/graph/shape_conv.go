package graph

// Shape inference of convolutions and pools: the batch axis is kept, the
// channel axis comes from the weights (convolutions) or the input (pools),
// and the spatial axes follow the kernel, strides, dilations and padding
// (spatial).

import "slices"

// inferConvAt returns the function of a convolution whose weights are input
// weights: 1 for Conv and ConvInteger, 3 for QLinearConv (x, x_scale,
// x_zero_point, w, ...). The output is [N, M, spatial...] with M the
// weights' first axis; the kernel is the kernel_shape attribute, else the
// weights' spatial axes.
func inferConvAt(weights int) inferFunc {
	return func(op opArgs) ([]*val, error) {
		x, w := op.arg(0), op.arg(weights)
		if x == nil || w == nil || x.rank() < 3 || w.rank() != x.rank() {
			return nil, nil
		}
		kernel := intsAttr(op.n, "kernel_shape")
		if kernel == nil {
			kernel = w.shape[2:]
		}
		sp, ok := spatial(op.n, x.shape[2:], kernel, false)
		if !ok {
			return nil, nil
		}
		return one(&val{shape: append([]int64{x.shape[0], w.shape[0]}, sp...), dtype: x.dtype})
	}
}

// pool is the output of a windowed pool: [N, C, spatial...] by the
// kernel_shape attribute and ceil_mode; nil when unknown.
func pool(op opArgs) *val {
	x := op.arg(0)
	if x == nil || x.rank() < 3 {
		return nil
	}
	sp, ok := spatial(op.n, x.shape[2:], intsAttr(op.n, "kernel_shape"), intAttr(op.n, "ceil_mode", 0) != 0)
	if !ok {
		return nil
	}
	return &val{shape: append([]int64{x.shape[0], x.shape[1]}, sp...), dtype: x.dtype}
}

// inferPool is AveragePool or LpPool (see pool).
func inferPool(op opArgs) ([]*val, error) {
	v := pool(op)
	if v == nil {
		return nil, nil
	}
	return one(v)
}

// inferMaxPool is MaxPool (see pool), with its optional second output, the
// int64 indices of the maxima, of the same shape.
func inferMaxPool(op opArgs) ([]*val, error) {
	v := pool(op)
	if v == nil {
		return nil, nil
	}
	if len(op.n.outputs) > 1 {
		return []*val{v, {shape: slices.Clone(v.shape), dtype: dtInt64}}, nil
	}
	return one(v)
}

// inferGlobalPool is a global pool: every spatial axis becomes 1.
func inferGlobalPool(op opArgs) ([]*val, error) {
	x := op.arg(0)
	if x == nil || x.rank() < 2 {
		return nil, nil
	}
	s := slices.Clone(x.shape)
	for i := 2; i < len(s); i++ {
		s[i] = 1
	}
	return one(&val{shape: s, dtype: x.dtype})
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
