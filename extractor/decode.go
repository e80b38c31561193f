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
//   - JPEG YCbCr: libjpeg-turbo's "fancy" (triangle) chroma upsampling for
//     4:2:0, 4:2:2 and 4:4:0 and its fixed-point YCbCr->RGB tables; the IDCT
//     is Go's, which differs from libjpeg's ISLOW by at most a few levels on
//     some pixels.
//   - JPEG CMYK/YCCK: PIL reads Adobe-inverted CMYK ("CMYK;I") and converts
//     with R = (255-K) - (C*(255-K))/255 (MULDIV255): reproduced on Go's CMYK.

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"io"
	"sync"
)

// DefaultMaxPixels is the largest image (width*height) decoded when no limit
// is given: PIL's Image.MAX_IMAGE_PIXELS.
const DefaultMaxPixels int64 = 89478485

var (
	pngMagic  = []byte("\x89PNG\r\n\x1a\n")
	jpegMagic = []byte{0xff, 0xd8, 0xff}
)

// rgbImage is the part [x0, x0+rw) x [y0, y0+rh) of a w x h image as 8-bit
// RGB, 3 bytes per pixel, rows packed (stride 3*rw). Only the pixels the
// resize reads are converted.
type rgbImage struct {
	w, h           int
	x0, y0, rw, rh int
	pix            []byte
}

