package api

// This file writes and reads NumPy .npy files (format 1.0; 2.0 and 3.0 are
// also read). The header is byte-for-byte what numpy 1.24's np.save writes,
// including the spare "growth axis" spaces, so NPYSize is exact and cheap.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unsafe"
)

// npyMagic starts every .npy file.
const npyMagic = "\x93NUMPY"

// npyAlign is the alignment numpy pads the header to (ARRAY_ALIGN).
const npyAlign = 64

// npyGrowthDigits is numpy's GROWTH_AXIS_MAX_DIGITS: spare spaces kept in the
// header so the first axis can grow in place.
const npyGrowthDigits = 21

// ErrBadNPY is matched (errors.Is) by every DecodeNPY error.
var ErrBadNPY = errors.New("bad npy")

// npyDescr returns the numpy dtype descriptor of dt.
func npyDescr(dt DType) string {
	if dt == Float16 {
		return "<f2"
	}
	return "<f4"
}

// npyShapeRepr formats shape as Python's repr of a tuple: (), (5,), (1, 2).
func npyShapeRepr(shape []int64) string {
	switch len(shape) {
	case 0:
		return "()"
	case 1:
		return "(" + strconv.FormatInt(shape[0], 10) + ",)"
	}
	var sb strings.Builder
	sb.WriteByte('(')
	for i, d := range shape {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString(strconv.FormatInt(d, 10))
	}
	sb.WriteByte(')')
	return sb.String()
}

// NPYHeader returns the .npy header (magic, version 1.0, length and the
// space-padded dict ending in '\n') for a C-order array of the given shape
// and dtype, exactly as numpy's np.save writes it. Its length is a multiple
// of 64.
func NPYHeader(shape []int64, dt DType) []byte { return NPYHeaderOf(npyDescr(dt), shape) }

// NPYHeaderOf is NPYHeader for any numpy dtype descriptor, such as "<i8"
// (int64: the labels of an array view, fs/views).
func NPYHeaderOf(descr string, shape []int64) []byte {
	dict := "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + npyShapeRepr(shape) + ", }"
	if len(shape) > 0 {
		if n := npyGrowthDigits - len(strconv.FormatInt(shape[0], 10)); n > 0 {
			dict += strings.Repeat(" ", n)
		}
	}
	hlen := len(dict) + 1 // + '\n'
	pad := npyAlign - (len(npyMagic)+2+2+hlen)%npyAlign
	total := len(npyMagic) + 2 + 2 + hlen + pad
	b := make([]byte, 0, total)
	b = append(b, npyMagic...)
	b = append(b, 1, 0)
	b = binary.LittleEndian.AppendUint16(b, uint16(hlen+pad))
	b = append(b, dict...)
	for i := 0; i < pad; i++ {
		b = append(b, ' ')
	}
	b = append(b, '\n')
	return b
}

// NPYSize returns the size in bytes of the .npy file EncodeNPY writes for
// shape and dt, without building it.
func NPYSize(shape []int64, dt DType) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	return int64(len(NPYHeader(shape, dt))) + n*dt.Size()
}

// EncodeNPY returns a whole .npy file holding data (C order) with the given
// shape, stored as little-endian float32 or float16 (rounded to nearest
// even). len(data) must equal the product of shape; missing elements are
// written as zeros and extra ones are ignored.
func EncodeNPY(shape []int64, data []float32, dt DType) []byte {
	hdr := NPYHeader(shape, dt)
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	out := make([]byte, int64(len(hdr))+n*dt.Size())
	copy(out, hdr)
	body := out[len(hdr):]
	m := int(n)
	if len(data) < m {
		m = len(data)
	}
	if dt == Float16 {
		for i := 0; i < m; i++ {
			binary.LittleEndian.PutUint16(body[2*i:], Float32ToFloat16(data[i]))
		}
	} else if nativeLittleEndian && m > 0 {
		// The float32 body is the values' own bytes: one copy.
		copy(body, unsafe.Slice((*byte)(unsafe.Pointer(&data[0])), 4*m))
	} else {
		for i := 0; i < m; i++ {
			binary.LittleEndian.PutUint32(body[4*i:], math.Float32bits(data[i]))
		}
	}
	return out
}

