package extractor

// This file reproduces Pillow's Image.resize(size, BILINEAR) on 8-bit RGB
// (Pillow 9.4, libImaging/Resample.c: precompute_coeffs,
// normalize_coeffs_8bpc, ImagingResampleHorizontal_8bpc / Vertical_8bpc,
// ImagingResampleInner) bit for bit, but computes only the output pixels a
// crop keeps: every output pixel of Pillow's two-pass resize depends only
// on its own column's horizontal taps and its own row's vertical taps, so
// evaluating the same sums for a sub-rectangle gives the same bytes.
//
// Speed: the taps of a (source size, target size, window) triple are
// computed once and kept in a bounded per-scratch cache; every output of an
// axis uses the same number of taps (the most any of them has in Pillow,
// the others padded with Pillow's own zero taps, their window moved inside
// the image), so the inner loops are unrolled for 2 to 8 taps (scale
// factors up to about 3.5) with no bounds checks in their sums (go build
// -gcflags=-d=ssa/check_bce shows three slice checks per output pixel in
// hrow2..hrow8, for its source, tap and output windows, and none in the
// loops of vrow2..vrow8); more taps go through loops of 4 taps. Zero taps
// add 0 to the same integer sums, so the bytes do not change. On one row
// of 448 outputs the unrolled kernels measured about 3x faster than a
// plain loop over the taps (5 and 8 taps) and 1.5x faster than the 4-tap
// loop (8 taps).

import (
	"image"
	"math"
)

// precisionBits is Pillow's PRECISION_BITS (32 - 8 - 2).
const precisionBits = 32 - 8 - 2

// half is the rounding term every sum starts from.
const half = 1 << (precisionBits - 1)

// resampleCoeffs are the fixed-point taps of the outputs [first, first+n)
// of an inSize -> outSize resample along one axis. Immutable once built.
type resampleCoeffs struct {
	first, n int
	// lo, hi is the input range [lo, hi) the outputs read.
	lo, hi int
	// taps is the number of taps of every output.
	taps int
	// start[i] is the first input position output first+i reads, minus lo.
	start []int32
	// k[i*taps : (i+1)*taps] are the taps of output first+i.
	k []int32
}

// bytes is the memory the coefficients hold.
func (c *resampleCoeffs) bytes() int { return 4*(len(c.start)+len(c.k)) + 64 }

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

// buildCoeffs mirrors Pillow's precompute_coeffs (box = [0, box]: the
// whole axis when box = inSize, a fraction of the last pixel less or more
// after a scaled JPEG decode) followed by normalize_coeffs_8bpc, for
// outputs [first, first+n) of outSize, then pads every output to the same
// number of taps. box is a float32 as Pillow's box is (a C float).
func buildCoeffs(inSize int, box float32, outSize, first, n int) *resampleCoeffs {
	scale := float64(box) / float64(outSize)
	filterscale := max(scale, 1)
	support := 1.0 * filterscale
	ksize := int(math.Ceil(support))*2 + 1
	ss := 1.0 / filterscale
	xmins := make([]int, n)
	counts := make([]int, n)
	pre := make([]int32, n*ksize) // Pillow's kk, normalized
	kd := make([]float64, ksize)
	taps := 1
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
		k := pre[i*ksize : (i+1)*ksize]
		for x := 0; x < xmax; x++ {
			v := kd[x]
			if ww != 0 {
				v /= ww
			}
			if v < 0 {
				k[x] = int32(-0.5 + v*(1<<precisionBits))
			} else {
				k[x] = int32(0.5 + v*(1<<precisionBits))
			}
		}
		xmins[i], counts[i] = xmin, xmax
		taps = max(taps, xmax)
	}
	taps = min(taps, inSize)
	c := &resampleCoeffs{first: first, n: n, taps: taps, start: make([]int32, n), k: make([]int32, n*taps)}
	c.lo, c.hi = inSize, 0
	starts := make([]int, n)
	for i := 0; i < n; i++ {
		// Output i reads [s, s+taps): its own taps at offset xmin-s, zeros
		// elsewhere; s moves left only where xmin+taps passes the end.
		s := min(xmins[i], inSize-taps)
		copy(c.k[i*taps+xmins[i]-s:], pre[i*ksize:i*ksize+counts[i]])
		starts[i] = s
		c.lo, c.hi = min(c.lo, s), max(c.hi, s+taps)
	}
	for i, s := range starts {
		c.start[i] = int32(s - c.lo)
	}
	return c
}

