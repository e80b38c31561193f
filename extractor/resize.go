package extractor

// This file reproduces Pillow's Image.resize(size, BILINEAR) on 8-bit RGB
// (libImaging/Resample.c: precompute_coeffs, normalize_coeffs_8bpc,
// ImagingResampleHorizontal_8bpc / Vertical_8bpc, ImagingResampleInner)
// bit for bit, but computes only the output pixels a crop keeps: every
// output pixel of Pillow's two-pass resize depends only on its own column's
// horizontal coefficients and its own row's vertical coefficients, so
// evaluating the same sums for a sub-rectangle gives the same bytes.

import "math"

// precisionBits is Pillow's PRECISION_BITS (32 - 8 - 2).
const precisionBits = 32 - 8 - 2

// resampleCoeffs are the fixed-point filter taps of a range of output
// positions [first, first+n) along one axis.
type resampleCoeffs struct {
	first int
	ksize int
	// bounds[2*i], bounds[2*i+1] are xmin and the tap count of output first+i.
	bounds []int32
	// k[i*ksize : i*ksize+count] are the taps of output first+i.
	k []int32
}

// bilinearFilter is Pillow's triangle filter (support 1).
func bilinearFilter(x float64) float64 {
	if x < 0 {
		x = -x
	}
	if x < 1 {
		return 1 - x
	}
	return 0
}

// precomputeCoeffs mirrors Pillow's precompute_coeffs (box = [0, inSize])
// followed by normalize_coeffs_8bpc, for outputs [first, first+n) of outSize.
func precomputeCoeffs(inSize, outSize, first, n int, c *resampleCoeffs, scratch []float64) []float64 {
	scale := float64(inSize) / float64(outSize)
	filterscale := scale
	if filterscale < 1 {
		filterscale = 1
	}
	support := 1.0 * filterscale
	ksize := int(math.Ceil(support))*2 + 1
	c.first, c.ksize = first, ksize
	c.bounds = growInt32(c.bounds, 2*n)
	c.k = growInt32(c.k, n*ksize)
	if cap(scratch) < ksize {
		scratch = make([]float64, ksize)
	}
	kd := scratch[:ksize]
	ss := 1.0 / filterscale
	for i := 0; i < n; i++ {
		xx := first + i
		center := 0 + (float64(xx)+0.5)*scale
		ww := 0.0
		xmin := int(center - support + 0.5)
		if xmin < 0 {
			xmin = 0
		}
		xmax := int(center + support + 0.5)
		if xmax > inSize {
			xmax = inSize
		}
		xmax -= xmin
		for x := 0; x < xmax; x++ {
			w := bilinearFilter((float64(x+xmin) - center + 0.5) * ss)
			kd[x] = w
			ww += w
		}
		k := c.k[i*ksize : (i+1)*ksize]
		for x := 0; x < ksize; x++ {
			v := 0.0
			if x < xmax {
				v = kd[x]
				if ww != 0 {
					v /= ww
				}
			}
			if v < 0 {
				k[x] = int32(-0.5 + v*(1<<precisionBits))
			} else {
				k[x] = int32(0.5 + v*(1<<precisionBits))
			}
		}
		c.bounds[2*i] = int32(xmin)
		c.bounds[2*i+1] = int32(xmax)
	}
	return scratch
}

func growInt32(b []int32, n int) []int32 {
	if cap(b) < n {
		return make([]int32, n)
	}
	return b[:n]
}

// clip8 is Pillow's clip8: the fixed-point sum shifted down and clamped.
func clip8(ss int32) byte {
	v := ss >> precisionBits
	if v < 0 {
		return 0
	}
	if v > 255 {
		return 255
	}
	return byte(v)
}

// resizeScratch holds the buffers of one resizeCrop call, reused via a pool.
type resizeScratch struct {
	hc, vc resampleCoeffs
	dscr   []float64
	tmp    []byte
	acc    []int32
	out    []byte
}

// resizeCrop computes the window [left, left+cw) x [top, top+ch) of src
// resized to tw x th by Pillow's bilinear resample, into s.out (RGB, rows of
// 3*cw bytes). The window must lie inside [0,tw) x [0,th).
func resizeCrop(src rgbImage, tw, th, left, top, cw, ch int, s *resizeScratch) []byte {
	needH := tw != src.w
	needV := th != src.h
	s.out = growBytes(s.out, 3*cw*ch)
	out := s.out

	// Rows of the source the vertical pass reads for the output rows kept.
	var rowFirst, rowLast int
	if needV {
		s.dscr = precomputeCoeffs(src.h, th, top, ch, &s.vc, s.dscr)
		rowFirst = int(s.vc.bounds[0])
		rowLast = rowFirst
		for i := 0; i < ch; i++ {
			rowLast = max(rowLast, int(s.vc.bounds[2*i]+s.vc.bounds[2*i+1]))
			rowFirst = min(rowFirst, int(s.vc.bounds[2*i]))
		}
	} else {
		rowFirst, rowLast = top, top+ch
	}

	// Horizontal pass over those rows, kept columns only (or a plain copy).
	nrows := rowLast - rowFirst
	s.tmp = growBytes(s.tmp, 3*cw*nrows)
	tmp := s.tmp
	if needH {
		s.dscr = precomputeCoeffs(src.w, tw, left, cw, &s.hc, s.dscr)
		ks := s.hc.ksize
		for r := 0; r < nrows; r++ {
			row := src.pix[3*src.w*(rowFirst+r) : 3*src.w*(rowFirst+r+1)]
			d := tmp[3*cw*r : 3*cw*(r+1)]
			for xx := 0; xx < cw; xx++ {
				xmin := int(s.hc.bounds[2*xx])
				n := int(s.hc.bounds[2*xx+1])
				k := s.hc.k[xx*ks : xx*ks+n]
				p := row[3*xmin : 3*(xmin+n)]
				var s0, s1, s2 int32 = 1 << (precisionBits - 1), 1 << (precisionBits - 1), 1 << (precisionBits - 1)
				for x, kv := range k {
					s0 += int32(p[3*x]) * kv
					s1 += int32(p[3*x+1]) * kv
					s2 += int32(p[3*x+2]) * kv
				}
				d[3*xx], d[3*xx+1], d[3*xx+2] = clip8(s0), clip8(s1), clip8(s2)
			}
		}
	} else {
		for r := 0; r < nrows; r++ {
			copy(tmp[3*cw*r:3*cw*(r+1)], src.pix[3*(src.w*(rowFirst+r)+left):3*(src.w*(rowFirst+r)+left+cw)])
		}
	}

	if !needV {
		copy(out, tmp[:3*cw*ch])
		return out
	}

	// Vertical pass: accumulate whole rows for each kept output row.
	rw := 3 * cw
	s.acc = growInt32(s.acc, rw)
	acc := s.acc
	ks := s.vc.ksize
	for yy := 0; yy < ch; yy++ {
		ymin := int(s.vc.bounds[2*yy]) - rowFirst
		n := int(s.vc.bounds[2*yy+1])
		k := s.vc.k[yy*ks : yy*ks+n]
		for i := range acc {
			acc[i] = 1 << (precisionBits - 1)
		}
		for y, kv := range k {
			row := tmp[rw*(ymin+y) : rw*(ymin+y+1)]
			a := acc[:len(row)]
			for i, v := range row {
				a[i] += int32(v) * kv
			}
		}
		d := out[rw*yy : rw*(yy+1)]
		for i, v := range acc {
			d[i] = clip8(v)
		}
	}
	return out
}

func growBytes(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}
