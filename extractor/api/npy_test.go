package api

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/featurefs/featurefs/test/testenv"
)

// npyCases are the shapes the tests write: feature maps, vectors, a scalar,
// an empty array and a first axis wider than numpy's growth padding.
var npyCases = [][]int64{
	{1024, 14, 14}, {2048}, {64, 112, 112}, {3, 1, 5}, {}, {0, 4}, {7}, {1, 1000},
}

// npyValues returns n values covering normal, subnormal, huge, signed-zero
// and non-finite float32s.
func npyValues(n int, seed uint64) []float32 {
	special := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 65504, 65520, 1e9, -1e9, 6.1e-5, 5.96e-8, 2.98e-8,
		2.99e-8, 1e-10, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 0.1, 1.0009765625, 1.00048828125,
		1.000732421875, 3.14159, -2.5e-6}
	r := rand.New(rand.NewPCG(seed, 7))
	v := make([]float32, n)
	for i := range v {
		switch {
		case i < len(special):
			v[i] = special[i]
		case i%3 == 0:
			v[i] = float32(r.NormFloat64())
		case i%3 == 1:
			v[i] = float32(r.NormFloat64() * math.Pow(2, float64(r.IntN(60)-40)))
		default:
			v[i] = math.Float32frombits(r.Uint32())
		}
	}
	return v
}

func elems(shape []int64) int {
	n := 1
	for _, d := range shape {
		n *= int(d)
	}
	return n
}

func TestNPYHeaderLayout(t *testing.T) {
	for _, shape := range npyCases {
		for _, dt := range []DType{Float32, Float16} {
			h := NPYHeader(shape, dt)
			if len(h)%64 != 0 || h[len(h)-1] != '\n' || !bytes.HasPrefix(h, []byte("\x93NUMPY\x01\x00")) {
				t.Errorf("%v %s: header %q", shape, dt, h)
			}
			want := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': %s, }", npyDescr(dt), npyShapeRepr(shape))
			if !strings.HasPrefix(string(h[10:]), want) {
				t.Errorf("%v %s: header %q, want prefix %q", shape, dt, h[10:], want)
			}
			enc := EncodeNPY(shape, npyValues(elems(shape), 1), dt)
			if int64(len(enc)) != NPYSize(shape, dt) {
				t.Errorf("%v %s: NPYSize %d != len(EncodeNPY) %d", shape, dt, NPYSize(shape, dt), len(enc))
			}
		}
	}
	if got := npyShapeRepr([]int64{2048}); got != "(2048,)" {
		t.Errorf("1-D shape repr %q", got)
	}
}