// coeffKey names one axis's coefficients: in source pixels of which
// [0, box) map onto out outputs, outputs [first, first+n) kept.
type coeffKey struct {
	in, out, first, n int
	box               float32
}

// coeffCacheBytes bounds the coefficients one scratch keeps.
const coeffCacheBytes = 1 << 20

// coeffCache keeps recently used coefficients, oldest evicted first, at
// most coeffCacheBytes. Each preprocScratch has its own (no lock): a
// dataset's few common image sizes stay cached in every worker.
type coeffCache struct {
	m     map[coeffKey]*resampleCoeffs
	order []coeffKey // insertion order, oldest first
	size  int
}

// get returns the coefficients for key, building them on a miss.
func (cc *coeffCache) get(key coeffKey) *resampleCoeffs {
	if c, ok := cc.m[key]; ok {
		return c
	}
	c := buildCoeffs(key.in, key.box, key.out, key.first, key.n)
	if cc.m == nil {
		cc.m = make(map[coeffKey]*resampleCoeffs)
	}
	for cc.size+c.bytes() > coeffCacheBytes && len(cc.order) > 0 {
		old := cc.order[0]
		cc.order = cc.order[1:]
		cc.size -= cc.m[old].bytes()
		delete(cc.m, old)
	}
	if c.bytes() <= coeffCacheBytes {
		cc.m[key] = c
		cc.order = append(cc.order, key)
		cc.size += c.bytes()
	}
	return c
}

// clip8 is Pillow's clip8: the fixed-point sum shifted down and clamped.
func clip8(ss int32) byte {
	v := ss >> precisionBits
	if uint32(v) > 255 {
		v = ^v >> 31 // 0 when v < 0, -1 (255 as a byte) when v > 255
	}
	return byte(v)
}

// resizeScratch holds one resize's plan and buffers, reused via a pool.
type resizeScratch struct {
	cache    coeffCache
	hc, vc   *resampleCoeffs
	tmp      []byte
	acc      []int32
	rows     [][]byte
	out      []byte
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
	return s.planBox(sw, sh, float32(sw), float32(sh), tw, th, left, top, cw, ch)
}

// planBox is plan for Pillow's resize(box=(0, 0, bw, bh)): the source
// region [0, bw) x [0, bh) of the sw x sh image becomes the tw x th
// output. A pass is skipped only where Pillow's need_horizontal or
// need_vertical is false: the output keeps the axis's size and the box
// is that size.
func (s *resizeScratch) planBox(sw, sh int, bw, bh float32, tw, th, left, top, cw, ch int) image.Rectangle {
	s.left, s.cw, s.top, s.ch = left, cw, top, ch
	s.needH = tw != sw || bw != float32(tw)
	s.needV = th != sh || bh != float32(th)
	s.hc, s.vc = nil, nil
	s.src = image.Rect(left, top, left+cw, top+ch)
	if s.needV {
		s.vc = s.cache.get(coeffKey{sh, th, top, ch, bh})
		s.src.Min.Y, s.src.Max.Y = s.vc.lo, s.vc.hi
	}
	if s.needH {
		s.hc = s.cache.get(coeffKey{sw, tw, left, cw, bw})
		s.src.Min.X, s.src.Max.X = s.hc.lo, s.hc.hi
	}
	return s.src
}

