package api

// This file holds the requests, their priorities, the layers, the errors
// and the figures that an extractor, its callers and a feature server's
// client share.

import (
	"context"
	"errors"
	"fmt"

	"github.com/featurefs/featurefs/extractor/augment"
	"github.com/featurefs/featurefs/extractor/spec"
	"github.com/featurefs/featurefs/extractor/split"
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
	// Digest is the hex SHA-256 identity of the layer's features: of the
	// part of the graph that computes it and of the preprocessing
	// (docs/MODELS.md). Features are keyed, cached and stored by it, so a
	// model version that computes a layer the same way keeps its
	// features. Empty for a layer a feature server that predates digests
	// describes: its features are then keyed by the model's file digest.
	Digest string
}

// Elements returns the number of elements per sample.
func (l Layer) Elements() int64 {
	n := int64(1)
	for _, d := range l.Shape {
		n *= d
	}
	return n
}

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
	// View, when not nil, asks for an augmented view of the image instead
	// of the plain one: its crop box, flip and output size, as
	// augment.Draw gives them (docs/AUGMENT.md). Requests for different
	// views of one image are distinct requests (the scheduler adds the
	// view to the ID it shares in-flight requests by).
	View *augment.Params
	// Augment, when not nil and View is nil, asks for the augmented view
	// the spec draws for the image once its size is read from its header
	// (augment.Spec.Params at the model's crop size).
	Augment *augment.Spec
	// Size is the object's size as listed, when known (0: unknown). The
	// extractor takes that many bytes of its fetch budget before it calls
	// Fetch (an object of unknown size takes them once fetched).
	Size int64
	// Priority orders the request against others.
	Priority Priority
	// Digest is the model file's digest (Model.Digest) the request was
	// made for: an extractor that has replaced the model since (a reload)
	// computes it with that version while it keeps it, else fails with
	// ErrModelReplaced; never with another version. Empty: the current.
	Digest string
}

// ErrModelReplaced is matched by an Extract error for a model version the
// extractor no longer keeps (replaced twice since the request was made).
var ErrModelReplaced = errors.New("model version replaced")

// ErrBadImage is matched (errors.Is) by every error caused by the input
// object itself: not an image, corrupt, truncated, empty or too large. Such an
// error is permanent for that object version and may be cached negatively.
var ErrBadImage = errors.New("bad image")

// ErrUnknownModel is matched by Extract errors for a model name not loaded.
var ErrUnknownModel = errors.New("unknown model")

// ErrUnknownLayer is matched by Extract errors for a layer index out of
// range. It is split.ErrUnknownLayer (the split planner's, for a freeze
// layer its profiles lack): one error, defined in the package below.
var ErrUnknownLayer = split.ErrUnknownLayer

// ErrClosed is returned by Extract and ExtractFrom after Close. It wraps
// spec.ErrClosed, which every "used after Close" error matches.
var ErrClosed = fmt.Errorf("extractor: service %w", spec.ErrClosed)

// ErrBadTensor is matched by ExtractFrom errors caused by the input tensor
// itself: not a .npy file, or not the shape of the layer it claims to be.
var ErrBadTensor = errors.New("bad input tensor")

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

// ProfileOptions tune a measurement of a model's compute profile.
type ProfileOptions struct {
	// Dir caches profiles as JSON files; empty means no disk cache.
	Dir string
	// Batch is the batch size timed (default: Config.BatchSize, else 4).
	Batch int
	// Runs is how many timed runs per segment (the fastest counts; default 2).
	Runs int
}

// Stats are an extractor's figures, for MOUNT/.featurefs/stats.
type Stats struct {
	Device           string `json:"device"`
	Requests         int64  `json:"requests"`
	Shared           int64  `json:"shared"`
	Completed        int64  `json:"completed"`
	Failed           int64  `json:"failed"`
	BadImages        int64  `json:"bad_images"`
	Cancelled        int64  `json:"cancelled"`
	Batches          int64  `json:"batches"`
	BatchedItems     int64  `json:"batched_items"`
	Retries          int64  `json:"retries"`
	InFlight         int    `json:"in_flight"`
	QueuedForeground int    `json:"queued_foreground"`
	QueuedBackground int    `json:"queued_background"`
	Decoded          int    `json:"decoded_waiting"`
	Running          int    `json:"running"`
	Sessions         int    `json:"sessions"`
	SessionsCreated  int64  `json:"sessions_created"`
	SessionsEvicted  int64  `json:"sessions_evicted"`
	// BatchSizes is each lane's batch size (on the first device; Devices
	// has every device's).
	BatchSizes    map[string]int `json:"batch_sizes"`
	FetchSeconds  float64        `json:"fetch_seconds"`
	DecodeSeconds float64        `json:"decode_seconds"`
	InferSeconds  float64        `json:"infer_seconds"`
	// Split is the split execution plan of a remote mount (--split), nil
	// otherwise.
	Split *split.Stats `json:"split,omitempty"`
	// Wire is what a remote mount's feature servers sent, nil otherwise.
	Wire *WireStats `json:"wire,omitempty"`
	// Devices are each GPU's figures when inference runs on several
	// (nil on one device: the figures above are its own).
	Devices []DeviceStats `json:"devices,omitempty"`
	// JPEGDecode says where JPEGs are decoded and why (--decode): a line
	// starting "cpu: " or "gpu: ".
	JPEGDecode string `json:"jpeg_decode,omitempty"`
	// GPUDecode are the GPU JPEG decoder's figures (nil: JPEGs are
	// decoded on the CPU).
	GPUDecode *GPUDecodeStats `json:"gpu_decode,omitempty"`
	// Memory is what the extractor holds in this process (nil from a
	// remote extractor: the server's memory is in its own figures).
	Memory *ExtractorMemory `json:"memory,omitempty"`
}

