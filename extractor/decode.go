package extractor

// This file decodes JPEG and PNG bytes into 8-bit RGB the way torchvision's
// default loader does it: PIL's Image.open(...).convert("RGB") (Pillow 9.4).
//
// Per source type, what PIL does and what we do:
//   - 8-bit RGB, RGBA, gray, gray+alpha, paletted (with or without tRNS):
//     alpha and transparency are dropped, never composited.
//   - 16-bit PNG RGB/RGBA/gray+alpha: PIL keeps the high byte of each sample.
//   - 16-bit PNG gray: PIL opens it as mode "I" and convert("RGB") clips the
//     value to 0..255 (so most pixels become 255): reproduced.
//   - JPEG (gray, YCbCr, RGB, CMYK, YCCK): decoded by libjpeg-turbo, the
//     library Pillow uses, configured as Pillow configures it (jpeg.go,
//     jpegdec.c): identical pixels.
//
// PNG is decoded by Go's image/png, whose output is exact (inflate and
// unfiltering have one answer).

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"

	"github.com/featurefs/featurefs/extractor/spec"
)

// DefaultMaxPixels is the largest image (width*height) decoded when no limit
// is given: PIL's Image.MAX_IMAGE_PIXELS (spec.DefaultMaxPixels).
const DefaultMaxPixels = spec.DefaultMaxPixels

var (
	pngMagic  = []byte("\x89PNG\r\n\x1a\n")
	jpegMagic = []byte{0xff, 0xd8, 0xff}
)

// rgbImage is the part [x0, x0+rw) x [y0, y0+rh) of a w x h image as 8-bit
// RGB, 3 bytes per pixel. Row y (y0 <= y < y0+rh) starts at byte
// (y-y0)*stride of pix and its column x0 at byte off of that row: JPEG rows
// are kept whole (stride 3*w, off 3*x0), PNG rows only the region's part
// (stride 3*rw, off 0). Only the rows the resize reads are kept.
type rgbImage struct {
	w, h           int
	x0, y0, rw, rh int
	stride, off    int
	pix            []byte
}

// row returns the region's part of source row y.
func (m rgbImage) row(y int) []byte {
	i := m.stride*(y-m.y0) + m.off
	return m.pix[i : i+3*m.rw]
}

// fullRegion returns the whole image as the region to convert.
func fullRegion(w, h int) image.Rectangle { return image.Rect(0, 0, w, h) }

// sniffFormat names the image format from its magic bytes, or "".
func sniffFormat(data []byte) string {
	switch {
	case bytes.HasPrefix(data, pngMagic):
		return "png"
	case bytes.HasPrefix(data, jpegMagic):
		return "jpeg"
	}
	return ""
}

// badImage wraps a reason and an optional cause so that it matches
// ErrBadImage.
func badImage(reason string, err error) error {
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrBadImage, reason, err)
	}
	return fmt.Errorf("%w: %s", ErrBadImage, reason)
}

// CheckImage reads only the header of a JPEG or PNG image and returns its
// size and format ("jpeg" or "png"). Images of more than maxPixels pixels
// (DefaultMaxPixels when maxPixels <= 0), empty, non-image or unreadable
// headers are errors matching ErrBadImage. No pixel data is decoded.
func CheckImage(data []byte, maxPixels int64) (w, h int, format string, err error) {
	if maxPixels <= 0 {
		maxPixels = DefaultMaxPixels
	}
	if len(data) == 0 {
		return 0, 0, "", badImage("empty file", nil)
	}
	format = sniffFormat(data)
	var cfg image.Config
	switch format {
	case "png":
		cfg, err = png.DecodeConfig(bytes.NewReader(data))
	case "jpeg":
		var hdr jpegHeader
		hdr, err = readJPEGHeader(data)
		cfg.Width, cfg.Height = hdr.w, hdr.h
	default:
		return 0, 0, "", badImage("not a JPEG or PNG image", nil)
	}
	if errors.Is(err, ErrBadImage) {
		return 0, 0, format, err
	}
	if err != nil {
		return 0, 0, format, badImage("reading "+format+" header", truncErr(err))
	}
	if cfg.Width <= 0 || cfg.Height <= 0 {
		return 0, 0, format, badImage(fmt.Sprintf("%s has no pixels (%dx%d)", format, cfg.Width, cfg.Height), nil)
	}
	if int64(cfg.Width)*int64(cfg.Height) > maxPixels {
		return cfg.Width, cfg.Height, format, badImage(fmt.Sprintf("%s is %dx%d = %d pixels, more than the limit of %d",
			format, cfg.Width, cfg.Height, int64(cfg.Width)*int64(cfg.Height), maxPixels), nil)
	}
	return cfg.Width, cfg.Height, format, nil
}

