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

// rgbImage is an 8-bit RGB image, 3 bytes per pixel, rows packed (stride 3*w).
type rgbImage struct {
	w, h int
	pix  []byte
}

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

// decodeRGB checks the header, decodes the image and converts it to RGB as
// PIL's convert("RGB") does. The returned pixels reuse buf when it is large
// enough.
func decodeRGB(data []byte, maxPixels int64, buf []byte) (rgbImage, error) {
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
	out := rgbImage{w: w, h: h, pix: growBytes(buf, 3*w*h)}
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

// toRGB converts a decoded image into out.pix. gray16Clip selects PIL's
// mode "I" handling of 16-bit grayscale PNGs (clip to 255) over keeping the
// high byte.
func toRGB(img image.Image, out rgbImage, gray16Clip bool) {
	w, h, pix := out.w, out.h, out.pix
	switch m := img.(type) {
	case *image.YCbCr:
		ycbcrToRGB(m, out)
	case *image.Gray:
		for y := 0; y < h; y++ {
			src := m.Pix[y*m.Stride : y*m.Stride+w]
			dst := pix[3*w*y : 3*w*(y+1)]
			for x, v := range src {
				dst[3*x], dst[3*x+1], dst[3*x+2] = v, v, v
			}
		}
	case *image.RGBA:
		copy4to3(m.Pix, m.Stride, pix, w, h)
	case *image.NRGBA:
		copy4to3(m.Pix, m.Stride, pix, w, h)
	case *image.Gray16:
		for y := 0; y < h; y++ {
			src := m.Pix[y*m.Stride : y*m.Stride+2*w]
			dst := pix[3*w*y : 3*w*(y+1)]
			for x := 0; x < w; x++ {
				v := clip16to8(src[2*x], src[2*x+1], gray16Clip)
				dst[3*x], dst[3*x+1], dst[3*x+2] = v, v, v
			}
		}
	case *image.RGBA64:
		copy8to3(m.Pix, m.Stride, pix, w, h, false)
	case *image.NRGBA64:
		copy8to3(m.Pix, m.Stride, pix, w, h, gray16Clip)
	case *image.Paletted:
		var pal [256][3]byte
		for i, c := range m.Palette {
			if i >= 256 {
				break
			}
			pal[i] = straightRGB(c)
		}
		for y := 0; y < h; y++ {
			src := m.Pix[y*m.Stride : y*m.Stride+w]
			dst := pix[3*w*y : 3*w*(y+1)]
			for x, v := range src {
				p := pal[v]
				dst[3*x], dst[3*x+1], dst[3*x+2] = p[0], p[1], p[2]
			}
		}
	case *image.CMYK:
		for y := 0; y < h; y++ {
			src := m.Pix[y*m.Stride : y*m.Stride+4*w]
			dst := pix[3*w*y : 3*w*(y+1)]
			for x := 0; x < w; x++ {
				nk := 255 - int(src[4*x+3])
				dst[3*x] = cmykChan(int(src[4*x]), nk)
				dst[3*x+1] = cmykChan(int(src[4*x+1]), nk)
				dst[3*x+2] = cmykChan(int(src[4*x+2]), nk)
			}
		}
	default:
		b := img.Bounds()
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				p := straightRGB(img.At(b.Min.X+x, b.Min.Y+y))
				i := 3 * (y*w + x)
				pix[i], pix[i+1], pix[i+2] = p[0], p[1], p[2]
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

func copy4to3(src []byte, stride int, dst []byte, w, h int) {
	for y := 0; y < h; y++ {
		s := src[y*stride : y*stride+4*w]
		d := dst[3*w*y : 3*w*(y+1)]
		for x := 0; x < w; x++ {
			d[3*x], d[3*x+1], d[3*x+2] = s[4*x], s[4*x+1], s[4*x+2]
		}
	}
}

func copy8to3(src []byte, stride int, dst []byte, w, h int, clip bool) {
	for y := 0; y < h; y++ {
		s := src[y*stride : y*stride+8*w]
		d := dst[3*w*y : 3*w*(y+1)]
		for x := 0; x < w; x++ {
			d[3*x] = clip16to8(s[8*x], s[8*x+1], clip)
			d[3*x+1] = clip16to8(s[8*x+2], s[8*x+3], clip)
			d[3*x+2] = clip16to8(s[8*x+4], s[8*x+5], clip)
		}
	}
}

// yccTables are libjpeg's fixed-point YCbCr->RGB tables (jdcolor.c,
// build_ycc_rgb_table), indexed by the chroma sample.
type yccTables struct {
	crR, cbB [256]int32
	crG, cbG [256]int32
}

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
	return t
}

// ycc holds the immutable conversion tables, built once.
var ycc = sync.OnceValue(newYCCTables)

func clampByte(v int32) byte {
	if v < 0 {
		return 0
	}
	if v > 255 {
		return 255
	}
	return byte(v)
}

// ycbcrToRGB converts a decoded JPEG's planes to RGB with libjpeg-turbo's
// default "fancy" chroma upsampling (jdsample.c: h2v2/h2v1 triangle filters
// when the chroma width is > 2, h1v2 always; plain replication otherwise) and
// its color conversion (jdcolor.c ycc_rgb_convert).
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
	fancyV := vs == 2 && (hs == 1 || (hs == 2 && cw > 2))
	t := ycc()
	rowBuf := make([]byte, 2*w+8)
	cbRow, crRow := rowBuf[:w], rowBuf[w:2*w]
	colsum := make([]int32, 2*cw)
	for y := 0; y < h; y++ {
		cy := y / vs
		for p, plane := range [2][]byte{m.Cb, m.Cr} {
			dst := cbRow
			if p == 1 {
				dst = crRow
			}
			r0 := plane[cy*m.CStride : cy*m.CStride+cw]
			switch {
			case fancyV:
				// nearest row and next nearest (above for even output rows)
				ny := cy - 1
				if y%2 == 1 {
					ny = cy + 1
				}
				ny = max(0, min(ny, ch-1))
				r1 := plane[ny*m.CStride : ny*m.CStride+cw]
				cs := colsum[:cw]
				for c := range cs {
					cs[c] = 3*int32(r0[c]) + int32(r1[c])
				}
				if hs == 1 { // h1v2
					bias := int32(1)
					if y%2 == 1 {
						bias = 2
					}
					for x := 0; x < w; x++ {
						dst[x] = byte((cs[x] + bias) >> 2)
					}
					continue
				}
				// h2v2
				for x := 0; x < w; x++ {
					c := x >> 1
					var v int32
					if x&1 == 0 {
						if c == 0 {
							v = (cs[0]*4 + 8) >> 4
						} else {
							v = (cs[c]*3 + cs[c-1] + 8) >> 4
						}
					} else {
						if c == cw-1 {
							v = (cs[c]*4 + 7) >> 4
						} else {
							v = (cs[c]*3 + cs[c+1] + 7) >> 4
						}
					}
					dst[x] = byte(v)
				}
			case fancyH: // h2v1 (vs == 1)
				for x := 0; x < w; x++ {
					c := x >> 1
					var v int32
					if x&1 == 0 {
						if c == 0 {
							v = int32(r0[0])
						} else {
							v = (3*int32(r0[c]) + int32(r0[c-1]) + 1) >> 2
						}
					} else {
						if c == cw-1 {
							v = int32(r0[c])
						} else {
							v = (3*int32(r0[c]) + int32(r0[c+1]) + 2) >> 2
						}
					}
					dst[x] = byte(v)
				}
			default:
				for x := 0; x < w; x++ {
					dst[x] = r0[x/hs]
				}
			}
		}
		yRow := m.Y[y*m.YStride : y*m.YStride+w]
		d := out.pix[3*w*y : 3*w*(y+1)]
		for x := 0; x < w; x++ {
			yy := int32(yRow[x])
			cb, cr := cbRow[x], crRow[x]
			d[3*x] = clampByte(yy + t.crR[cr])
			d[3*x+1] = clampByte(yy + (t.cbG[cb]+t.crG[cr])>>16)
			d[3*x+2] = clampByte(yy + t.cbB[cb])
		}
	}
}
