package spec

import (
	"errors"
	"fmt"
	"math"
	"strconv"
)

// DType is the element type of the .npy files served.
type DType string

const (
	// Float32 serves '<f4' arrays (the default).
	Float32 DType = "float32"
	// Float16 serves '<f2' arrays, half the bytes.
	Float16 DType = "float16"
)

// Size returns the bytes per element.
func (d DType) Size() int64 {
	if d == Float16 {
		return 2
	}
	return 4
}

// Precision is the arithmetic the GPU runs in (--precision).
type Precision string

const (
	// FP32 is full float32 (TF32 off): the CPU's results within rounding.
	FP32 Precision = "fp32"
	// TF32 lets cuDNN and cuBLAS use TF32 tensor cores (Ampere and later)
	// for convolutions and matrix products: faster, 10-bit mantissas.
	TF32 Precision = "tf32"
	// FP16 lets TensorRT build FP16 engines; only with TensorRT.
	FP16 Precision = "fp16"
)

// ModelSpec names a model file and how to feed it.
type ModelSpec struct {
	// Name is the model's directory name under features/.
	Name string
	// Path is the .onnx file.
	Path string
	// Preprocess overrides the default ImageNet preprocessing when non-nil.
	Preprocess *Preprocess
	// Aliases maps extra directory names to layer names, e.g. "pool": "layer18".
	Aliases map[string]string
}

// Preprocess describes how an image becomes the model's input tensor. The
// default matches torchvision's Resize(256), CenterCrop(224), ToTensor(),
// Normalize(ImageNet mean, std) on a PIL image converted to RGB.
type Preprocess struct {
	// Resize is the length the shorter side is resized to (antialiased
	// bilinear, as PIL does it).
	Resize int `yaml:"resize"`
	// Crop is the side of the square center crop: the model's input size.
	Crop int `yaml:"crop"`
	// Mean and Std normalize each RGB channel after scaling to [0,1].
	Mean [3]float32 `yaml:"mean"`
	Std  [3]float32 `yaml:"std"`
	// FastDecode decodes a JPEG whose shorter side is at least 2, 4 or 8
	// times Resize at 1/2, 1/4 or 1/8 of its size (libjpeg's DCT-domain
	// scaling, as Pillow's Image.draft) before the resize: much less
	// decoding work on large photos, pixels no longer bit-exact with
	// torchvision (fidelity in docs/bench/preprocess.md). Off: the exact
	// path. Part of Key, so fast and exact features never share a cache.
	FastDecode bool `yaml:"fast-decode" json:",omitempty"`
	// Decoder names the JPEG decoder when it is not the CPU's
	// libjpeg-turbo (bit-exact with PIL): "nvjpeg" when --decode gpu (or
	// auto) decodes on the GPU. Set by the extractor from the decoder it
	// runs, never by a model file; part of Key, so features decoded on the
	// GPU and on the CPU never share a cache.
	Decoder string `yaml:"-" json:",omitempty"`
}

// DefaultPreprocess returns torchvision's ImageNet evaluation transform.
func DefaultPreprocess() Preprocess {
	return Preprocess{
		Resize: 256,
		Crop:   224,
		Mean:   [3]float32{0.485, 0.456, 0.406},
		Std:    [3]float32{0.229, 0.224, 0.225},
	}
}

// FastDecodeDenoms returns the JPEG DCT-domain scales (1/8, 1/4, 1/2) that
// FastDecode may decode at, largest first. Their fidelity against
// torchvision is measured in docs/bench/preprocess.md
// (TestFastDecodeFidelity); changing them changes Key.
func FastDecodeDenoms() [3]int { return [3]int{8, 4, 2} }

// Key is a canonical string of the settings, part of the cache key. The
// exact path's key is what it was before FastDecode existed; with
// FastDecode it names the DCT scales that may be used.
func (p Preprocess) Key() string {
	k := fmt.Sprintf("rgb/resize=%d/bilinear-aa/crop=%d/mean=%g,%g,%g/std=%g,%g,%g",
		p.Resize, p.Crop, p.Mean[0], p.Mean[1], p.Mean[2], p.Std[0], p.Std[1], p.Std[2])
	if p.FastDecode {
		k += "/jpeg-dct-scale="
		for i, d := range FastDecodeDenoms() {
			if i > 0 {
				k += ","
			}
			k += "1/" + strconv.Itoa(d)
		}
	}
	if p.Decoder != "" {
		k += "/jpeg-decoder=" + p.Decoder
	}
	return k
}

// maxPreprocessSide bounds Resize and Crop: anything larger is a
// configuration mistake, not a model input.
const maxPreprocessSide = 8192

// ErrBadPreprocess is matched (errors.Is) by Validate's errors.
var ErrBadPreprocess = errors.New("invalid preprocessing settings")

// Validate reports settings torchvision would reject or that cannot be a
// model input: sizes must be in 1..8192 and every Std nonzero and finite.
// Crop may exceed Resize: the resized image is then zero-padded, as
// torchvision's CenterCrop does.
func (p Preprocess) Validate() error {
	if p.Resize <= 0 || p.Resize > maxPreprocessSide {
		return fmt.Errorf("%w: resize %d must be in 1..%d", ErrBadPreprocess, p.Resize, maxPreprocessSide)
	}
	if p.Crop <= 0 || p.Crop > maxPreprocessSide {
		return fmt.Errorf("%w: crop %d must be in 1..%d", ErrBadPreprocess, p.Crop, maxPreprocessSide)
	}
	for c := 0; c < 3; c++ {
		m, s := float64(p.Mean[c]), float64(p.Std[c])
		if math.IsNaN(m) || math.IsInf(m, 0) {
			return fmt.Errorf("%w: mean[%d] = %v is not finite", ErrBadPreprocess, c, m)
		}
		if s == 0 || math.IsNaN(s) || math.IsInf(s, 0) {
			return fmt.Errorf("%w: std[%d] = %v must be finite and nonzero", ErrBadPreprocess, c, s)
		}
	}
	return nil
}
