package extractor

// This file holds the types the rest of featurefs (fs/, cmd/) programs
// against. Implementations live in the files named after each part.

import (
	"context"
	"errors"
	"fmt"

	"github.com/featurefs/featurefs/extractor/spec"
)

// DType is the element type of the .npy files served (spec.DType).
type DType = spec.DType

const (
	// Float32 serves '<f4' arrays (the default).
	Float32 = spec.Float32
	// Float16 serves '<f2' arrays, half the bytes.
	Float16 = spec.Float16
)

// Priority orders extraction requests: a reader blocked now goes first.
type Priority int

const (
	// Foreground is a request a reader is waiting on.
	Foreground Priority = iota
	// Background is prefetch or warm-up work.
	Background
)

// Layer is one block boundary of a model (docs/LAYERS.md, "The rule").
type Layer struct {
	// Index is the layer's number, counted from 0 in topological order.
	Index int
	// Name is the directory name, "layer<Index>".
	Name string
	// Tensor is the ONNX tensor name of the layer's output.
	Tensor string
	// Shape is the per-sample output shape (no batch axis).
	Shape []int64
	// Bytes is the per-sample size of the output as float32.
	Bytes int64
	// CumGFLOPs is the compute from the input up to and including this layer,
	// in GFLOPs per sample (multiply-adds counted as 2).
	CumGFLOPs float64
}

// Elements returns the number of elements per sample.
func (l Layer) Elements() int64 {
	n := int64(1)
	for _, d := range l.Shape {
		n *= d
	}
	return n
}

// ModelSpec names a model file and how to feed it (spec.ModelSpec).
type ModelSpec = spec.ModelSpec

// Request asks for one feature tensor.
type Request struct {
	// Model is the model's name (ModelSpec.Name).
	Model string
	// Layer is the layer index.
	Layer int
	// Key is the object key, used in errors and logs.
	Key string
	// ID identifies the input for sharing identical in-flight requests
	// (source identity, key and ETag). Empty means Key.
	ID string
	// ETag is the object version the request is for, when known (an
	// extractor that fetches remotely, fs/remote, passes it on).
	ETag string
	// Fetch returns the encoded image bytes.
	Fetch func(ctx context.Context) ([]byte, error)
	// Priority orders the request against others.
	Priority Priority
}

// ErrBadImage is matched (errors.Is) by every error caused by the input
// object itself: not an image, corrupt, truncated, empty or too large. Such an
// error is permanent for that object version and may be cached negatively.
var ErrBadImage = errors.New("bad image")

// ErrBadModel is matched (errors.Is) by every error New returns for a
// model file it cannot use: missing or unreadable, not ONNX, no layers, or
// inputs the preprocessing cannot feed (not exactly one float input of shape
// [batch,3,crop,crop]). The message says which model and why, in one line.
var ErrBadModel = errors.New("model cannot be used")

// modelError makes err match ErrBadModel without changing its message.
type modelError struct{ err error }

func (e *modelError) Error() string   { return e.err.Error() }
func (e *modelError) Unwrap() []error { return []error{ErrBadModel, e.err} }

// ImageError is the error for one bad input object. Its message is the
// reason only, without Key: whoever reports it names the object once
// (a log line's key, a record's key, a failure list's first column).
type ImageError struct {
	// Key is the object key (or file) at fault.
	Key string
	// Reason says what is wrong with it.
	Reason string
	// Err is the underlying error, if any.
	Err error
}

// Error returns "REASON[: ERR]", without the key.
func (e *ImageError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %v", e.Reason, e.Err)
	}
	return e.Reason
}

// Unwrap lets errors.Is(err, ErrBadImage) match.
func (e *ImageError) Unwrap() []error { return []error{ErrBadImage, e.Err} }

// Preprocess describes how an image becomes the model's input tensor
// (spec.Preprocess; Apply runs it).
type Preprocess = spec.Preprocess

// DefaultPreprocess returns torchvision's ImageNet evaluation transform.
func DefaultPreprocess() Preprocess { return spec.DefaultPreprocess() }