// nativeLittleEndian is whether this machine stores numbers as .npy's
// '<f4' does (amd64, arm64).
var nativeLittleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// Float32ToFloat16 converts f to IEEE 754 binary16 bits, rounding to nearest
// even as numpy's astype(np.float16) does: overflow gives ±inf, NaN stays NaN
// (payload truncated to its top 10 bits), tiny values become subnormals or ±0.
func Float32ToFloat16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	man := b & 0x7fffff
	switch {
	case exp == 0xff: // inf or nan
		if man == 0 {
			return sign | 0x7c00
		}
		m := uint16(man >> 13) // numpy keeps the top payload bits...
		if m == 0 {
			m = 1 // ...but makes sure it stays a NaN
		}
		return sign | 0x7c00 | m
	case exp > 142: // >= 2^16: overflow
		return sign | 0x7c00
	case exp >= 113: // normal half: unbiased exponent >= -14
		h := uint32(exp-112)<<10 | man>>13
		rem := man & 0x1fff
		if rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
			h++ // may carry into the exponent, up to inf: correct
		}
		return sign | uint16(h)
	case exp >= 102: // subnormal half (or rounds up to the smallest normal)
		m := man | 0x800000 // implicit bit
		shift := uint32(126 - exp)
		h := m >> shift
		rem := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && h&1 == 1) {
			h++
		}
		return sign | uint16(h)
	default: // below half the smallest subnormal: ±0
		return sign
	}
}

// Float16ToFloat32 converts IEEE 754 binary16 bits to float32 (exact).
func Float16ToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
	case man == 0:
		return math.Float32frombits(sign)
	}
	// subnormal: normalize
	e := uint32(113)
	for man&0x400 == 0 {
		man <<= 1
		e--
	}
	return math.Float32frombits(sign | e<<23 | (man&0x3ff)<<13)
}

// npyMaxElements bounds what DecodeNPY will allocate (4 GiB of float32).
const npyMaxElements = 1 << 30

// DecodeNPY parses a .npy file of little-endian float32 ('<f4') or float16
// ('<f2') in C order, versions 1.0 to 3.0, and returns its shape, dtype and
// values widened to float32. Any other content is an error matching
// ErrBadNPY.
func DecodeNPY(b []byte) (shape []int64, dt DType, data []float32, err error) {
	shape, dt, body, err := ParseNPY(b)
	if err != nil {
		return nil, "", nil, err
	}
	data = make([]float32, int64(len(body))/dt.Size())
	DecodeNPYBody(body, dt, data)
	return shape, dt, data, nil
}

// ParseNPY checks what DecodeNPY checks and returns the shape, the dtype
// and the data bytes (exactly the shape's elements of dt), without
// decoding them.
func ParseNPY(b []byte) (shape []int64, dt DType, body []byte, err error) {
	if len(b) < 10 || string(b[:6]) != npyMagic {
		return nil, "", nil, fmt.Errorf("%w: missing magic", ErrBadNPY)
	}
	major := b[6]
	var hlen, off int
	switch major {
	case 1:
		hlen, off = int(binary.LittleEndian.Uint16(b[8:])), 10
	case 2, 3:
		if len(b) < 12 {
			return nil, "", nil, fmt.Errorf("%w: truncated header length", ErrBadNPY)
		}
		l := binary.LittleEndian.Uint32(b[8:])
		if int64(l) > int64(len(b)) {
			return nil, "", nil, fmt.Errorf("%w: header length %d beyond end of file", ErrBadNPY, l)
		}
		hlen, off = int(l), 12
	default:
		return nil, "", nil, fmt.Errorf("%w: unsupported version %d.%d", ErrBadNPY, b[6], b[7])
	}
	if off+hlen > len(b) {
		return nil, "", nil, fmt.Errorf("%w: header length %d beyond end of file", ErrBadNPY, hlen)
	}
	d, err := parseNPYDict(string(b[off : off+hlen]))
	if err != nil {
		return nil, "", nil, fmt.Errorf("%w: %w", ErrBadNPY, err)
	}
	if d.fortran {
		return nil, "", nil, fmt.Errorf("%w: fortran_order arrays are not supported", ErrBadNPY)
	}
	switch d.descr {
	case "<f4":
		dt = Float32
	case "<f2":
		dt = Float16
	default:
		return nil, "", nil, fmt.Errorf("%w: unsupported dtype %q (want '<f4' or '<f2')", ErrBadNPY, d.descr)
	}
	n := int64(1)
	for _, s := range d.shape {
		if s < 0 {
			return nil, "", nil, fmt.Errorf("%w: negative dimension in shape", ErrBadNPY)
		}
		if s == 0 {
			n = 0 // an empty array, whatever its other dimensions
		}
	}
	for _, s := range d.shape {
		if n == 0 {
			break
		}
		if n > npyMaxElements/s {
			return nil, "", nil, fmt.Errorf("%w: shape too large", ErrBadNPY)
		}
		n *= s
	}
	body = b[off+hlen:]
	if int64(len(body)) != n*dt.Size() {
		return nil, "", nil, fmt.Errorf("%w: data is %d bytes, shape %v of %s needs %d",
			ErrBadNPY, len(body), d.shape, dt, n*dt.Size())
	}
	return d.shape, dt, body, nil
}