// run executes the plan on src, which must hold at least the planned
// source rectangle, and returns the window as RGB rows of 3*cw bytes.
func (s *resizeScratch) run(src rgbImage) []byte {
	rw := 3 * s.cw
	s.out = growBytes(s.out, rw*s.ch)
	out := s.out
	if !s.needV {
		// One pass (or none): source rows top.. are the output rows.
		for y := 0; y < s.ch; y++ {
			s.hpass(out[rw*y:rw*(y+1)], src, s.top+y)
		}
		return out
	}
	// Horizontal pass over the rows the vertical pass reads, kept columns
	// only; without one, the vertical pass reads the source rows.
	first, nrows := s.src.Min.Y, s.src.Dy()
	if cap(s.rows) < nrows {
		s.rows = make([][]byte, nrows)
	}
	rows := s.rows[:nrows]
	if s.needH {
		s.tmp = growBytes(s.tmp, rw*nrows)
		for r := range rows {
			rows[r] = s.tmp[rw*r : rw*(r+1)]
			s.hpass(rows[r], src, first+r)
		}
	} else {
		for r := range rows {
			row := src.row(first + r)
			off := 3 * (s.left - src.x0)
			rows[r] = row[off : off+rw]
		}
	}
	vc := s.vc
	for yy := 0; yy < s.ch; yy++ {
		st := int(vc.start[yy])
		s.vrow(out[rw*yy:rw*(yy+1)], rows[st:st+vc.taps], vc.k[yy*vc.taps:(yy+1)*vc.taps])
	}
	return out
}

// hpass writes the kept columns of output row y (source row y) into d,
// resampled horizontally, or copied when the width is unchanged.
func (s *resizeScratch) hpass(d []byte, src rgbImage, y int) {
	row := src.row(y)
	if !s.needH {
		off := 3 * (s.left - src.x0)
		copy(d, row[off:off+len(d)])
		return
	}
	hc := s.hc
	row = row[3*(hc.lo-src.x0):]
	switch hc.taps {
	case 2:
		hrow2(d, row, hc.start, hc.k)
	case 3:
		hrow3(d, row, hc.start, hc.k)
	case 4:
		hrow4(d, row, hc.start, hc.k)
	case 5:
		hrow5(d, row, hc.start, hc.k)
	case 6:
		hrow6(d, row, hc.start, hc.k)
	case 7:
		hrow7(d, row, hc.start, hc.k)
	case 8:
		hrow8(d, row, hc.start, hc.k)
	default:
		hrowN(d, row, hc.start, hc.k, hc.taps)
	}
}

// vrow writes one output row from the taps rows of the horizontal pass.
func (s *resizeScratch) vrow(d []byte, rows [][]byte, k []int32) {
	switch len(k) {
	case 2:
		vrow2(d, rows[0], rows[1], k[0], k[1])
	case 3:
		vrow3(d, rows[0], rows[1], rows[2], k[0], k[1], k[2])
	case 4:
		vrow4(d, rows[0], rows[1], rows[2], rows[3], k[0], k[1], k[2], k[3])
	case 5:
		vrow5(d, rows[0], rows[1], rows[2], rows[3], rows[4], k[0], k[1], k[2], k[3], k[4])
	case 6:
		vrow6(d, rows[0], rows[1], rows[2], rows[3], rows[4], rows[5], k[0], k[1], k[2], k[3], k[4], k[5])
	case 7:
		vrow7(d, rows[0], rows[1], rows[2], rows[3], rows[4], rows[5], rows[6], k[0], k[1], k[2], k[3], k[4], k[5], k[6])
	case 8:
		vrow8(d, rows[0], rows[1], rows[2], rows[3], rows[4], rows[5], rows[6], rows[7],
			k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7])
	default:
		s.acc = growInt32(s.acc, len(d))
		vrowN(d, rows, k, s.acc)
	}
}

// The horizontal kernels: output pixel i of d is the taps of k[i*T:] over
// the T source pixels from row[3*start[i]:].

