package extractor

// This file reproduces Pillow's Image.resize(size, BILINEAR) on 8-bit RGB
// (libImaging/Resample.c: precompute_coeffs, normalize_coeffs_8bpc,
// ImagingResampleHorizontal_8bpc / Vertical_8bpc, ImagingResampleInner)
// bit for bit, but computes only the output pixels a crop keeps: every
// output pixel of Pillow's two-pass resize depends only on its own column's
// horizontal coefficients and its own row's vertical coefficients, so
// evaluating the same sums for a sub-rectangle gives the same bytes.

import (
	"image"
	"math"
)

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
	if uint32(v) <= 255 {
		return byte(v)
	}
	if v < 0 {
		return 0
	}
	return 255
}

// resizeScratch holds one resize's plan and buffers, reused via a pool.
type resizeScratch struct {
	hc, vc   resampleCoeffs
	dscr     []float64
	tmp      []byte
	acc      []int32
	out      []byte
	sw, sh   int // source size
	tw, th   int // resized size
	left, cw int // kept output columns
	top, ch  int // kept output rows
	needH    bool
	needV    bool
	src      image.Rectangle // source pixels the kept outputs read
}

// plan prepares resizing a sw x sh image to tw x th, keeping only the
// window [left, left+cw) x [top, top+ch) (inside [0,tw) x [0,th)), and
// returns the source rectangle that window reads. Pillow skips a pass whose
// axis keeps its size (ImagingResampleInner's need_horizontal/vertical).
func (s *resizeScratch) plan(sw, sh, tw, th, left, top, cw, ch int) image.Rectangle {
	s.sw, s.sh, s.tw, s.th = sw, sh, tw, th
	s.left, s.cw, s.top, s.ch = left, cw, top, ch
	s.needH, s.needV = tw != sw, th != sh
	s.src = image.Rect(left, top, left+cw, top+ch)
	if s.needV {
		s.dscr = precomputeCoeffs(sh, th, top, ch, &s.vc, s.dscr)
		s.src.Min.Y, s.src.Max.Y = coeffSpan(&s.vc, ch)
	}
	if s.needH {
		s.dscr = precomputeCoeffs(sw, tw, left, cw, &s.hc, s.dscr)
		s.src.Min.X, s.src.Max.X = coeffSpan(&s.hc, cw)
	}
	return s.src
}

// coeffSpan returns the input range [lo, hi) the first n outputs read.
func coeffSpan(c *resampleCoeffs, n int) (lo, hi int) {
	lo, hi = int(c.bounds[0]), int(c.bounds[0])
	for i := 0; i < n; i++ {
		lo = min(lo, int(c.bounds[2*i]))
		hi = max(hi, int(c.bounds[2*i]+c.bounds[2*i+1]))
	}
	return lo, hi
}

// run executes the plan on src, which must hold at least the planned
// source rectangle, and returns the window as RGB rows of 3*cw bytes.
func (s *resizeScratch) run(src rgbImage) []byte {
	cw, ch := s.cw, s.ch
	s.out = growBytes(s.out, 3*cw*ch)
	out := s.out
	rowFirst, rowLast := s.src.Min.Y, s.src.Max.Y

	// Horizontal pass over the rows the vertical pass reads, kept columns
	// only (or a plain copy when the width is unchanged).
	nrows := rowLast - rowFirst
	s.tmp = growBytes(s.tmp, 3*cw*nrows)
	tmp := s.tmp
	if s.needH {
		ks := s.hc.ksize
		for r := 0; r < nrows; r++ {
			row := src.row(rowFirst + r)
			d := tmp[3*cw*r : 3*cw*(r+1)]
			for xx := 0; xx < cw; xx++ {
				xmin := int(s.hc.bounds[2*xx]) - src.x0
				n := int(s.hc.bounds[2*xx+1])
				k := s.hc.k[xx*ks : xx*ks+n]
				p := row[3*xmin : 3*(xmin+n)]
				var s0, s1, s2 int32 = 1 << (precisionBits - 1), 1 << (precisionBits - 1), 1 << (precisionBits - 1)
				for x, kv := range k {
					q := p[3*x : 3*x+3 : 3*x+3]
					s0 += int32(q[0]) * kv
					s1 += int32(q[1]) * kv
					s2 += int32(q[2]) * kv
				}
				d[3*xx], d[3*xx+1], d[3*xx+2] = clip8(s0), clip8(s1), clip8(s2)
			}
		}
	} else {
		for r := 0; r < nrows; r++ {
			row := src.row(rowFirst + r)
			copy(tmp[3*cw*r:3*cw*(r+1)], row[3*(s.left-src.x0):3*(s.left-src.x0+cw)])
		}
	}

	if !s.needV {
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
		if n == 0 { // cannot happen for bilinear; Pillow would output 0
			clear(out[rw*yy : rw*(yy+1)])
			continue
		}
		k0 := k[0]
		for i, v := range tmp[rw*ymin : rw*(ymin+1)] {
			acc[i] = 1<<(precisionBits-1) + int32(v)*k0
		}
		for y, kv := range k[1:] {
			row := tmp[rw*(ymin+1+y) : rw*(ymin+2+y)]
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
