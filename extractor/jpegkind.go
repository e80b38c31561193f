package extractor

import "fmt"

// jpegKind is what a JPEG's markers before its first scan say about how
// it is coded: enough to route it to the GPU decoder or keep it on the
// CPU's (libjpeg-turbo) without decoding anything.
type jpegKind struct {
	// sof is the start-of-frame marker's code: 0xC0 baseline, 0xC1
	// extended sequential, 0xC2 progressive, 0xC3 lossless, 0xC5-0xC7
	// hierarchical, 0xC9-0xCF arithmetic-coded.
	sof byte
	// precision is the sample precision in bits (8 or 12).
	precision int
	// components is the frame's component count: 1 gray, 3 YCbCr or RGB,
	// 4 CMYK or YCCK.
	components int
	// adobe is set when an APP14 "Adobe" segment is present; transform is
	// its color transform (0: none, RGB or CMYK; 1 YCbCr; 2 YCCK).
	adobe     bool
	transform int
	// rgbIDs: three components with ids 'R', 'G', 'B' (libjpeg treats the
	// image as RGB, not YCbCr).
	rgbIDs bool
}

// jpegKindOf reads data's markers up to its start of frame. It never
// reads past data and never panics; an error means the bytes are not a
// JPEG whose frame could be found (the CPU decoder then says what is
// wrong with them).
func jpegKindOf(data []byte) (jpegKind, error) {
	var k jpegKind
	if len(data) < 4 || data[0] != 0xFF || data[1] != 0xD8 {
		return k, fmt.Errorf("no JPEG start of image")
	}
	i := 2
	for {
		if i >= len(data) {
			return k, fmt.Errorf("no start of frame before the end of the data")
		}
		if data[i] != 0xFF {
			return k, fmt.Errorf("byte %d: 0x%02x where a marker should be", i, data[i])
		}
		// Markers may be preceded by fill bytes 0xFF.
		for i < len(data) && data[i] == 0xFF {
			i++
		}
		if i >= len(data) {
			return k, fmt.Errorf("no start of frame before the end of the data")
		}
		code := data[i]
		i++
		switch {
		case code == 0x01 || (code >= 0xD0 && code <= 0xD7):
			continue // TEM, RSTn: no length
		case code == 0xD9 || code == 0xDA:
			return k, fmt.Errorf("marker 0x%02x before any start of frame", code)
		}
		if i+2 > len(data) {
			return k, fmt.Errorf("marker 0x%02x: truncated length", code)
		}
		n := int(data[i])<<8 | int(data[i+1])
		if n < 2 || n > len(data)-i {
			return k, fmt.Errorf("marker 0x%02x: length %d past the data", code, n)
		}
		seg := data[i+2 : i+n]
		i += n
		switch {
		case code == 0xEE: // APP14
			if len(seg) >= 12 && string(seg[:5]) == "Adobe" {
				k.adobe, k.transform = true, int(seg[11])
			}
		case code >= 0xC0 && code <= 0xCF && code != 0xC4 && code != 0xC8 && code != 0xCC:
			// SOFn: precision, height, width, components, then 3 bytes
			// per component (id, sampling, table).
			if len(seg) < 6 {
				return k, fmt.Errorf("start of frame 0x%02x: %d bytes", code, len(seg))
			}
			k.sof, k.precision, k.components = code, int(seg[0]), int(seg[5])
			if k.components == 3 && len(seg) >= 6+9 {
				k.rgbIDs = seg[6] == 'R' && seg[9] == 'G' && seg[12] == 'B'
			}
			return k, nil
		}
	}
}

// progressive reports whether the frame is progressive (SOF2, or its
// differential and arithmetic-coded kin SOF6, SOF10, SOF14): libjpeg keeps
// the whole image's coefficients while it decodes one.
func (k jpegKind) progressive() bool {
	return k.sof == 0xC2 || k.sof == 0xC6 || k.sof == 0xCA || k.sof == 0xCE
}

// gpuDecodable reports whether the GPU decoder is asked to decode a JPEG
// of kind k, and if not, why: only 8-bit Huffman-coded sequential JPEGs
// (baseline or extended) of 1 or 3 components in YCbCr (or gray) go to the
// GPU; progressive, lossless, hierarchical, arithmetic-coded, 12-bit, RGB,
// CMYK and YCCK JPEGs stay on libjpeg-turbo, which decodes them as PIL
// does. The GPU decoder may still refuse one it is asked to decode
// (errGPURefused): that one is decoded on the CPU too.
func (k jpegKind) gpuDecodable() (bool, string) {
	switch {
	case k.sof == 0xC2:
		return false, "progressive"
	case k.sof == 0xC3:
		return false, "lossless"
	case k.sof >= 0xC9:
		return false, "arithmetic-coded"
	case k.sof != 0xC0 && k.sof != 0xC1:
		return false, fmt.Sprintf("frame type 0x%02x", k.sof)
	case k.precision != 8:
		return false, fmt.Sprintf("%d-bit samples", k.precision)
	case k.components == 4:
		return false, "CMYK/YCCK"
	case k.components != 1 && k.components != 3:
		return false, fmt.Sprintf("%d components", k.components)
	case k.components == 3 && ((k.adobe && k.transform == 0) || (!k.adobe && k.rgbIDs)):
		return false, "RGB (not YCbCr)"
	}
	return true, ""
}
