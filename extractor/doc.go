// Package extractor turns (image bytes, model, layer) into a feature tensor.
//
// Data flow: a Request carries a Fetch function for the encoded image; the
// Service deduplicates identical in-flight requests, decodes and preprocesses
// images on a bounded worker pool (preprocess.go, torchvision-exact; view.go
// for augmented views, whose parameters extractor/augment draws), gathers
// them into batches by priority, and runs ONNX Runtime sessions pruned at the
// requested layer (graph/ finds the layers and prunes the model). The result
// is returned as the bytes of a .npy file (extractor/api/npy.go). Split
// execution (splitexec.go) feeds an earlier layer's .npy tensor, instead of
// an image, through the same scheduler. Nothing here knows about FUSE, S3
// or the cache. The types its callers share (Request, Model, Layer, the
// errors, Stats) are defined in the cgo-free extractor/api; api.go names
// them here.
//
// Devices: ortlib.go reads the ONNX Runtime library's version and finds its
// provider libraries; cudalibs.go finds and loads the CUDA libraries without
// LD_LIBRARY_PATH; device.go chooses the device (NVML, a probe session) and
// says in one line why a GPU is not used; ort.go appends the CUDA provider
// (as a plugin execution provider for the CPU build of the core) with its
// options; gpubatch.go sizes GPU batches from measured memory; gpumem.go
// allocates pinned host buffers; batch.go runs several batches in flight on
// a GPU; diagnose.go is what `featurefs doctor` reports. docs/GPU.md says
// what has run on a GPU and what has not yet.
package extractor
