package extractor

// This file names here the contract the rest of featurefs programs against
// (package extractor/api, cgo-free); it is defined there once.

import (
	"errors"

	"github.com/featurefs/featurefs/extractor/api"
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

// Priority orders extraction requests (api.Priority).
type Priority = api.Priority

const (
	// Foreground is a request a reader is waiting on.
	Foreground = api.Foreground
	// Background is prefetch or warm-up work.
	Background = api.Background
)

// Layer is one block boundary of a model (api.Layer).
type Layer = api.Layer

// Model is one loaded model's description (api.Model).
type Model = api.Model

// ModelSpec names a model file and how to feed it (spec.ModelSpec).
type ModelSpec = spec.ModelSpec

// Request asks for one feature tensor (api.Request).
type Request = api.Request

// ImageError is the error for one bad input object (api.ImageError).
type ImageError = api.ImageError

// Preprocess describes how an image becomes the model's input tensor
// (spec.Preprocess; Apply runs it).
type Preprocess = spec.Preprocess

// DefaultPreprocess returns torchvision's ImageNet evaluation transform.
func DefaultPreprocess() Preprocess { return spec.DefaultPreprocess() }

// ProfileOptions tune a measurement (api.ProfileOptions).
type ProfileOptions = api.ProfileOptions

// Stats are the service's figures, for MOUNT/.featurefs/stats (api.Stats).
type Stats = api.Stats

// ExtractorMemory is api.ExtractorMemory.
type ExtractorMemory = api.ExtractorMemory

// DeviceStats are one device's share of a Service's figures.
type DeviceStats = api.DeviceStats

// WireStats are the feature bytes a remote mount received (api.WireStats).
type WireStats = api.WireStats

// GPUDecodeStats are the GPU JPEG decoder's figures (--decode gpu).
type GPUDecodeStats = api.GPUDecodeStats

// The contract's errors, the same values (errors.Is matches either name).
var (
	// ErrBadImage is matched by every error caused by the input object.
	ErrBadImage = api.ErrBadImage
	// ErrUnknownModel is matched by Extract errors for a model not loaded.
	ErrUnknownModel = api.ErrUnknownModel
	// ErrUnknownLayer is matched by Extract errors for a layer out of range.
	ErrUnknownLayer = api.ErrUnknownLayer
	// ErrClosed is returned by Extract and ExtractFrom after Close.
	ErrClosed = api.ErrClosed
	// ErrBadTensor is matched by ExtractFrom errors caused by the input
	// tensor itself.
	ErrBadTensor = api.ErrBadTensor
	// ErrBadNPY is matched by every DecodeNPY error.
	ErrBadNPY = api.ErrBadNPY
	// ErrModelReplaced is matched by an Extract error for a model version
	// no longer kept (Reload).
	ErrModelReplaced = api.ErrModelReplaced
)

// ErrBadModel is matched (errors.Is) by every error New returns for a
// model file it cannot use: missing or unreadable, not ONNX, no layers, or
// inputs the preprocessing cannot feed (not exactly one float input of shape
// [batch,3,crop,crop]). The message says which model and why, in one line.
var ErrBadModel = errors.New("model cannot be used")

// modelError makes err match ErrBadModel without changing its message.
type modelError struct{ err error }

func (e *modelError) Error() string   { return e.err.Error() }
func (e *modelError) Unwrap() []error { return []error{ErrBadModel, e.err} }