// truncErr names io.ErrUnexpectedEOF as truncation.
func truncErr(err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return fmt.Errorf("truncated: %w", err)
	}
	return err
}

// decodeRGB checks the header, decodes the image and converts the part of
// it that region(w, h) names to RGB as PIL's convert("RGB") does. The
// returned pixels reuse buf when it is large enough.
func decodeRGB(data []byte, maxPixels int64, buf []byte, region func(w, h int) image.Rectangle) (rgbImage, error) {
	return decodeRGBScaled(data, maxPixels, buf, nil, nil, func(w, h, _ int) image.Rectangle { return region(w, h) })
}

// decodeRGBScaled is decodeRGB with libjpeg's DCT-domain scaling: for a
// JPEG of w x h pixels, denom(w, h) (nil: 1) picks 1, 2, 4 or 8, and the
// image is decoded at 1/denom, scaledSize(w, h, denom), as PIL's
// Image.draft("RGB", (w//denom, h//denom)) decodes it. region(w, h, denom)
// gets the original size and the scale and names the part of the decoded
// (scaled) image to convert; the returned image's w and h are the decoded
// size. PNGs are never scaled. arena (nil: none) is libjpeg's reusable
// memory (decodeJPEGRows).
func decodeRGBScaled(data []byte, maxPixels int64, buf []byte, arena *[]byte, denom func(w, h int) int,
	region func(w, h, denom int) image.Rectangle) (rgbImage, error) {
	w, h, format, err := CheckImage(data, maxPixels)
	if err != nil {
		return rgbImage{}, err
	}
	d := 1
	if format == "jpeg" && denom != nil {
		d = denom(w, h)
	}
	sw, sh := scaledSize(w, h, d)
	r := region(w, h, d).Intersect(fullRegion(sw, sh))
	if r.Empty() {
		r = image.Rect(0, 0, 1, 1)
	}
	out := rgbImage{w: sw, h: sh, x0: r.Min.X, y0: r.Min.Y, rw: r.Dx(), rh: r.Dy()}
	if format == "jpeg" {
		out.stride, out.off = 3*sw, 3*out.x0
		out.pix = growBytes(buf, out.stride*out.rh)
		if err := decodeJPEGRows(data, d, out.pix, out.y0, out.rh, arena); err != nil {
			return out, err
		}
		return out, nil
	}
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		return rgbImage{}, badImage("decoding png", truncErr(err))
	}
	b := img.Bounds()
	if b.Dx() != w || b.Dy() != h {
		return rgbImage{}, badImage(fmt.Sprintf("png decoded to %dx%d, header says %dx%d", b.Dx(), b.Dy(), w, h), nil)
	}
	out.stride = 3 * out.rw
	out.pix = growBytes(buf, out.stride*out.rh)
	toRGB(img, out, pngColorType(data) == 0)
	return out, nil
}

// pngColorType returns the IHDR color type byte of a PNG (0 gray, 2 RGB,
// 3 palette, 4 gray+alpha, 6 RGBA), or 255 when the header is short.
func pngColorType(data []byte) byte {
	// magic(8) + length(4) + "IHDR"(4) + width(4) + height(4) + depth(1) + type(1)
	if len(data) < 26 {
		return 255
	}
	return data[25]
}

