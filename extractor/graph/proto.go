package graph

// Low-level protobuf wire handling. Only the ONNX field numbers this package
// interprets are named here; every other field is kept as raw bytes so that a
// pruned model re-serializes the rest of the original verbatim.

import (
	"encoding/binary"
	"fmt"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of onnx.proto (ONNX IR version 8+) that this package reads.
const (
	// ModelProto
	fModelIRVersion = 1
	fModelGraph     = 7
	fModelOpset     = 8

	// OperatorSetIdProto
	fOpsetDomain  = 1
	fOpsetVersion = 2

	// GraphProto
	fGraphNode        = 1
	fGraphName        = 2
	fGraphInitializer = 5
	fGraphInput       = 11
	fGraphOutput      = 12
	fGraphValueInfo   = 13

	// NodeProto
	fNodeInput     = 1
	fNodeOutput    = 2
	fNodeName      = 3
	fNodeOpType    = 4
	fNodeAttribute = 5
	fNodeDomain    = 7

	// AttributeProto
	fAttrName    = 1
	fAttrF       = 2
	fAttrI       = 3
	fAttrS       = 4
	fAttrT       = 5
	fAttrG       = 6
	fAttrFloats  = 7
	fAttrInts    = 8
	fAttrStrings = 9
	fAttrGraphs  = 11
	fAttrDoc     = 13
	fAttrType    = 20

	// TensorProto
	fTensorDims       = 1
	fTensorDataType   = 2
	fTensorFloatData  = 4
	fTensorInt32Data  = 5
	fTensorInt64Data  = 7
	fTensorName       = 8
	fTensorRawData    = 9
	fTensorDoubleData = 10
	fTensorDoc        = 12
	fTensorDataLoc    = 14

	// ValueInfoProto
	fValueName = 1
	fValueType = 2

	// TypeProto / TypeProto.Tensor / TensorShapeProto / Dimension
	fTypeTensor      = 1
	fTensorTypeElem  = 1
	fTensorTypeShape = 2
	fShapeDim        = 1
	fDimValue        = 1
	fDimParam        = 2
)

// TensorProto.DataType values used here.
const (
	dtUndefined = 0
	dtFloat     = 1
	dtUint8     = 2
	dtInt8      = 3
	dtInt32     = 6
	dtInt64     = 7
	dtBool      = 9
	dtFloat16   = 10
	dtDouble    = 11
)

// field is one encoded protobuf field.
type field struct {
	num protowire.Number
	typ protowire.Type
	// raw is the whole field: tag and value.
	raw []byte
	// val is the payload of a length-delimited field.
	val []byte
	// u is the value of a varint or fixed field.
	u uint64
}

// fields splits an encoded message into its fields. It never panics on
// malformed input.
func fields(b []byte) ([]field, error) {
	var out []field
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, fmt.Errorf("%w: bad tag: %v", ErrBadModel, protowire.ParseError(n))
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return nil, fmt.Errorf("%w: field %d: %v", ErrBadModel, num, protowire.ParseError(m))
		}
		f := field{num: num, typ: typ, raw: b[:n+m]}
		v := b[n : n+m]
		switch typ {
		case protowire.BytesType:
			f.val, _ = protowire.ConsumeBytes(v)
		case protowire.VarintType:
			f.u, _ = protowire.ConsumeVarint(v)
		case protowire.Fixed32Type:
			x, _ := protowire.ConsumeFixed32(v)
			f.u = uint64(x)
		case protowire.Fixed64Type:
			f.u, _ = protowire.ConsumeFixed64(v)
		}
		out = append(out, f)
		b = b[n+m:]
	}
	return out, nil
}

// str returns the field as a string, or an error if it is not
// length-delimited.
func (f field) str() (string, error) {
	if f.typ != protowire.BytesType {
		return "", fmt.Errorf("%w: field %d: want bytes, got wire type %d", ErrBadModel, f.num, f.typ)
	}
	return string(f.val), nil
}

// msg returns the payload of a length-delimited field.
func (f field) msg() ([]byte, error) {
	if f.typ != protowire.BytesType {
		return nil, fmt.Errorf("%w: field %d: want message, got wire type %d", ErrBadModel, f.num, f.typ)
	}
	return f.val, nil
}

// int returns a varint field as int64.
func (f field) int() (int64, error) {
	if f.typ != protowire.VarintType {
		return 0, fmt.Errorf("%w: field %d: want varint, got wire type %d", ErrBadModel, f.num, f.typ)
	}
	return int64(f.u), nil
}

// appendInts appends the values of a repeated int64/int32 field, packed or
// not.
func (f field) appendInts(dst []int64) ([]int64, error) {
	switch f.typ {
	case protowire.VarintType:
		return append(dst, int64(f.u)), nil
	case protowire.BytesType:
		b := f.val
		for len(b) > 0 {
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return nil, fmt.Errorf("%w: field %d: bad packed varint", ErrBadModel, f.num)
			}
			dst = append(dst, int64(v))
			b = b[n:]
		}
		return dst, nil
	}
	return nil, fmt.Errorf("%w: field %d: want ints, got wire type %d", ErrBadModel, f.num, f.typ)
}

// appendFloats appends the values of a repeated float field, packed or not.
func (f field) appendFloats(dst []float64) ([]float64, error) {
	switch f.typ {
	case protowire.Fixed32Type:
		return append(dst, float64(math.Float32frombits(uint32(f.u)))), nil
	case protowire.BytesType:
		if len(f.val)%4 != 0 {
			return nil, fmt.Errorf("%w: field %d: packed floats of %d bytes", ErrBadModel, f.num, len(f.val))
		}
		for i := 0; i+4 <= len(f.val); i += 4 {
			dst = append(dst, float64(math.Float32frombits(binary.LittleEndian.Uint32(f.val[i:]))))
		}
		return dst, nil
	}
	return nil, fmt.Errorf("%w: field %d: want floats, got wire type %d", ErrBadModel, f.num, f.typ)
}

// appendDoubles appends the values of a repeated double field.
func (f field) appendDoubles(dst []float64) ([]float64, error) {
	switch f.typ {
	case protowire.Fixed64Type:
		return append(dst, math.Float64frombits(f.u)), nil
	case protowire.BytesType:
		if len(f.val)%8 != 0 {
			return nil, fmt.Errorf("%w: field %d: packed doubles of %d bytes", ErrBadModel, f.num, len(f.val))
		}
		for i := 0; i+8 <= len(f.val); i += 8 {
			dst = append(dst, math.Float64frombits(binary.LittleEndian.Uint64(f.val[i:])))
		}
		return dst, nil
	}
	return nil, fmt.Errorf("%w: field %d: want doubles, got wire type %d", ErrBadModel, f.num, f.typ)
}

// appendMessage appends field num holding msg to b.
func appendMessage(b []byte, num protowire.Number, msg []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, msg)
}

// appendString appends field num holding s to b.
func appendString(b []byte, num protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

// appendVarint appends field num holding v to b.
func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}
