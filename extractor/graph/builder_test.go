package graph

// A tiny ModelProto encoder for unit tests and fuzz seeds. It writes the
// same field numbers the package reads, plus fields it does not interpret
// (producer_name, doc_string, metadata) to check they survive pruning.

import (
	"encoding/binary"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

type tAttr struct {
	name  string
	i     *int64
	ints  []int64
	t     []byte // encoded TensorProto
	s     string
	isStr bool
}

func attrInt(name string, v int64) tAttr     { return tAttr{name: name, i: &v} }
func attrInts(name string, v ...int64) tAttr { return tAttr{name: name, ints: v} }
func attrTensor(name string, t []byte) tAttr { return tAttr{name: name, t: t} }
func attrString(name string, s string) tAttr { return tAttr{name: name, s: s, isStr: true} }
func encNode(op, name string, in, out []string, attrs ...tAttr) []byte {
	var b []byte
	for _, s := range in {
		b = appendString(b, fNodeInput, s)
	}
	for _, s := range out {
		b = appendString(b, fNodeOutput, s)
	}
	b = appendString(b, fNodeName, name)
	b = appendString(b, fNodeOpType, op)
	for _, a := range attrs {
		var ab []byte
		ab = appendString(ab, fAttrName, a.name)
		switch {
		case a.i != nil:
			ab = appendVarint(ab, fAttrI, uint64(*a.i))
			ab = appendVarint(ab, fAttrType, 2)
		case a.ints != nil:
			var packed []byte
			for _, v := range a.ints {
				packed = protowire.AppendVarint(packed, uint64(v))
			}
			ab = appendMessage(ab, fAttrInts, packed)
			ab = appendVarint(ab, fAttrType, 7)
		case a.t != nil:
			ab = appendMessage(ab, fAttrT, a.t)
			ab = appendVarint(ab, fAttrType, 4)
		case a.isStr:
			ab = appendString(ab, fAttrS, a.s)
			ab = appendVarint(ab, fAttrType, 3)
		}
		b = appendMessage(b, fNodeAttribute, ab)
	}
	return b
}

func encFloatTensor(name string, dims []int64, vals []float32) []byte {
	var b []byte
	for _, d := range dims {
		b = appendVarint(b, fTensorDims, uint64(d))
	}
	b = appendVarint(b, fTensorDataType, dtFloat)
	b = appendString(b, fTensorName, name)
	raw := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
	}
	return appendMessage(b, fTensorRawData, raw)
}

func encInt64Tensor(name string, dims []int64, vals []int64) []byte {
	var b []byte
	for _, d := range dims {
		b = appendVarint(b, fTensorDims, uint64(d))
	}
	b = appendVarint(b, fTensorDataType, dtInt64)
	b = appendString(b, fTensorName, name)
	var packed []byte
	for _, v := range vals {
		packed = protowire.AppendVarint(packed, uint64(v))
	}
	return appendMessage(b, fTensorInt64Data, packed)
}

// encVI encodes a float tensor ValueInfo; a negative dim becomes "batch".
func encVI(name string, dims ...int64) []byte {
	ds := make([]dim, len(dims))
	for i, d := range dims {
		ds[i] = dim{value: d}
		if d < 0 {
			ds[i] = dim{value: -1, param: "batch"}
		}
	}
	return encodeValueInfo(name, dtFloat, true, ds)
}

type tGraph struct {
	nodes, inits, inputs, outputs, valueInfo [][]byte
}

func (g tGraph) encode() []byte {
	var b []byte
	for _, n := range g.nodes {
		b = appendMessage(b, fGraphNode, n)
	}
	b = appendString(b, fGraphName, "test")
	for _, t := range g.inits {
		b = appendMessage(b, fGraphInitializer, t)
	}
	b = appendString(b, 10, "graph doc string") // GraphProto.doc_string
	for _, v := range g.inputs {
		b = appendMessage(b, fGraphInput, v)
	}
	for _, v := range g.outputs {
		b = appendMessage(b, fGraphOutput, v)
	}
	for _, v := range g.valueInfo {
		b = appendMessage(b, fGraphValueInfo, v)
	}
	return b
}

func encModel(g tGraph) []byte {
	var b []byte
	b = appendVarint(b, fModelIRVersion, 8)
	b = appendString(b, 2, "featurefs-test") // producer_name
	b = appendMessage(b, fModelGraph, g.encode())
	var op []byte
	op = appendString(op, fOpsetDomain, "")
	op = appendVarint(op, fOpsetVersion, 17)
	b = appendMessage(b, fModelOpset, op)
	var meta []byte // metadata_props: StringStringEntryProto{key=1, value=2}
	meta = appendString(meta, 1, "k")
	meta = appendString(meta, 2, "v")
	return appendMessage(b, 14, meta)
}

func ones(n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = 1
	}
	return v
}

// smallCNN is input[batch,2,8,8] -> Conv(4) -> Relu -> branch (Conv 4->4 and
// identity) -> Add -> Relu -> MaxPool -> GlobalAveragePool -> Reshape(const)
// -> Gemm(3). Its nodes are written out of topological order on purpose.
func smallCNN() []byte {
	g := tGraph{
		inits: [][]byte{
			encFloatTensor("w1", []int64{4, 2, 3, 3}, ones(72)),
			encFloatTensor("w2", []int64{4, 4, 1, 1}, ones(16)),
			encFloatTensor("fcw", []int64{3, 4}, ones(12)),
			encFloatTensor("fcb", []int64{3}, ones(3)),
			encInt64Tensor("shape", []int64{2}, []int64{0, -1}),
		},
		inputs:  [][]byte{encVI("x", -1, 2, 8, 8)},
		outputs: [][]byte{encVI("y", -1, 3)},
	}
	g.nodes = [][]byte{
		encNode("Conv", "c1", []string{"x", "w1"}, []string{"c1o"}, attrInts("pads", 1, 1, 1, 1)),
		encNode("Relu", "r1", []string{"c1o"}, []string{"r1o"}),
		encNode("Add", "add", []string{"c2o", "r1o"}, []string{"addo"}),
		encNode("Conv", "c2", []string{"r1o", "w2"}, []string{"c2o"}),
		encNode("Relu", "r2", []string{"addo"}, []string{"r2o"}),
		encNode("MaxPool", "mp", []string{"r2o"}, []string{"mpo"}, attrInts("kernel_shape", 2, 2), attrInts("strides", 2, 2)),
		encNode("GlobalAveragePool", "gap", []string{"mpo"}, []string{"gapo"}),
		encNode("Reshape", "flat", []string{"gapo", "shape"}, []string{"flato"}),
		encNode("Gemm", "fc", []string{"flato", "fcw", "fcb"}, []string{"y"}, attrInt("transB", 1)),
	}
	return encModel(g)
}