func hrow2(d, row []byte, start, k []int32) {
	for i, st := range start {
		p := row[3*int(st) : 3*int(st)+6 : 3*int(st)+6]
		kk := k[2*i : 2*i+2 : 2*i+2]
		o := d[3*i : 3*i+3 : 3*i+3]
		k0, k1 := kk[0], kk[1]
		o[0] = clip8(half + int32(p[0])*k0 + int32(p[3])*k1)
		o[1] = clip8(half + int32(p[1])*k0 + int32(p[4])*k1)
		o[2] = clip8(half + int32(p[2])*k0 + int32(p[5])*k1)
	}
}
func hrow3(d, row []byte, start, k []int32) {
	for i, st := range start {
		p := row[3*int(st) : 3*int(st)+9 : 3*int(st)+9]
		kk := k[3*i : 3*i+3 : 3*i+3]
		o := d[3*i : 3*i+3 : 3*i+3]
		k0, k1, k2 := kk[0], kk[1], kk[2]
		o[0] = clip8(half + int32(p[0])*k0 + int32(p[3])*k1 + int32(p[6])*k2)
		o[1] = clip8(half + int32(p[1])*k0 + int32(p[4])*k1 + int32(p[7])*k2)
		o[2] = clip8(half + int32(p[2])*k0 + int32(p[5])*k1 + int32(p[8])*k2)
	}
}
func hrow4(d, row []byte, start, k []int32) {
	for i, st := range start {
		p := row[3*int(st) : 3*int(st)+12 : 3*int(st)+12]
		kk := k[4*i : 4*i+4 : 4*i+4]
		o := d[3*i : 3*i+3 : 3*i+3]
		k0, k1, k2, k3 := kk[0], kk[1], kk[2], kk[3]
		o[0] = clip8(half + int32(p[0])*k0 + int32(p[3])*k1 + int32(p[6])*k2 + int32(p[9])*k3)
		o[1] = clip8(half + int32(p[1])*k0 + int32(p[4])*k1 + int32(p[7])*k2 + int32(p[10])*k3)
		o[2] = clip8(half + int32(p[2])*k0 + int32(p[5])*k1 + int32(p[8])*k2 + int32(p[11])*k3)
	}
}
func hrow5(d, row []byte, start, k []int32) {
	for i, st := range start {
		p := row[3*int(st) : 3*int(st)+15 : 3*int(st)+15]
		kk := k[5*i : 5*i+5 : 5*i+5]
		o := d[3*i : 3*i+3 : 3*i+3]
		k0, k1, k2, k3, k4 := kk[0], kk[1], kk[2], kk[3], kk[4]
		o[0] = clip8(half + int32(p[0])*k0 + int32(p[3])*k1 + int32(p[6])*k2 + int32(p[9])*k3 + int32(p[12])*k4)
		o[1] = clip8(half + int32(p[1])*k0 + int32(p[4])*k1 + int32(p[7])*k2 + int32(p[10])*k3 + int32(p[13])*k4)
		o[2] = clip8(half + int32(p[2])*k0 + int32(p[5])*k1 + int32(p[8])*k2 + int32(p[11])*k3 + int32(p[14])*k4)
	}
}
func hrow6(d, row []byte, start, k []int32) {
	for i, st := range start {
		p := row[3*int(st) : 3*int(st)+18 : 3*int(st)+18]
		kk := k[6*i : 6*i+6 : 6*i+6]
		o := d[3*i : 3*i+3 : 3*i+3]
		k0, k1, k2, k3, k4, k5 := kk[0], kk[1], kk[2], kk[3], kk[4], kk[5]
		o[0] = clip8(half + int32(p[0])*k0 + int32(p[3])*k1 + int32(p[6])*k2 + int32(p[9])*k3 + int32(p[12])*k4 + int32(p[15])*k5)
		o[1] = clip8(half + int32(p[1])*k0 + int32(p[4])*k1 + int32(p[7])*k2 + int32(p[10])*k3 + int32(p[13])*k4 + int32(p[16])*k5)
		o[2] = clip8(half + int32(p[2])*k0 + int32(p[5])*k1 + int32(p[8])*k2 + int32(p[11])*k3 + int32(p[14])*k4 + int32(p[17])*k5)
	}
}
func hrow7(d, row []byte, start, k []int32) {
	for i, st := range start {
		p := row[3*int(st) : 3*int(st)+21 : 3*int(st)+21]
		kk := k[7*i : 7*i+7 : 7*i+7]
		o := d[3*i : 3*i+3 : 3*i+3]
		k0, k1, k2, k3, k4, k5, k6 := kk[0], kk[1], kk[2], kk[3], kk[4], kk[5], kk[6]
		o[0] = clip8(half + int32(p[0])*k0 + int32(p[3])*k1 + int32(p[6])*k2 + int32(p[9])*k3 + int32(p[12])*k4 + int32(p[15])*k5 + int32(p[18])*k6)
		o[1] = clip8(half + int32(p[1])*k0 + int32(p[4])*k1 + int32(p[7])*k2 + int32(p[10])*k3 + int32(p[13])*k4 + int32(p[16])*k5 + int32(p[19])*k6)
		o[2] = clip8(half + int32(p[2])*k0 + int32(p[5])*k1 + int32(p[8])*k2 + int32(p[11])*k3 + int32(p[14])*k4 + int32(p[17])*k5 + int32(p[20])*k6)
	}
}
func hrow8(d, row []byte, start, k []int32) {
	for i, st := range start {
		p := row[3*int(st) : 3*int(st)+24 : 3*int(st)+24]
		kk := k[8*i : 8*i+8 : 8*i+8]
		o := d[3*i : 3*i+3 : 3*i+3]
		k0, k1, k2, k3, k4, k5, k6, k7 := kk[0], kk[1], kk[2], kk[3], kk[4], kk[5], kk[6], kk[7]
		o[0] = clip8(half + int32(p[0])*k0 + int32(p[3])*k1 + int32(p[6])*k2 + int32(p[9])*k3 + int32(p[12])*k4 + int32(p[15])*k5 + int32(p[18])*k6 + int32(p[21])*k7)
		o[1] = clip8(half + int32(p[1])*k0 + int32(p[4])*k1 + int32(p[7])*k2 + int32(p[10])*k3 + int32(p[13])*k4 + int32(p[16])*k5 + int32(p[19])*k6 + int32(p[22])*k7)
		o[2] = clip8(half + int32(p[2])*k0 + int32(p[5])*k1 + int32(p[8])*k2 + int32(p[11])*k3 + int32(p[14])*k4 + int32(p[17])*k5 + int32(p[20])*k6 + int32(p[23])*k7)
	}
}
func hrowN(d, row []byte, start, k []int32, taps int) {
	for i, st := range start {
		p := row[3*int(st) : 3*(int(st)+taps)]
		kk := k[taps*i : taps*(i+1)]
		var s0, s1, s2 int32 = half, half, half
		for len(kk) >= 4 && len(p) >= 12 {
			k0, k1, k2, k3 := kk[0], kk[1], kk[2], kk[3]
			s0 += int32(p[0])*k0 + int32(p[3])*k1 + int32(p[6])*k2 + int32(p[9])*k3
			s1 += int32(p[1])*k0 + int32(p[4])*k1 + int32(p[7])*k2 + int32(p[10])*k3
			s2 += int32(p[2])*k0 + int32(p[5])*k1 + int32(p[8])*k2 + int32(p[11])*k3
			p, kk = p[12:], kk[4:]
		}
		for len(kk) >= 1 && len(p) >= 3 {
			kv := kk[0]
			s0 += int32(p[0]) * kv
			s1 += int32(p[1]) * kv
			s2 += int32(p[2]) * kv
			p, kk = p[3:], kk[1:]
		}
		o := d[3*i : 3*i+3 : 3*i+3]
		o[0], o[1], o[2] = clip8(s0), clip8(s1), clip8(s2)
	}
}

