// Package graph reads ONNX models without the ONNX libraries: it decodes the
// ModelProto fields it needs with protowire, finds the model's layers (block
// boundaries, docs/LAYERS.md "The rule") from the graph alone, infers
// per-sample shapes, estimates compute, and writes pruned models.
//
// In featurefs's data flow the extractor parses each registered model once
// (Parse), lists its layers (Layers) for the filesystem's layer directories
// and `featurefs layers`, and asks for a model truncated at a layer
// (Prune) to run in ONNX Runtime; split execution between a storage-side
// server and the mount uses PruneFrom, whose input is a layer tensor.
//
// A pruned model is the original ModelProto with only the graph's node,
// initializer, input, output and value_info lists filtered; every other field
// (opset imports, metadata, functions, doc strings) is copied byte for byte.
// Each new output is declared with the element type its operator gives
// (types.go), or with its name alone where no rule gives one.
// Bad input is reported as an error matching ErrBadModel, never a panic.
package graph
