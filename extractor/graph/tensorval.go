package graph

import (
	"encoding/binary"
	"fmt"
	"math"
)

// maxConstElems bounds the size of tensors whose values shape inference
// evaluates (shape arithmetic: Shape, Gather, Concat, Reshape targets...).
const maxConstElems = 4096

// isIntType reports whether an ONNX data type holds integers or booleans.
func isIntType(dt int32) bool {
	switch dt {
	case 2, 3, 4, 5, 6, 7, 9, 12, 13: // uint8 int8 uint16 int16 int32 int64 bool uint32 uint64
		return true
	}
	return false
}

// numel returns the number of elements of shape, or -1 when a dimension is
// unknown or the product overflows.
func numel(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return -1
		}
		if d != 0 && n > math.MaxInt64/d {
			return -1
		}
		n *= d
	}
	return n
}

// values decodes a small tensor's contents: ints for integer and boolean
// types, floats for floating types. ok is false when the tensor is too large,
// external or of a type not decoded here.
func (t *tensor) values() (ints []int64, floats []float64, ok bool, err error) {
	n := numel(t.dims)
	if n < 0 || n > maxConstElems || t.external {
		return nil, nil, false, nil
	}
	fs, err := fields(t.msg)
	if err != nil {
		return nil, nil, false, err
	}
	var raw []byte
	hasRaw := false
	for _, f := range fs {
		switch f.num {
		case fTensorRawData:
			raw, err = f.msg()
			if err != nil {
				return nil, nil, false, err
			}
			hasRaw = true
		case fTensorInt32Data, fTensorInt64Data:
			if ints, err = f.appendInts(ints); err != nil {
				return nil, nil, false, err
			}
		case fTensorFloatData:
			if floats, err = f.appendFloats(floats); err != nil {
				return nil, nil, false, err
			}
		case fTensorDoubleData:
			if floats, err = f.appendDoubles(floats); err != nil {
				return nil, nil, false, err
			}
		}
	}
	if hasRaw {
		ints, floats = nil, nil
		size := dtypeSize(t.dtype)
		if size == 0 {
			return nil, nil, false, nil
		}
		if int64(len(raw)) != n*int64(size) {
			return nil, nil, false, fmt.Errorf("%w: tensor %q: raw_data has %d bytes for %d elements", ErrBadModel, t.name, len(raw), n)
		}
		for i := int64(0); i < n; i++ {
			b := raw[i*int64(size):]
			switch t.dtype {
			case dtFloat:
				floats = append(floats, float64(math.Float32frombits(binary.LittleEndian.Uint32(b))))
			case dtDouble:
				floats = append(floats, math.Float64frombits(binary.LittleEndian.Uint64(b)))
			case dtFloat16:
				floats = append(floats, halfToFloat(binary.LittleEndian.Uint16(b)))
			case dtInt64:
				ints = append(ints, int64(binary.LittleEndian.Uint64(b)))
			case 13: // uint64
				ints = append(ints, int64(binary.LittleEndian.Uint64(b)))
			case dtInt32:
				ints = append(ints, int64(int32(binary.LittleEndian.Uint32(b))))
			case 12: // uint32
				ints = append(ints, int64(binary.LittleEndian.Uint32(b)))
			case 5: // int16
				ints = append(ints, int64(int16(binary.LittleEndian.Uint16(b))))
			case 4: // uint16
				ints = append(ints, int64(binary.LittleEndian.Uint16(b)))
			case dtInt8:
				ints = append(ints, int64(int8(b[0])))
			case dtUint8, dtBool:
				ints = append(ints, int64(b[0]))
			}
		}
	} else if t.dtype == dtFloat16 && int64(len(ints)) == n {
		// float16 values travel in int32_data as bit patterns.
		for _, v := range ints {
			floats = append(floats, halfToFloat(uint16(v)))
		}
		ints = nil
	}
	if isIntType(t.dtype) {
		if int64(len(ints)) != n {
			return nil, nil, false, nil
		}
		return ints, nil, true, nil
	}
	switch t.dtype {
	case dtFloat, dtDouble, dtFloat16:
		if int64(len(floats)) != n {
			return nil, nil, false, nil
		}
		return nil, floats, true, nil
	}
	return nil, nil, false, nil
}

// dtypeSize returns the bytes per element of the fixed-size types decoded
// from raw_data, 0 for others.
func dtypeSize(dt int32) int {
	switch dt {
	case dtFloat, dtInt32, 12:
		return 4
	case dtDouble, dtInt64, 13:
		return 8
	case dtFloat16, 4, 5:
		return 2
	case dtInt8, dtUint8, dtBool:
		return 1
	}
	return 0
}

// halfToFloat converts an IEEE 754 binary16 bit pattern.
func halfToFloat(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp := int(h>>10) & 0x1f
	frac := float64(h & 0x3ff)
	switch exp {
	case 0:
		return sign * frac * math.Pow(2, -24)
	case 31:
		if frac == 0 {
			return sign * math.Inf(1)
		}
		return math.NaN()
	}
	return sign * (1 + frac/1024) * math.Pow(2, float64(exp-15))
}

// gatherStrided gives v, of shape out, the known values of x rearranged:
// srcOf maps each index of v (visited in C order, the slice reused) to the
// flat index in x it copies, or reports false. It reports whether v got
// values: not when x has none, v would hold more than maxConstElems, or
// srcOf fails or points outside x.
func gatherStrided(v, x *val, out []int64, srcOf func(idx []int64) (int64, bool)) bool {
	n := numel(out)
	if !x.hasVal || n < 0 || n > maxConstElems {
		return false
	}
	have := int64(len(x.floats))
	if x.ints != nil {
		have = int64(len(x.ints))
	}
	var ints []int64
	var floats []float64
	idx := make([]int64, len(out))
	for k := int64(0); k < n; k++ {
		j, ok := srcOf(idx)
		if !ok || j < 0 || j >= have {
			return false
		}
		if x.ints != nil {
			ints = append(ints, x.ints[j])
		} else {
			floats = append(floats, x.floats[j])
		}
		for ax := len(idx) - 1; ax >= 0; ax-- {
			idx[ax]++
			if idx[ax] < out[ax] {
				break
			}
			idx[ax] = 0
		}
	}
	if x.ints != nil && ints == nil {
		ints = []int64{}
	}
	v.hasVal, v.ints, v.floats = true, ints, floats
	return true
}

// flatIndex is the C-order offset of idx in a tensor of the given shape.
func flatIndex(idx, shape []int64) int64 {
	var off int64
	for ax, i := range idx {
		off = off*shape[ax] + i
	}
	return off
}