// The vertical kernels: byte i of d is the taps k over byte i of the rows.

func vrow2(d, r0, r1 []byte, k0, k1 int32) {
	r0, r1 = r0[:len(d)], r1[:len(d)]
	for i := range d {
		d[i] = clip8(half + int32(r0[i])*k0 + int32(r1[i])*k1)
	}
}
func vrow3(d, r0, r1, r2 []byte, k0, k1, k2 int32) {
	r0, r1, r2 = r0[:len(d)], r1[:len(d)], r2[:len(d)]
	for i := range d {
		d[i] = clip8(half + int32(r0[i])*k0 + int32(r1[i])*k1 + int32(r2[i])*k2)
	}
}
func vrow4(d, r0, r1, r2, r3 []byte, k0, k1, k2, k3 int32) {
	r0, r1, r2, r3 = r0[:len(d)], r1[:len(d)], r2[:len(d)], r3[:len(d)]
	for i := range d {
		d[i] = clip8(half + int32(r0[i])*k0 + int32(r1[i])*k1 + int32(r2[i])*k2 + int32(r3[i])*k3)
	}
}
func vrow5(d, r0, r1, r2, r3, r4 []byte, k0, k1, k2, k3, k4 int32) {
	r0, r1, r2, r3, r4 = r0[:len(d)], r1[:len(d)], r2[:len(d)], r3[:len(d)], r4[:len(d)]
	for i := range d {
		d[i] = clip8(half + int32(r0[i])*k0 + int32(r1[i])*k1 + int32(r2[i])*k2 + int32(r3[i])*k3 + int32(r4[i])*k4)
	}
}
func vrow6(d, r0, r1, r2, r3, r4, r5 []byte, k0, k1, k2, k3, k4, k5 int32) {
	r0, r1, r2, r3, r4, r5 = r0[:len(d)], r1[:len(d)], r2[:len(d)], r3[:len(d)], r4[:len(d)], r5[:len(d)]
	for i := range d {
		d[i] = clip8(half + int32(r0[i])*k0 + int32(r1[i])*k1 + int32(r2[i])*k2 + int32(r3[i])*k3 + int32(r4[i])*k4 + int32(r5[i])*k5)
	}
}
func vrow7(d, r0, r1, r2, r3, r4, r5, r6 []byte, k0, k1, k2, k3, k4, k5, k6 int32) {
	r0, r1, r2, r3, r4, r5, r6 = r0[:len(d)], r1[:len(d)], r2[:len(d)], r3[:len(d)], r4[:len(d)], r5[:len(d)], r6[:len(d)]
	for i := range d {
		d[i] = clip8(half + int32(r0[i])*k0 + int32(r1[i])*k1 + int32(r2[i])*k2 + int32(r3[i])*k3 + int32(r4[i])*k4 + int32(r5[i])*k5 + int32(r6[i])*k6)
	}
}
func vrow8(d, r0, r1, r2, r3, r4, r5, r6, r7 []byte, k0, k1, k2, k3, k4, k5, k6, k7 int32) {
	r0, r1, r2, r3, r4, r5, r6, r7 = r0[:len(d)], r1[:len(d)], r2[:len(d)], r3[:len(d)], r4[:len(d)], r5[:len(d)], r6[:len(d)], r7[:len(d)]
	for i := range d {
		d[i] = clip8(half + int32(r0[i])*k0 + int32(r1[i])*k1 + int32(r2[i])*k2 + int32(r3[i])*k3 + int32(r4[i])*k4 + int32(r5[i])*k5 + int32(r6[i])*k6 + int32(r7[i])*k7)
	}
}
func vrowN(d []byte, rows [][]byte, k []int32, acc []int32) {
	acc = acc[:len(d)]
	for i := range acc {
		acc[i] = half
	}
	for len(k) >= 4 && len(rows) >= 4 {
		r0, r1, r2, r3 := rows[0][:len(acc)], rows[1][:len(acc)], rows[2][:len(acc)], rows[3][:len(acc)]
		k0, k1, k2, k3 := k[0], k[1], k[2], k[3]
		for i := range acc {
			acc[i] += int32(r0[i])*k0 + int32(r1[i])*k1 + int32(r2[i])*k2 + int32(r3[i])*k3
		}
		rows, k = rows[4:], k[4:]
	}
	for len(k) >= 1 && len(rows) >= 1 {
		r, kv := rows[0][:len(acc)], k[0]
		for i := range acc {
			acc[i] += int32(r[i]) * kv
		}
		rows, k = rows[1:], k[1:]
	}
	d = d[:len(acc)]
	for i, v := range acc {
		d[i] = clip8(v)
	}
}

func growInt32(b []int32, n int) []int32 {
	if cap(b) < n {
		return make([]int32, n)
	}
	return b[:n]
}

func growBytes(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}
