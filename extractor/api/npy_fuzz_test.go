package api

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"
)

// FuzzEncodeNPY round-trips arbitrary shapes and values through EncodeNPY
// and DecodeNPY: the file is NPYSize bytes, starts with NPYHeader, its
// header is 64-byte aligned, and decoding gives back the shape, the dtype
// and the values (bit for bit in float32; rounded once to float16 in
// float16, and then stable under a second round trip).
func FuzzEncodeNPY(f *testing.F) {
	f.Add([]byte{2, 3}, []byte{0, 0, 128, 63, 0, 0, 0, 64}, false)
	f.Add([]byte{}, []byte{0, 0, 192, 127}, true) // a 0-d NaN
	f.Add([]byte{0, 7}, []byte{}, false)
	f.Add([]byte{255, 1, 1}, bytes.Repeat([]byte{1, 2, 3, 4}, 300), true)
	f.Fuzz(func(t *testing.T, dims []byte, raw []byte, half bool) {
		if len(dims) > 6 {
			dims = dims[:6]
		}
		shape := make([]int64, len(dims))
		n := int64(1)
		for i, d := range dims {
			shape[i] = int64(d)
			n *= int64(d)
		}
		if n > 1<<16 {
			return
		}
		dt := Float32
		if half {
			dt = Float16
		}
		data := make([]float32, len(raw)/4)
		for i := range data {
			data[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		b := EncodeNPY(shape, data, dt)
		if int64(len(b)) != NPYSize(shape, dt) {
			t.Fatalf("shape %v %s: %d bytes, NPYSize says %d", shape, dt, len(b), NPYSize(shape, dt))
		}
		hdr := NPYHeader(shape, dt)
		if len(hdr)%64 != 0 || !bytes.HasPrefix(b, hdr) {
			t.Fatalf("shape %v: header of %d bytes, not 64-aligned or not the file's prefix", shape, len(hdr))
		}
		gotShape, gotDT, got, err := DecodeNPY(b)
		if err != nil {
			t.Fatalf("shape %v %s: DecodeNPY of EncodeNPY's output: %v", shape, dt, err)
		}
		if gotDT != dt || len(gotShape) != len(shape) || int64(len(got)) != n {
			t.Fatalf("round trip: shape %v %s -> %v %s with %d values", shape, dt, gotShape, gotDT, len(got))
		}
		for i := range shape {
			if gotShape[i] != shape[i] {
				t.Fatalf("round trip: shape %v -> %v", shape, gotShape)
			}
		}
		for i := range got {
			var want float32 // missing values are written as zeros
			if i < len(data) {
				want = data[i]
			}
			if dt == Float16 {
				want = Float16ToFloat32(Float32ToFloat16(want))
			}
			if !sameFloat(got[i], want) {
				t.Fatalf("%s element %d: wrote %v (bits %#x), read %v (bits %#x)", dt, i, want, math.Float32bits(want), got[i], math.Float32bits(got[i]))
			}
		}
		if dt == Float16 && !bytes.Equal(EncodeNPY(shape, got, dt), b) {
			t.Fatal("float16 round trip is not stable: re-encoding the decoded values changes the file")
		}
	})
}

// sameFloat compares floats bit for bit, except that any NaN equals any NaN
// with the same sign and quiet bit.
func sameFloat(a, b float32) bool {
	if math.IsNaN(float64(a)) && math.IsNaN(float64(b)) {
		return math.Float32bits(a)&0xffc00000 == math.Float32bits(b)&0xffc00000
	}
	return math.Float32bits(a) == math.Float32bits(b)
}
