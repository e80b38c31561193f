package graph

// Element types of every tensor, found from the operators' type rules alone.
// Shape inference knows a tensor's type only where it knows its shape; Prune
// must declare the type of every output it exposes (ONNX Runtime refuses a
// graph whose declared output type differs from the node's), so the types
// come from this pass, which needs no shapes.

// elemTypes returns the ONNX element type of every tensor the type rules
// determine: graph inputs, value_info and initializers as declared, node
// outputs by their operator's rule. A tensor missing from the map has an
// unknown type.
func (m *Model) elemTypes() map[string]int32 {
	m.typesOnce.Do(func() {
		types := map[string]int32{}
		for name, t := range m.inits {
			types[name] = t.dtype
		}
		for _, vis := range [][]*valueInfo{m.inputs, m.outputs} {
			for _, v := range vis {
				if v.elem != dtUndefined {
					types[v.name] = v.elem
				}
			}
		}
		for name, v := range m.valueInfo {
			if v.elem != dtUndefined {
				types[name] = v.elem
			}
		}
		for _, n := range m.nodes {
			for i, o := range n.outputs {
				if o == "" {
					continue
				}
				if _, declared := types[o]; declared {
					continue
				}
				if t := nodeOutputType(n, i, types); t != dtUndefined {
					types[o] = t
				}
			}
		}
		m.types = types
	})
	return m.types
}

// nodeOutputType is the element type of output i of n by the operator's
// type rule, given the types known so far; dtUndefined when the rule needs
// a type that is unknown or the operator is not one of the default domain.
func nodeOutputType(n *node, i int, types map[string]int32) int32 {
	if n.domain != "" && n.domain != "ai.onnx" {
		return dtUndefined
	}
	in := func(k int) int32 {
		if k < len(n.inputs) && n.inputs[k] != "" {
			return types[n.inputs[k]]
		}
		return dtUndefined
	}
	attrType := func(name string, def int32) int32 {
		if a := n.attrs[name]; a != nil {
			return int32(a.i)
		}
		return def
	}
	switch n.opType {
	case "Shape", "Size", "NonZero", "ArgMax", "ArgMin", "NonMaxSuppression":
		return dtInt64
	case "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor",
		"Not", "IsNaN", "IsInf":
		return dtBool
	case "Cast":
		return attrType("to", dtUndefined)
	case "CastLike":
		return in(1)
	case "Constant":
		if v := constantNode(n); v != nil {
			return v.dtype
		}
		return dtUndefined
	case "ConstantOfShape":
		if a := n.attrs["value"]; a != nil && a.t != nil {
			return a.t.dtype
		}
		return dtFloat
	case "RandomNormal", "RandomUniform":
		return attrType("dtype", dtFloat)
	case "RandomNormalLike", "RandomUniformLike", "EyeLike", "Bernoulli":
		return attrType("dtype", in(0))
	case "Multinomial":
		return attrType("dtype", dtInt32)
	case "ConvInteger", "MatMulInteger":
		return dtInt32
	case "QuantizeLinear":
		if t := in(2); t != dtUndefined {
			return t
		}
		return attrType("output_dtype", dtUint8)
	case "DequantizeLinear":
		if t := in(1); t != dtUndefined {
			return t
		}
		return dtFloat
	case "DynamicQuantizeLinear":
		if i == 1 {
			return dtFloat
		}
		return dtUint8
	case "QLinearConv", "QLinearMatMul":
		return in(7)
	case "Where":
		return in(1)
	case "Dropout":
		if i == 1 {
			return dtBool
		}
		return in(0)
	case "TopK", "Unique":
		if i > 0 {
			return dtInt64
		}
		return in(0)
	case "LayerNormalization":
		if i > 0 {
			return attrType("stash_type", dtFloat)
		}
		return in(0)
	case "If", "Loop", "Scan", "SequenceConstruct", "SequenceAt", "SplitToSequence",
		"ConcatFromSequence", "SequenceEmpty", "SequenceInsert", "SequenceErase", "SequenceLength",
		"Optional", "OptionalGetElement", "OptionalHasElement", "StringNormalizer", "TfIdfVectorizer":
		// Types come from subgraphs, sequences or strings: not followed here.
		return dtUndefined
	case "Add", "Sub", "Mul", "Div", "Mod", "Max", "Min", "Sum", "Mean", "Concat", "PRelu":
		// Inputs of one type: any typed one tells.
		for k := range n.inputs {
			if t := in(k); t != dtUndefined {
				return t
			}
		}
		return dtUndefined
	}
	// Every other operator of the default domain (activations,
	// normalization, pooling, convolution, layout, indexing, reductions)
	// keeps the type of its data input, input 0.
	return in(0)
}