// ExtractorMemory is the memory an extractor in this process holds, by
// bound (issue 39): images being decoded, fetched objects waiting for a
// decoder, and the C heap (ONNX Runtime's sessions and activations,
// libjpeg-turbo's decoders).
type ExtractorMemory struct {
	// DecodeBytes is the decode budget in use (images being decoded,
	// estimated from their headers); DecodeMaxBytes the budget
	// (--decode-memory).
	DecodeBytes    int64 `json:"decode_bytes"`
	DecodeMaxBytes int64 `json:"decode_max_bytes"`
	// FetchedBytes is the bytes of fetched objects held by the workers
	// (being fetched, waiting for a decoder or being decoded), counted
	// against FetchMaxBytes (--fetch-memory); each of the Fetchers
	// workers holds at most one.
	FetchedBytes  int64 `json:"fetched_bytes"`
	FetchMaxBytes int64 `json:"fetch_max_bytes"`
	Fetchers      int   `json:"fetchers"`
	// CHeapInUseBytes is the C heap's bytes in use (glibc mallinfo2:
	// ONNX Runtime, libjpeg-turbo, Badger's and Go's own are not in it);
	// CHeapFreeBytes what malloc holds free, not yet handed back.
	CHeapInUseBytes int64 `json:"c_heap_in_use_bytes"`
	CHeapFreeBytes  int64 `json:"c_heap_free_bytes"`
	// SessionBytes is the C heap the open ONNX Runtime sessions hold, each
	// measured when it was opened (its weights and plan).
	SessionBytes int64 `json:"session_bytes"`
	// BusyTrims counts the C heap's trims between batches (its free
	// chunks past 64 MiB while the scheduler was busy).
	BusyTrims int64 `json:"busy_trims"`
	// SessionsClosedForMemory counts the idle sessions closed so that
	// another could open within the memory target (Config.MemoryLimit),
	// within SessionsEvicted.
	SessionsClosedForMemory int64 `json:"sessions_closed_for_memory"`
	// GPUPixelBytes is the bytes of images decoded on the GPU and not yet
	// resized (--decode gpu), against GPUPixelMaxBytes (--decode-memory,
	// a budget apart from DecodeMaxBytes); both 0 without a GPU decoder.
	GPUPixelBytes    int64 `json:"gpu_pixel_bytes,omitempty"`
	GPUPixelMaxBytes int64 `json:"gpu_pixel_max_bytes,omitempty"`
}

// GPUDecodeStats are what the GPU JPEG decoder did (--decode gpu):
// images decoded on the GPU, refused by it or failed there (both then
// decoded on the CPU, whose verdict a bad image gets), JPEGs kept on the
// CPU by their kind (progressive, arithmetic-coded, CMYK, ...), the
// batches run and the seconds spent in them.
type GPUDecodeStats struct {
	Decoded   int64   `json:"decoded"`
	Refused   int64   `json:"refused"`
	Failed    int64   `json:"failed"`
	KeptOnCPU int64   `json:"kept_on_cpu"`
	Batches   int64   `json:"batches"`
	Seconds   float64 `json:"seconds"`
}

// DeviceStats are one device's share of an extractor's figures.
type DeviceStats struct {
	Device       string         `json:"device"`
	Batches      int64          `json:"batches"`
	BatchedItems int64          `json:"batched_items"`
	Running      int            `json:"running"`
	Sessions     int            `json:"sessions"`
	BatchSizes   map[string]int `json:"batch_sizes"`
}

// WireStats are the feature bytes a remote mount received: Bytes on the
// wire, RawBytes the .npy bytes they were (more where servers compressed
// them), DecompressSeconds the time spent decompressing.
type WireStats struct {
	Bytes             int64   `json:"bytes"`
	RawBytes          int64   `json:"raw_bytes"`
	DecompressSeconds float64 `json:"decompress_seconds"`
}
