// Package api is the cgo-free contract between an extractor and the code
// that asks it for features: the Request and its Priority, a Model and its
// Layers, the errors an extraction fails with (ErrBadImage and ImageError,
// ErrUnknownModel, ErrUnknownLayer, ErrBadTensor, ErrClosed), the figures
// (Stats), ProfileOptions, and the .npy files features travel as (npy.go).
//
// Package extractor (ONNX Runtime, NVML, cgo) implements it and re-exports
// these names as aliases; the read path (fs/features), the FUSE tree (fs)
// and the feature server and its client (fs/remote) program against this
// package only, so `CGO_ENABLED=0 go build ./fs/...` works
// (fs.TestFSIsCgoFree). Nothing here imports more of featurefs than the
// cgo-free leaves extractor/spec and extractor/split.
package api
