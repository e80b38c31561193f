package extractor

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"runtime"
	"strings"
	"sync"
	"testing"
)

func testPNG(t testing.TB, w, h int) []byte {
	t.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for i := range img.Pix {
		img.Pix[i] = byte(i * 7)
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func testJPEG(t testing.TB, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			img.Set(x, y, color.RGBA{byte(x), byte(y), byte(x + y), 255})
		}
	}
	var b bytes.Buffer
	if err := jpeg.Encode(&b, img, &jpeg.Options{Quality: 90}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// bigPNGHeader returns a PNG whose IHDR (with a valid CRC) claims w x h.
func bigPNGHeader(t testing.TB, w, h uint32) []byte {
	b := testPNG(t, 4, 4)
	binary.BigEndian.PutUint32(b[16:], w)
	binary.BigEndian.PutUint32(b[20:], h)
	binary.BigEndian.PutUint32(b[29:], crc32.ChecksumIEEE(b[12:29]))
	return b
}

// bigJPEGHeader returns a JPEG whose SOF0 claims w x h.
func bigJPEGHeader(t testing.TB, w, h uint16) []byte {
	b := testJPEG(t, 16, 16)
	i := bytes.Index(b, []byte{0xff, 0xc0})
	if i < 0 {
		t.Fatal("no SOF0 in Go's JPEG")
	}
	binary.BigEndian.PutUint16(b[i+5:], h)
	binary.BigEndian.PutUint16(b[i+7:], w)
	return b
}

func TestCheckImage(t *testing.T) {
	for _, c := range []struct {
		data   []byte
		w, h   int
		format string
	}{
		{testPNG(t, 31, 17), 31, 17, "png"},
		{testJPEG(t, 40, 9), 40, 9, "jpeg"},
	} {
		w, h, f, err := CheckImage(c.data, 0)
		if err != nil || w != c.w || h != c.h || f != c.format {
			t.Errorf("CheckImage = %d %d %q %v, want %d %d %q", w, h, f, err, c.w, c.h, c.format)
		}
	}
	if _, _, _, err := CheckImage(testPNG(t, 100, 100), 9999); !errors.Is(err, ErrBadImage) || !strings.Contains(err.Error(), "limit") {
		t.Errorf("10000 pixels with limit 9999: err = %v", err)
	}
}

// TestBombRejectedFromHeader checks that a header claiming 30000x30000
// (900 MP, 2.7 GB as RGB) is refused before any pixel buffer is allocated.
func TestBombRejectedFromHeader(t *testing.T) {
	p := DefaultPreprocess()
	dst := make([]float32, 3*224*224)
	for name, data := range map[string][]byte{
		"png":  bigPNGHeader(t, 30000, 30000),
		"jpeg": bigJPEGHeader(t, 30000, 30000),
	} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		err := ApplyPreprocess(p, data, 0, dst)
		runtime.ReadMemStats(&after)
		if !errors.Is(err, ErrBadImage) || !strings.Contains(err.Error(), "900000000 pixels") {
			t.Errorf("%s: err = %v, want ErrBadImage naming the pixel count", name, err)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4<<20 {
			t.Errorf("%s: allocated %d bytes before rejecting", name, alloc)
		}
		w, h, _, err := CheckImage(data, 1<<40)
		if err != nil || w != 30000 || h != 30000 {
			t.Errorf("%s: CheckImage with a huge limit = %dx%d, %v", name, w, h, err)
		}
	}
}

func TestBadImages(t *testing.T) {
	pngB := testPNG(t, 64, 48)
	jpgB := testJPEG(t, 64, 48)
	corruptPNG := append([]byte{}, pngB...)
	corruptPNG[len(corruptPNG)/2] ^= 0xff // IDAT CRC mismatch
	corruptJPEG := append([]byte{}, jpgB...)
	if i := bytes.Index(corruptJPEG, []byte{0xff, 0xc4}); i > 0 {
		corruptJPEG[i+4] = 0xff // nonsense Huffman table class/id
	}
	zeroPNG := bigPNGHeader(t, 0, 10)
	cases := map[string][]byte{
		"empty":          nil,
		"text":           []byte("hello, this is not an image"),
		"gif":            []byte("GIF89a\x01\x00\x01\x00\x00\x00\x00;"),
		"png magic only": pngB[:8],
		"truncated png":  pngB[:len(pngB)/2],
		"corrupt png":    corruptPNG,
		"jpeg soi only":  jpgB[:3],
		"truncated jpeg": jpgB[:len(jpgB)/2],
		"corrupt jpeg":   corruptJPEG,
		"zero width png": zeroPNG,
	}
	p := DefaultPreprocess()
	dst := make([]float32, 3*224*224)
	for name, data := range cases {
		err := ApplyPreprocess(p, data, 0, dst)
		if !errors.Is(err, ErrBadImage) {
			t.Errorf("%s: Apply err = %v, want ErrBadImage", name, err)
			continue
		}
		t.Logf("%s: %v", name, err)
	}
}

// TestApplyConcurrent checks pooled buffers are not shared between calls.
func TestApplyConcurrent(t *testing.T) {
	p := DefaultPreprocess()
	inputs := [][]byte{testPNG(t, 300, 200), testJPEG(t, 500, 375), testPNG(t, 90, 400), testJPEG(t, 256, 256)}
	want := make([][]float32, len(inputs))
	for i, in := range inputs {
		want[i] = make([]float32, 3*224*224)
		if err := ApplyPreprocess(p, in, 0, want[i]); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			got := make([]float32, 3*224*224)
			for r := 0; r < 6; r++ {
				i := (g + r) % len(inputs)
				if err := ApplyPreprocess(p, inputs[i], 0, got); err != nil {
					t.Error(err)
					return
				}
				for j := range got {
					if got[j] != want[i][j] {
						t.Errorf("goroutine %d input %d: element %d differs", g, i, j)
						return
					}
				}
			}
		}(g)
	}
	wg.Wait()
}

func FuzzApply(f *testing.F) {
	f.Add(testPNG(f, 5, 3))
	f.Add(testJPEG(f, 9, 17))
	f.Add(bigPNGHeader(f, 1, 70000))
	p := Preprocess{Resize: 16, Crop: 12, Std: [3]float32{1, 1, 1}}
	dst := make([]float32, 3*12*12)
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := ApplyPreprocess(p, data, 1<<20, dst); err != nil && !errors.Is(err, ErrBadImage) {
			t.Fatalf("error does not match ErrBadImage: %v", err)
		}
	})
}
