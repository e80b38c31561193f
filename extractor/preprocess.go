package extractor

// This file turns encoded image bytes into the model's input tensor exactly
// as torchvision 0.14's ImageNet evaluation transform does on a PIL image:
// Resize(Resize) -> CenterCrop(Crop) -> ToTensor() -> Normalize(Mean, Std).

import (
	"context"
	"fmt"
	"image"
	"sync"

	"github.com/featurefs/featurefs/extractor/spec"
)

// ErrBadPreprocess is matched (errors.Is) by Preprocess.Validate's errors
// (spec.ErrBadPreprocess).
var ErrBadPreprocess = spec.ErrBadPreprocess

// resizedSize is torchvision 0.14's _compute_resized_output_size for an int
// size: the shorter side becomes p.Resize, the longer
// int(p.Resize * long / short).
func resizedSize(p Preprocess, w, h int) (tw, th int) {
	short, long := h, w
	if w <= h {
		short, long = w, h
	}
	newLong := int(float64(int64(p.Resize)*int64(long)) / float64(short))
	if w <= h {
		return p.Resize, newLong
	}
	return newLong, p.Resize
}

// cropOffset is where torchvision's CenterCrop starts along an axis of
// length size: int(round((size - crop) / 2.0)) with Python's round half to
// even, or minus the left/top zero padding when crop > size.
func cropOffset(size, crop int) int {
	if crop > size {
		return -((crop - size) / 2)
	}
	d := size - crop
	off := d / 2
	if d%2 == 1 && off%2 == 1 {
		off++ // round(x.5) goes to the even neighbour
	}
	return off
}

// preprocScratch holds the buffers of one Apply call, and what it can
// keep for the next: resize coefficients and the normalization table.
type preprocScratch struct {
	rgb  []byte
	rs   resizeScratch
	crop []byte
	// jpegArena is libjpeg's reusable memory (decodeJPEGRows).
	jpegArena []byte
	// lut is the normalization table of lutFor (lutOK: computed).
	lut    [3][256]float32
	lutFor Preprocess
	lutOK  bool
}

// scratchPool recycles preprocessing buffers across calls (and goroutines).
var scratchPool = sync.Pool{New: func() any { return new(preprocScratch) }}

// dctDenom returns the scale 1/denom at which cropRGB decodes a w x h
// JPEG: 1 unless FastDecode; with it, the largest of spec.FastDecodeDenoms that
// keeps the shorter side at least Resize pixels (short/denom >= Resize),
// so that the antialiased resize that follows still only shrinks.
func dctDenom(p Preprocess, w, h int) int {
	if !p.FastDecode {
		return 1
	}
	short := int64(min(w, h))
	for _, d := range spec.FastDecodeDenoms() {
		if short >= int64(d)*int64(p.Resize) {
			return d
		}
	}
	return 1
}

// cropRGB decodes data and returns the Crop x Crop RGB (HWC, uint8) image
// torchvision would hand to ToTensor: resized, center cropped, zero-padded
// where the crop exceeds the resized image. The result lives in sc.
//
// With FastDecode a large JPEG is decoded at 1/2, 1/4 or 1/8 (dctDenom)
// and resized as Pillow's Image.draft + resize(box=...) do it: the
// decoded image's [0, w/denom) x [0, h/denom) (the original image's
// extent) becomes the size torchvision's Resize gives the original image,
// so the geometry is the exact path's; only the pixels differ.
func cropRGB(p Preprocess, data []byte, maxPixels int64, sc *preprocScratch) ([]byte, error) {
	return cropRGBWith(p, sc, func(region func(w, h, denom int) image.Rectangle) (rgbImage, error) {
		var denom func(w, h int) int
		if p.FastDecode {
			denom = func(w, h int) int { return dctDenom(p, w, h) }
		}
		img, err := decodeRGBScaled(data, maxPixels, sc.rgb, &sc.jpegArena, denom, region)
		sc.rgb = img.pix
		return img, err
	})
}

// cropRGBFull is cropRGB of an image already decoded whole: w x h pixels
// of 8-bit RGB, rows of 3*w bytes (the GPU decoder's output). The resize
// reads the rows it needs from full in place.
func cropRGBFull(p Preprocess, full []byte, w, h int, sc *preprocScratch) ([]byte, error) {
	if w <= 0 || h <= 0 || len(full) < 3*w*h {
		return nil, fmt.Errorf("extractor: decoded pixels: %d bytes for %dx%d", len(full), w, h)
	}
	return cropRGBWith(p, sc, func(region func(w, h, denom int) image.Rectangle) (rgbImage, error) {
		r := region(w, h, 1).Intersect(fullRegion(w, h))
		if r.Empty() {
			r = image.Rect(0, 0, 1, 1)
		}
		return rgbImage{w: w, h: h, x0: r.Min.X, y0: r.Min.Y, rw: r.Dx(), rh: r.Dy(),
			stride: 3 * w, off: 3 * r.Min.X, pix: full[3*w*r.Min.Y : 3*w*r.Max.Y]}, nil
	})
}

