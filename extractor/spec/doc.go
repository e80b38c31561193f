// Package spec is the cgo-free leaf that owns what featurefs's settings
// and names are: the model spec a mount or server is configured with
// (ModelSpec, Preprocess), the element type and GPU precision (DType,
// Precision), the split policy, and the one default of each value that
// several packages surface: the image extensions, the pixel limit, the
// reserved name "layers", the layer directory names (layer0..layerN) and
// the paths under ~/.cache/featurefs.
//
// Package extractor (ONNX Runtime, NVML) re-exports most of these types
// as aliases (not the split policy's: extractor/split and fs/remote use it
// from here); mountopts and cmd/featurefs read them from here, so that
// parsing options never links ONNX Runtime or NVML. Nothing here imports another
// featurefs package.
package spec