// DecodeNPYBody widens body, len(data) elements of dt as ParseNPY returns
// them, into data.
func DecodeNPYBody(body []byte, dt DType, data []float32) {
	if dt == Float16 {
		for i := range data {
			data[i] = Float16ToFloat32(binary.LittleEndian.Uint16(body[2*i:]))
		}
		return
	}
	for i := range data {
		data[i] = math.Float32frombits(binary.LittleEndian.Uint32(body[4*i:]))
	}
}

// ParseNPYDict parses the dict literal of a .npy header (what follows the
// magic, the version and the header length) and returns its dtype
// descriptor ('<f4', '|u1', ...), whether the array is in Fortran order,
// and its shape. Unlike ParseNPY it accepts any descriptor.
func ParseNPYDict(s string) (descr string, fortran bool, shape []int64, err error) {
	d, err := parseNPYDict(s)
	return d.descr, d.fortran, d.shape, err
}

// npyDict is the parsed header dictionary.
type npyDict struct {
	descr   string
	fortran bool
	shape   []int64
}

// parseNPYDict parses the Python dict literal of a .npy header: exactly the
// keys 'descr' (a string), 'fortran_order' (True/False) and 'shape' (a tuple
// of non-negative ints), in any order, optional trailing comma, whitespace.
func parseNPYDict(s string) (npyDict, error) {
	var d npyDict
	p := &npyParser{s: s}
	if !p.eat('{') {
		return d, errors.New("header is not a dict")
	}
	seen := map[string]bool{}
	for {
		if p.eat('}') {
			break
		}
		key, err := p.str()
		if err != nil {
			return d, fmt.Errorf("header key: %w", err)
		}
		if seen[key] {
			return d, fmt.Errorf("duplicate header key %q", key)
		}
		seen[key] = true
		if !p.eat(':') {
			return d, fmt.Errorf("header: missing ':' after %q", key)
		}
		switch key {
		case "descr":
			if d.descr, err = p.str(); err != nil {
				return d, fmt.Errorf("descr: %w", err)
			}
		case "fortran_order":
			p.space()
			switch {
			case strings.HasPrefix(p.s[p.i:], "True"):
				d.fortran, p.i = true, p.i+4
			case strings.HasPrefix(p.s[p.i:], "False"):
				d.fortran, p.i = false, p.i+5
			default:
				return d, errors.New("fortran_order is not True or False")
			}
		case "shape":
			if d.shape, err = p.tuple(); err != nil {
				return d, fmt.Errorf("shape: %w", err)
			}
		default:
			return d, fmt.Errorf("unexpected header key %q", key)
		}
		if p.eat('}') {
			break
		}
		if !p.eat(',') {
			return d, errors.New("header: missing ',' between items")
		}
	}
	if len(seen) != 3 {
		return d, errors.New("header must have exactly the keys descr, fortran_order, shape")
	}
	p.space()
	if p.i != len(p.s) {
		return d, errors.New("trailing bytes after header dict")
	}
	return d, nil
}

// npyParser is a cursor over a header string.
type npyParser struct {
	s string
	i int
}

func (p *npyParser) space() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\n' || p.s[p.i] == '\t' || p.s[p.i] == '\r') {
		p.i++
	}
}

func (p *npyParser) eat(c byte) bool {
	p.space()
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *npyParser) str() (string, error) {
	p.space()
	if p.i >= len(p.s) || (p.s[p.i] != '\'' && p.s[p.i] != '"') {
		return "", errors.New("expected a quoted string")
	}
	q := p.s[p.i]
	j := strings.IndexByte(p.s[p.i+1:], q)
	if j < 0 {
		return "", errors.New("unterminated string")
	}
	v := p.s[p.i+1 : p.i+1+j]
	p.i += j + 2
	return v, nil
}

func (p *npyParser) tuple() ([]int64, error) {
	if !p.eat('(') {
		return nil, errors.New("expected a tuple")
	}
	shape := []int64{}
	for {
		if p.eat(')') {
			return shape, nil
		}
		p.space()
		j := p.i
		for j < len(p.s) && p.s[j] >= '0' && p.s[j] <= '9' {
			j++
		}
		if j == p.i || j-p.i > 18 {
			return nil, errors.New("expected a dimension")
		}
		v, err := strconv.ParseInt(p.s[p.i:j], 10, 64)
		if err != nil {
			return nil, err
		}
		shape = append(shape, v)
		p.i = j
		if p.eat(')') {
			if len(shape) == 1 {
				return nil, errors.New("a 1-tuple needs a trailing comma")
			}
			return shape, nil
		}
		if !p.eat(',') {
			return nil, errors.New("missing ',' in tuple")
		}
	}
}