// TestNPYMatchesNumpy checks, with numpy itself, that np.load reads what
// EncodeNPY writes exactly (values and float16 rounding), that our bytes are
// identical to np.save's, and that DecodeNPY reads np.save's files.
func TestNPYMatchesNumpy(t *testing.T) {
	py := testenv.RequireTorch(t)
	dir := t.TempDir()
	var names []string
	for i, shape := range npyCases {
		vals := npyValues(elems(shape), uint64(i))
		raw := EncodeNPY(shape, vals, Float32)
		for _, dt := range []DType{Float32, Float16} {
			name := fmt.Sprintf("c%d_%s", i, dt)
			names = append(names, name)
			if err := os.WriteFile(filepath.Join(dir, name+".go.npy"), EncodeNPY(shape, vals, dt), 0o644); err != nil {
				t.Fatal(err)
			}
			// numpy converts the float32 source itself, for comparison.
			if err := os.WriteFile(filepath.Join(dir, name+".src.npy"), raw, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	prog := `
import sys, os, numpy as np
d = sys.argv[1]
for name in sys.argv[2:]:
    dt = np.float16 if name.endswith("float16") else np.float32
    src = np.load(os.path.join(d, name + ".src.npy"))
    want = src.astype(dt)
    got = np.load(os.path.join(d, name + ".go.npy"))
    assert got.dtype == dt and got.shape == want.shape, (name, got.dtype, got.shape, want.shape)
    assert got.flags.c_contiguous
    assert np.array_equal(got.view(np.uint16 if dt == np.float16 else np.uint32),
                          want.view(np.uint16 if dt == np.float16 else np.uint32)), name
    np.save(os.path.join(d, name + ".np.npy"), want)
    with open(os.path.join(d, name + ".np.npy"), "rb") as f:
        assert f.read() == open(os.path.join(d, name + ".go.npy"), "rb").read(), name + ": bytes differ from np.save"
print("ok", len(sys.argv) - 2)
`
	out, err := exec.Command(py, append([]string{"-c", prog, dir}, names...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("numpy check failed: %v\n%s", err, out)
	}
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join(dir, name+".np.npy"))
		if err != nil {
			t.Fatal(err)
		}
		shape, dt, data, err := DecodeNPY(b)
		if err != nil {
			t.Fatalf("%s: DecodeNPY(np.save output): %v", name, err)
		}
		if !bytes.Equal(EncodeNPY(shape, data, dt), b) {
			t.Errorf("%s: decode/encode round trip of np.save's file differs", name)
		}
	}
}

func TestFloat16Conversion(t *testing.T) {
	// Every half value converts to float32 and back unchanged.
	for h := 0; h < 1<<16; h++ {
		f := Float16ToFloat32(uint16(h))
		back := Float32ToFloat16(f)
		if f != f { // NaN: stays NaN
			if back&0x7c00 != 0x7c00 || back&0x3ff == 0 {
				t.Fatalf("NaN %#04x -> %#04x", h, back)
			}
			continue
		}
		if back != uint16(h) {
			t.Fatalf("%#04x -> %g -> %#04x", h, f, back)
		}
	}
	// Ties round to even; beyond the largest half is inf.
	for _, c := range []struct {
		f    float32
		want uint16
	}{
		{1.00048828125, 0x3c00}, {1.000732421875, 0x3c01}, {1.00146484375, 0x3c02},
		{65504, 0x7bff}, {65519, 0x7bff}, {65520, 0x7c00}, {2.98023223876953125e-8, 0}, {2.99e-8, 1},
		{float32(math.Inf(-1)), 0xfc00},
	} {
		if got := Float32ToFloat16(c.f); got != c.want {
			t.Errorf("Float32ToFloat16(%g) = %#04x, want %#04x", c.f, got, c.want)
		}
	}
}

func TestDecodeNPYRejects(t *testing.T) {
	good := EncodeNPY([]int64{2, 3}, make([]float32, 6), Float32)
	hdr := string(NPYHeader([]int64{2, 3}, Float32))
	cases := map[string][]byte{
		"empty":     nil,
		"magic":     []byte("NUMPY\x01\x00...."),
		"truncated": good[:len(good)-1],
		"extra":     append(append([]byte{}, good...), 0),
		"fortran":   []byte(strings.Replace(hdr, "False", "True ", 1) + strings.Repeat("\x00", 24)),
		"dtype":     []byte(strings.Replace(hdr, "<f4", "<i4", 1) + strings.Repeat("\x00", 24)),
		"version":   append([]byte("\x93NUMPY\x09\x00"), good[8:]...),
		"hlen":      append([]byte("\x93NUMPY\x01\x00\xff\xff"), good[10:]...),
		"shape":     []byte(strings.Replace(hdr, "(2, 3)", "(2, x)", 1) + strings.Repeat("\x00", 24)),
		"huge":      []byte(strings.Replace(hdr, "(2, 3)", "(9999999999, 99999999)", 1)),
	}
	for name, b := range cases {
		if _, _, _, err := DecodeNPY(b); !errors.Is(err, ErrBadNPY) {
			t.Errorf("%s: err = %v, want ErrBadNPY", name, err)
		}
	}
	if _, _, _, err := DecodeNPY(good); err != nil {
		t.Errorf("good file: %v", err)
	}
}

func FuzzDecodeNPY(f *testing.F) {
	f.Add(EncodeNPY([]int64{2, 3}, npyValues(6, 1), Float32))
	f.Add(EncodeNPY([]int64{5}, npyValues(5, 2), Float16))
	f.Add(EncodeNPY([]int64{}, []float32{1}, Float32))
	f.Add([]byte("\x93NUMPY\x02\x00\x10\x00\x00\x00{'shape':(1,),}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		shape, dt, data, err := DecodeNPY(b)
		if err != nil {
			if !errors.Is(err, ErrBadNPY) {
				t.Fatalf("error does not match ErrBadNPY: %v", err)
			}
			return
		}
		if elems(shape) != len(data) {
			t.Fatalf("shape %v but %d values", shape, len(data))
		}
		if NPYSize(shape, dt) != int64(len(EncodeNPY(shape, data, dt))) {
			t.Fatal("NPYSize mismatch")
		}
	})
}

// TestEncodeNPYBodyIsLittleEndianBits checks the float32 body, written as
// one copy of the values' memory, against each value's little-endian bits,
// special values included.
func TestEncodeNPYBodyIsLittleEndianBits(t *testing.T) {
	vals := []float32{0, float32(math.Copysign(0, -1)), 1, -2.5, float32(math.Inf(1)), float32(math.Inf(-1)),
		math.Float32frombits(0x7fc00001), math.Float32frombits(0xffa00000), math.SmallestNonzeroFloat32, math.MaxFloat32}
	for range 1000 {
		vals = append(vals, rand.Float32()*2000-1000)
	}
	shape := []int64{int64(len(vals))}
	got := EncodeNPY(shape, vals, Float32)
	hdr := NPYHeader(shape, Float32)
	if !bytes.Equal(got[:len(hdr)], hdr) {
		t.Fatalf("header %q, want %q", got[:len(hdr)], hdr)
	}
	body := got[len(hdr):]
	if len(body) != 4*len(vals) {
		t.Fatalf("body of %d bytes, want %d", len(body), 4*len(vals))
	}
	for i, v := range vals {
		b := math.Float32bits(v)
		want := []byte{byte(b), byte(b >> 8), byte(b >> 16), byte(b >> 24)}
		if !bytes.Equal(body[4*i:4*i+4], want) {
			t.Fatalf("value %d (%v): bytes %x, want %x", i, v, body[4*i:4*i+4], want)
		}
	}
	// Fewer values than the shape holds: the rest stays zero.
	short := EncodeNPY([]int64{4}, vals[2:4], Float32)[len(NPYHeader([]int64{4}, Float32)):]
	if !bytes.Equal(short[8:], make([]byte, 8)) || !bytes.Equal(short[:8], body[8:16]) {
		t.Fatalf("short body %x", short)
	}
}
