// Package split is HAPI's split cost model and planner: for a read of layer
// F on a --remote --split mount, which layer S <= F (or the raw image) the
// storage side should send so that the mount gets layer F fastest.
//
// Data flow: package extractor measures a model's compute Profile on each
// side (Service.Profile, ONNX Runtime); the server sends its own over HTTP
// (fs/remote, GET /v1/profile) and the mount's fs/remote client builds a
// CostModel from both, and a Planner from the cost model, the --split
// policy (spec.SplitPolicy) and the measured bandwidth. This package only
// decides: fs/remote's client asks the server for layer S and the mount's
// extractor finishes S..F. The client feeds back what it measures
// (ObserveTransfer, SetRawBytes, ObserveSamples, and ObserveCPU: the CPU
// both sides spent per sample) and the planner re-plans when the
// bandwidth or the image size moves, or the measured CPU finds a better
// split (Calibration); Planner.Stats is the
// "extractor.split" section of MOUNT/.featurefs/stats.
//
// It is pure: the standard library (no net/http) and extractor/spec only,
// no ONNX Runtime, FUSE or cgo (TestSplitIsPure), so the cost model can be
// tested and reused without the runtime. docs/SPLIT.md describes the model.
package split