// cropRGBWith is cropRGB with the decode left to decode: given the region
// of the decoded image the resize reads (region(w, h, denom), w x h the
// image's size and 1/denom the scale it is decoded at), it returns those
// pixels.
func cropRGBWith(p Preprocess, sc *preprocScratch, decode func(region func(w, h, denom int) image.Rectangle) (rgbImage, error)) ([]byte, error) {
	var tw, th, left, top, x0, x1, y0, y1 int
	region := func(w, h, denom int) image.Rectangle {
		tw, th = resizedSize(p, w, h)
		if tw <= 0 || th <= 0 {
			return image.Rectangle{}
		}
		left, top = cropOffset(tw, p.Crop), cropOffset(th, p.Crop)
		// The part of the crop window that lies on the resized image.
		x0, x1 = max(left, 0), min(left+p.Crop, tw)
		y0, y1 = max(top, 0), min(top+p.Crop, th)
		sw, sh := scaledSize(w, h, denom)
		return sc.rs.planBox(sw, sh, float32(w)/float32(denom), float32(h)/float32(denom), tw, th, x0, y0, x1-x0, y1-y0)
	}
	img, err := decode(region)
	if err != nil {
		return nil, err
	}
	if tw <= 0 || th <= 0 {
		return nil, badImage(fmt.Sprintf("%dx%d image resizes to %dx%d", img.w, img.h, tw, th), nil)
	}
	win := sc.rs.run(img)
	if x0 == left && y0 == top && x1 == left+p.Crop && y1 == top+p.Crop {
		return win, nil
	}
	sc.crop = growBytes(sc.crop, 3*p.Crop*p.Crop)
	out := sc.crop
	clear(out)
	rw := 3 * (x1 - x0)
	for y := y0; y < y1; y++ {
		d := 3 * ((y-top)*p.Crop + (x0 - left))
		copy(out[d:d+rw], win[(y-y0)*rw:(y-y0+1)*rw])
	}
	return out, nil
}

// ApplyPreprocess decodes a JPEG or PNG image and writes the model input tensor, CHW
// float32 of length 3*Crop*Crop, into dst: torchvision's Resize(Resize)
// (PIL bilinear, antialiased), CenterCrop(Crop), ToTensor(), Normalize(Mean,
// Std) on Image.open(...).convert("RGB"). Images larger than maxPixels
// (DefaultMaxPixels when <= 0) are rejected from their header before any
// pixel is decoded. Errors caused by the input match ErrBadImage.
func ApplyPreprocess(p Preprocess, data []byte, maxPixels int64, dst []float32) error {
	return applyPreprocess(context.Background(), p, data, maxPixels, dst, nil)
}

// applyPreprocess is ApplyPreprocess with the decode's memory taken from
// budget (nil: none) while the image is decoded and resized: it waits
// there, or until ctx ends, for room for decodeCost bytes.
func applyPreprocess(ctx context.Context, p Preprocess, data []byte, maxPixels int64, dst []float32, budget *decodeBudget) error {
	if err := p.Validate(); err != nil {
		return err
	}
	denom := func(format string, w, h int) int {
		if format == "jpeg" {
			return dctDenom(p, w, h)
		}
		return 1
	}
	crop := func(sc *preprocScratch) ([]byte, error) { return cropRGB(p, data, maxPixels, sc) }
	return decodeNormalize(ctx, p, "preprocess", p.Crop, data, maxPixels, dst, budget, denom, crop)
}

// decodeNormalize is what applyPreprocess and applyViewPreprocess share:
// with dst sized for side x side pixels, it takes the decode's memory from
// budget (nil: none; the cost of a decode at 1/denom of the image's size),
// gets the side x side RGB pixels from rgb, gives the memory back, and
// writes them into dst normalized by p, CHW. what names the caller in
// its errors.
func decodeNormalize(ctx context.Context, p Preprocess, what string, side int, data []byte, maxPixels int64, dst []float32, budget *decodeBudget,
	denom func(format string, w, h int) int, rgb func(*preprocScratch) ([]byte, error)) error {
	plane := side * side
	if len(dst) != 3*plane {
		return fmt.Errorf("extractor: %s: dst holds %d floats, need 3*%d*%d = %d", what, len(dst), side, side, 3*plane)
	}
	var held, cost int64
	if budget != nil {
		w, h, format, err := CheckImage(data, maxPixels)
		if err != nil {
			return err
		}
		cost = decodeCost(data, format, w, h, denom(format, w, h))
		if held, err = budget.acquire(ctx, cost); err != nil {
			return fmt.Errorf("extractor: waiting for decode memory (%d bytes): %w", cost, err)
		}
	}
	sc := scratchPool.Get().(*preprocScratch)
	defer scratchPool.Put(sc)
	pix, err := rgb(sc)
	if cap(sc.rgb) > maxKeptRGB {
		sc.rgb = nil // a large image's pixels go back with its budget
	}
	if budget != nil {
		budget.release(held, cost)
	}
	if err != nil {
		return err
	}
	if !sc.lutOK || sc.lutFor != p {
		normLUT(p, &sc.lut)
		sc.lutFor, sc.lutOK = p, true
	}
	lr, lg, lb := &sc.lut[0], &sc.lut[1], &sc.lut[2]
	r, g, b := dst[:plane], dst[plane:2*plane], dst[2*plane:3*plane]
	g, b, pix = g[:len(r)], b[:len(r)], pix[:3*len(r)]
	for i := range r {
		px := pix[3*i : 3*i+3 : 3*i+3]
		r[i], g[i], b[i] = lr[px[0]], lg[px[1]], lb[px[2]]
	}
	return nil
}

// normLUT fills lut: each 8-bit value mapped to (v/255 - mean) / std per
// channel in float32 arithmetic, as ToTensor's div(255) and Normalize's
// sub_/div_ do.
func normLUT(p Preprocess, lut *[3][256]float32) {
	for c := 0; c < 3; c++ {
		m, s := p.Mean[c], p.Std[c]
		for v := 0; v < 256; v++ {
			x := float32(v) / 255
			x -= m
			lut[c][v] = x / s
		}
	}
}
