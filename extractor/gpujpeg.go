package extractor

// JPEG decode on the GPU (--decode gpu|auto, issue 38). A gpuJPEG decodes
// batches of baseline JPEGs to full-size RGB on a GPU (nvjpeg.go: nvJPEG,
// its hardware backend where the GPU has JPEG engines, else its GPU
// backend); the CPU then resizes, crops and normalizes the pixels as it
// does libjpeg-turbo's (cropRGB), so only the decode moves. JPEGs the GPU
// decoder does not take (progressive, arithmetic-coded, 12-bit, CMYK/YCCK,
// anything its header check refuses) and PNGs stay on the CPU decoders,
// chosen per image from its header (jpegKindOf).

import "errors"

// DecodeMode is --decode: where JPEGs are decoded.
type DecodeMode string

const (
	// DecodeCPU decodes every image on the CPU (libjpeg-turbo, bit-exact
	// with PIL): the default.
	DecodeCPU DecodeMode = "cpu"
	// DecodeGPU decodes the JPEGs the GPU decoder takes on the GPU; it
	// needs a GPU device and nvJPEG, else the CPU decodes, said in one line.
	DecodeGPU DecodeMode = "gpu"
	// DecodeAuto is DecodeGPU where nvJPEG is there and the GPU's type
	// passed the decode fidelity check (gpuDecodeFidelity), else DecodeCPU.
	DecodeAuto DecodeMode = "auto"
)

// errGPURefused is matched by a gpuJPEG's per-image error for an image the
// GPU decoder does not take: it is decoded on the CPU instead.
var errGPURefused = errors.New("not taken by the GPU JPEG decoder")

// gpuJPEG is a JPEG decoder on a GPU. One goroutine at a time calls its
// methods (the GPU decode loop owns it).
type gpuJPEG interface {
	// Decode decodes each imgs[i] to 8-bit interleaved RGB (RGBRGB...,
	// rows top to bottom, no padding) at its full size into dst[i], which
	// holds exactly 3*w*h bytes for the w x h its header gives. It returns
	// one error per image: nil; one matching errGPURefused when the decoder
	// does not take the image (it is then decoded on the CPU); or the
	// image's own error (corrupt, truncated). One image's error never
	// affects the others' pixels, nor later calls. len(imgs) is at most
	// MaxBatch.
	Decode(imgs [][]byte, dst [][]byte) []error
	// MaxBatch is the most images one Decode takes.
	MaxBatch() int
	// Describe names the decoder for logs and doctor, e.g. "nvJPEG 13.0.1
	// (hardware backend) on cuda:0".
	Describe() string
	// Close frees the decoder's GPU and host memory.
	Close() error
}
