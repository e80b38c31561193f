package extractor

import (
	"bytes"
	"image"
	"image/jpeg"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/featurefs/featurefs/test/testenv"
)

// Every JPEG kind the bit-exactness set has (PIL's and jpegenc's) is
// routed by its header: baseline 8-bit YCbCr or gray to the GPU, the rest
// (progressive, arithmetic-coded, CMYK, YCCK, RGB) to libjpeg-turbo.
func TestJPEGKindRoutesEveryKind(t *testing.T) {
	py := testenv.RequireTorch(t)
	dir := t.TempDir()
	paths := makeJPEGSet(t, py, dir)
	var gpu, cpu int
	for _, p := range paths {
		name := filepath.Base(p)
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		k, err := jpegKindOf(data)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if k.progressive() != strings.Contains(name, "prog") {
			t.Errorf("%s (%+v): progressive() = %v", name, k, k.progressive())
		}
		ok, why := k.gpuDecodable()
		want, wantWhy := true, ""
		switch {
		case strings.Contains(name, "arith"):
			want, wantWhy = false, "arithmetic-coded"
		case strings.Contains(name, "prog"):
			want, wantWhy = false, "progressive"
		case strings.Contains(name, "cmyk") || strings.Contains(name, "ycck"):
			want, wantWhy = false, "CMYK/YCCK"
		case strings.Contains(name, "rgbcs"):
			want, wantWhy = false, "RGB (not YCbCr)"
		}
		if ok != want || why != wantWhy {
			t.Errorf("%s (%+v): gpuDecodable = %v %q, want %v %q", name, k, ok, why, want, wantWhy)
		}
		if ok {
			gpu++
		} else {
			cpu++
		}
	}
	if gpu < 10 || cpu < 10 {
		t.Fatalf("%d JPEGs for the GPU, %d for the CPU: the set should have at least 10 of each", gpu, cpu)
	}
}

// Headers that are not JPEGs, or end before their frame, are errors, never
// a kind; and a 12-bit frame is kept on the CPU.
func TestJPEGKindRejects(t *testing.T) {
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, image.NewGray(image.Rect(0, 0, 16, 16)), nil); err != nil {
		t.Fatal(err)
	}
	good := buf.Bytes()
	sof := bytes.Index(good, []byte{0xFF, 0xC0})
	if sof < 0 {
		t.Fatal("no SOF0 in Go's JPEG")
	}
	for name, data := range map[string][]byte{
		"empty":            nil,
		"png":              []byte("\x89PNG\r\n\x1a\n0000"),
		"soi only":         good[:2],
		"cut in a length":  good[:5],
		"cut before frame": good[:sof],
		"cut in the frame": good[:sof+6],
		"junk marker":      append([]byte{0xFF, 0xD8, 0x12}, good[2:]...),
		"scan first":       {0xFF, 0xD8, 0xFF, 0xDA, 0, 2},
		"long length":      {0xFF, 0xD8, 0xFF, 0xE0, 0xFF, 0xFF, 0},
	} {
		if k, err := jpegKindOf(data); err == nil {
			t.Errorf("%s: kind %+v, want an error", name, k)
		}
	}
	twelve := bytes.Clone(good)
	twelve[sof+4] = 12
	k, err := jpegKindOf(twelve)
	if err != nil {
		t.Fatal(err)
	}
	if ok, why := k.gpuDecodable(); ok || why != "12-bit samples" {
		t.Errorf("12-bit: gpuDecodable = %v %q", ok, why)
	}
	if k, err := jpegKindOf(good); err != nil || k.components != 1 {
		t.Fatalf("Go's gray JPEG: %+v, %v", k, err)
	} else if ok, _ := k.gpuDecodable(); !ok {
		t.Errorf("Go's baseline gray JPEG kept off the GPU: %+v", k)
	}
}

// jpegKindOf reads outside bytes: it never panics and never reads past
// them, and what it calls decodable has a sane frame.
func FuzzJPEGKind(f *testing.F) {
	var buf bytes.Buffer
	_ = jpeg.Encode(&buf, image.NewRGBA(image.Rect(0, 0, 9, 7)), nil)
	f.Add(buf.Bytes())
	f.Add([]byte{0xFF, 0xD8, 0xFF, 0xEE, 0, 14, 'A', 'd', 'o', 'b', 'e', 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{0xFF, 0xD8, 0xFF, 0xFF, 0xC2, 0, 8, 8, 0, 1, 0, 1, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		k, err := jpegKindOf(data)
		if err != nil {
			return
		}
		if ok, _ := k.gpuDecodable(); ok && (k.precision != 8 || (k.components != 1 && k.components != 3)) {
			t.Fatalf("decodable with %+v", k)
		}
	})
}
