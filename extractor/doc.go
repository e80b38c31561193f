// Package extractor turns (image bytes, model, layer) into a feature tensor.
//
// Data flow: a Request carries a Fetch function for the encoded image; the
// Service deduplicates identical in-flight requests, decodes and preprocesses
// images on a bounded worker pool (preprocess.go, torchvision-exact), gathers
// them into batches by priority, and runs ONNX Runtime sessions pruned at the
// requested layer (graph/ finds the layers and prunes the model). The result
// is returned as the bytes of a .npy file (npy.go). Nothing here knows about
// FUSE, S3 or the cache.
package extractor