// row returns the converted part of source row y.
func (m rgbImage) row(y int) []byte {
	i := 3 * m.rw * (y - m.y0)
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
		cfg, err = jpeg.DecodeConfig(bytes.NewReader(data))
	default:
		return 0, 0, "", badImage("not a JPEG or PNG image", nil)
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
	w, h, format, err := CheckImage(data, maxPixels)
	if err != nil {
		return rgbImage{}, err
	}
	var img image.Image
	switch format {
	case "png":
		img, err = png.Decode(bytes.NewReader(data))
	default:
		img, err = jpeg.Decode(bytes.NewReader(data))
	}
	if err != nil {
		return rgbImage{}, badImage("decoding "+format, truncErr(err))
	}
	b := img.Bounds()
	if b.Dx() != w || b.Dy() != h {
		return rgbImage{}, badImage(fmt.Sprintf("%s decoded to %dx%d, header says %dx%d", format, b.Dx(), b.Dy(), w, h), nil)
	}
	r := region(w, h).Intersect(fullRegion(w, h))
	if r.Empty() {
		r = image.Rect(0, 0, 1, 1)
	}
	out := rgbImage{w: w, h: h, x0: r.Min.X, y0: r.Min.Y, rw: r.Dx(), rh: r.Dy()}
	out.pix = growBytes(buf, 3*out.rw*out.rh)
	gray16Clip := format == "png" && pngColorType(data) == 0
	toRGB(img, out, gray16Clip)
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

// toRGB converts the region of a decoded image named by out into out.pix.
// gray16Clip selects PIL's mode "I" handling of 16-bit grayscale PNGs (clip
// to 255) over keeping the high byte.
func toRGB(img image.Image, out rgbImage, gray16Clip bool) {
	x0, rw := out.x0, out.rw
	switch m := img.(type) {
	case *image.YCbCr:
		ycbcrToRGB(m, out)
		return
	case *image.CMYK:
		for y := out.y0; y < out.y0+out.rh; y++ {
			src := m.Pix[y*m.Stride+4*x0 : y*m.Stride+4*(x0+rw)]
			dst := out.row(y)
			for x := 0; x < rw; x++ {
				nk := 255 - int(src[4*x+3])
				dst[3*x] = cmykChan(int(src[4*x]), nk)
				dst[3*x+1] = cmykChan(int(src[4*x+1]), nk)
				dst[3*x+2] = cmykChan(int(src[4*x+2]), nk)
			}
		}
		return
	}
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

// cmykChan is Pillow's cmyk2rgb for one channel: nk - MULDIV255(c, nk).
func cmykChan(c, nk int) byte {
	t := c*nk + 128
	v := nk - ((t>>8)+t)>>8
	if v < 0 {
		return 0
	}
	return byte(v)
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

// yccTables are libjpeg's fixed-point YCbCr->RGB tables (jdcolor.c,
// build_ycc_rgb_table), indexed by the chroma sample, and its range limit.
type yccTables struct {
	crR, cbB [256]int32
	crG, cbG [256]int32
	// limit[v+limitOff] is v clamped to 0..255, for v in -limitOff..1023-limitOff.
	limit [1024]byte
}

const limitOff = 512

// newYCCTables computes the tables exactly as libjpeg-turbo does.
func newYCCTables() *yccTables {
	const scaleBits = 16
	const oneHalf = 1 << (scaleBits - 1)
	fix := func(x float64) int64 { return int64(x*(1<<scaleBits) + 0.5) }
	t := &yccTables{}
	for i := 0; i < 256; i++ {
		x := int64(i - 128)
		t.crR[i] = int32((fix(1.40200)*x + oneHalf) >> scaleBits)
		t.cbB[i] = int32((fix(1.77200)*x + oneHalf) >> scaleBits)
		t.crG[i] = int32(-fix(0.71414) * x)
		t.cbG[i] = int32(-fix(0.34414)*x + oneHalf)
	}
	for i := range t.limit {
		t.limit[i] = byte(max(0, min(255, i-limitOff)))
	}
	return t
}

// ycc holds the immutable conversion tables, built once.
var ycc = sync.OnceValue(newYCCTables)

// ycbcrToRGB converts the region of a decoded JPEG's planes to RGB with
// libjpeg-turbo's default "fancy" chroma upsampling (jdsample.c: h2v2 and
// h2v1 triangle filters when the chroma width is > 2, h1v2 always, plain
// replication otherwise; edges replicate the last real sample) and its color
// conversion (jdcolor.c ycc_rgb_convert).
func ycbcrToRGB(m *image.YCbCr, out rgbImage) {
	w, h := out.w, out.h
	hs, vs := 1, 1 // luma samples per chroma sample, horizontally and vertically
	switch m.SubsampleRatio {
	case image.YCbCrSubsampleRatio422:
		hs = 2
	case image.YCbCrSubsampleRatio420:
		hs, vs = 2, 2
	case image.YCbCrSubsampleRatio440:
		vs = 2
	case image.YCbCrSubsampleRatio411:
		hs = 4
	case image.YCbCrSubsampleRatio410:
		hs, vs = 4, 2
	}
	cw := (w + hs - 1) / hs
	ch := (h + vs - 1) / vs
	fancyH := hs == 2 && cw > 2
	fancyV := vs == 2 && (hs == 1 || fancyH)
	t := ycc()
	x0, x1 := out.x0, out.x0+out.rw
	// Chroma columns [c0, c1) cover the region plus one neighbour each side.
	c0, c1 := max(0, x0/hs-1), min(cw, (x1-1)/hs+2)
	// ext[c-c0+1] is the column sum at chroma column c; ext[0] and
	// ext[len-1] replicate the edges (libjpeg's first/last column cases).
	ext := make([]int32, c1-c0+2)
	up := make([]byte, 2*(hs*(c1-c0)+8))
	cbUp, crUp := up[:len(up)/2], up[len(up)/2:]
	ux := c0 * hs // image column of cbUp[0]
	for y := out.y0; y < out.y0+out.rh; y++ {
		cy := y / vs
		for p, plane := range [2][]byte{m.Cb, m.Cr} {
			dst := cbUp
			if p == 1 {
				dst = crUp
			}
			r0 := plane[cy*m.CStride : cy*m.CStride+cw]
			var r1 []byte
			mul, bias0, bias1, shift := int32(1), int32(0), int32(0), uint(0)
			if fancyV {
				ny := cy - 1 // next nearest row: above for even output rows
				if y%2 == 1 {
					ny = cy + 1
				}
				ny = max(0, min(ny, ch-1))
				r1 = plane[ny*m.CStride : ny*m.CStride+cw]
				mul = 3
			}
			e := ext[1 : len(ext)-1]
			for i := range e {
				v := mul * int32(r0[c0+i])
				if r1 != nil {
					v += int32(r1[c0+i])
				}
				e[i] = v
			}
			if c0 == 0 {
				ext[0] = ext[1]
			} else {
				ext[0] = mul*int32(r0[c0-1]) + pick(r1, c0-1)
			}
			if c1 == cw {
				ext[len(ext)-1] = ext[len(ext)-2]
			} else {
				ext[len(ext)-1] = mul*int32(r0[c1]) + pick(r1, c1)
			}
			switch {
			case fancyH && fancyV: // h2v2: (3*this + neighbour + 8 or 7) >> 4
				bias0, bias1, shift = 8, 7, 4
			case fancyH: // h2v1: (3*this + neighbour + 1 or 2) >> 2
				bias0, bias1, shift = 1, 2, 2
			case fancyV: // h1v2: (colsum + 1 or 2) >> 2
				bias := int32(1)
				if y%2 == 1 {
					bias = 2
				}
				for i, v := range e {
					dst[i] = byte((v + bias) >> 2)
				}
				continue
			default:
				for i, v := range e {
					for j := 0; j < hs; j++ {
						dst[i*hs+j] = byte(v)
					}
				}
				continue
			}
			for i := 1; i < len(ext)-1; i++ {
				this := 3 * ext[i]
				dst[2*(i-1)] = byte((this + ext[i-1] + bias0) >> shift)
				dst[2*(i-1)+1] = byte((this + ext[i+1] + bias1) >> shift)
			}
		}
		yRow := m.Y[y*m.YStride+x0 : y*m.YStride+x1]
		d := out.row(y)
		cb, cr := cbUp[x0-ux:x1-ux], crUp[x0-ux:x1-ux]
		for x, yv := range yRow {
			yy := int32(yv) + limitOff
			b, r := cb[x], cr[x]
			d[3*x] = t.limit[(yy+t.crR[r])&1023]
			d[3*x+1] = t.limit[(yy+(t.cbG[b]+t.crG[r])>>16)&1023]
			d[3*x+2] = t.limit[(yy+t.cbB[b])&1023]
		}
	}
}

// pick returns r[i], or 0 when r is nil.
func pick(r []byte, i int) int32 {
	if r == nil {
		return 0
	}
	return int32(r[i])
}