// toRGB converts the region of a decoded PNG named by out into out.pix.
// gray16Clip selects PIL's mode "I" handling of 16-bit grayscale PNGs (clip
// to 255) over keeping the high byte.
func toRGB(img image.Image, out rgbImage, gray16Clip bool) {
	x0, rw := out.x0, out.rw
	var pal [256][3]byte
	if m, ok := img.(*image.Paletted); ok {
		for i, c := range m.Palette {
			if i >= 256 {
				break
			}
			pal[i] = straightRGB(c)
		}
	}
	b := img.Bounds()
	for y := out.y0; y < out.y0+out.rh; y++ {
		dst := out.row(y)
		switch m := img.(type) {
		case *image.Gray:
			for x, v := range m.Pix[y*m.Stride+x0 : y*m.Stride+x0+rw] {
				dst[3*x], dst[3*x+1], dst[3*x+2] = v, v, v
			}
		case *image.RGBA:
			copy4to3(m.Pix[y*m.Stride+4*x0:y*m.Stride+4*(x0+rw)], dst)
		case *image.NRGBA:
			copy4to3(m.Pix[y*m.Stride+4*x0:y*m.Stride+4*(x0+rw)], dst)
		case *image.Gray16:
			src := m.Pix[y*m.Stride+2*x0 : y*m.Stride+2*(x0+rw)]
			for x := 0; x < rw; x++ {
				v := clip16to8(src[2*x], src[2*x+1], gray16Clip)
				dst[3*x], dst[3*x+1], dst[3*x+2] = v, v, v
			}
		case *image.RGBA64:
			copy8to3(m.Pix[y*m.Stride+8*x0:y*m.Stride+8*(x0+rw)], dst, false)
		case *image.NRGBA64:
			copy8to3(m.Pix[y*m.Stride+8*x0:y*m.Stride+8*(x0+rw)], dst, gray16Clip)
		case *image.Paletted:
			for x, v := range m.Pix[y*m.Stride+x0 : y*m.Stride+x0+rw] {
				p := pal[v]
				dst[3*x], dst[3*x+1], dst[3*x+2] = p[0], p[1], p[2]
			}
		default:
			for x := 0; x < rw; x++ {
				p := straightRGB(img.At(b.Min.X+x0+x, b.Min.Y+y))
				dst[3*x], dst[3*x+1], dst[3*x+2] = p[0], p[1], p[2]
			}
		}
	}
}

// clip16to8 maps a big-endian 16-bit sample to 8 bits: PIL's clip for
// mode "I" (clip true) or its high byte (clip false).
func clip16to8(hi, lo byte, clip bool) byte {
	if !clip {
		return hi
	}
	if hi != 0 {
		return 255
	}
	return lo
}

// straightRGB returns the non-premultiplied 8-bit RGB of c, the values PIL
// keeps when it drops alpha.
func straightRGB(c color.Color) [3]byte {
	switch c := c.(type) {
	case color.RGBA:
		if c.A == 255 {
			return [3]byte{c.R, c.G, c.B}
		}
	case color.NRGBA:
		return [3]byte{c.R, c.G, c.B}
	}
	n := color.NRGBA64Model.Convert(c).(color.NRGBA64)
	return [3]byte{byte(n.R >> 8), byte(n.G >> 8), byte(n.B >> 8)}
}

func copy4to3(src, dst []byte) {
	for x := 0; 4*x+3 < len(src) && 3*x+2 < len(dst); x++ {
		dst[3*x], dst[3*x+1], dst[3*x+2] = src[4*x], src[4*x+1], src[4*x+2]
	}
}

func copy8to3(src, dst []byte, clip bool) {
	for x := 0; 8*x+7 < len(src) && 3*x+2 < len(dst); x++ {
		dst[3*x] = clip16to8(src[8*x], src[8*x+1], clip)
		dst[3*x+1] = clip16to8(src[8*x+2], src[8*x+3], clip)
		dst[3*x+2] = clip16to8(src[8*x+4], src[8*x+5], clip)
	}
}
