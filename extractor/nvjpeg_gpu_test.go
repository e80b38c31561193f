//go:build gpu

package extractor

import (
	"bytes"
	"errors"
	"image"
	"image/color"
	"image/jpeg"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestNVJPEGOnGPU runs the binding against the real nvJPEG on a GPU host
// (the libraries are found as a mount finds them, FEATUREFS_CUDA_LIB_DIR
// first). It is built only with the gpu tag, so that make test (no GPU)
// never compiles it; built, it fails where there is no usable nvJPEG.
// Build it here and ship the binary (a GPU host may have no Go):
//
//	go test -tags gpu -c -o nvjpeg.test ./extractor/
//	./nvjpeg.test -test.run 'NVJPEGOnGPU' -test.v
//
// It checks, against libjpeg-turbo's pixels (the CPU decoder, PIL's):
// baseline 4:2:0 color and gray JPEGs of several sizes decode in one batch
// close to the CPU's (it logs the mean and max absolute difference and the
// share of bytes that differ; it fails only on differences no IDCT or
// upsampling explains: mean > 4 or a swapped or garbled image); a
// truncated and a garbled JPEG in a batch fail alone (or go to the CPU),
// the others still decode and a later batch works, and the truncated one
// must not decode (the CPU decoder, as PIL, fails it: --decode gpu would
// otherwise give features where --decode cpu gives EIO); JPEGs of
// FEATUREFS_NVJPEG_GPU_JPEGS (a directory, optional) decode or are refused
// without error; then it logs a throughput figure (batches of 64
// 500x375 images, decode plus copy to the host).
func TestNVJPEGOnGPU(t *testing.T) {
	nv, rt, missing := findNVJPEG(defaultCUDASearch(""))
	if missing != "" {
		t.Fatal(missing)
	}
	g, err := openNVJPEG(0, nv, rt, 64)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := g.Close(); err != nil {
			t.Error(err)
		}
	}()
	d := g.(*nvjpegDecoder)
	t.Logf("%s (%s, %s)", d.Describe(), nv, rt)

	rng := rand.New(rand.NewPCG(1, 2))
	photo := func(w, h int, gray bool) []byte {
		var img image.Image
		if gray {
			m := image.NewGray(image.Rect(0, 0, w, h))
			for i := range m.Pix {
				m.Pix[i] = uint8(i*7/(w+1)) + uint8(rng.IntN(16))
			}
			img = m
		} else {
			m := image.NewRGBA(image.Rect(0, 0, w, h))
			for y := range h {
				for x := range w {
					m.Set(x, y, color.RGBA{uint8(x * 255 / w), uint8(y * 255 / h), uint8((x/9+y/7)%2*200 + rng.IntN(40)), 255})
				}
			}
			img = m
		}
		var b bytes.Buffer
		if err := jpeg.Encode(&b, img, &jpeg.Options{Quality: 90}); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}

	// compare decodes imgs on the GPU in one call and checks each decoded
	// image against the CPU's pixels, except those of the images bad names
	// (corrupt: both decoders may give different garbage), only logged.
	compare := func(name string, imgs [][]byte, bad ...int) []error {
		dst := make([][]byte, len(imgs))
		for i, img := range imgs {
			w, h, _, err := CheckImage(img, 0)
			if err != nil {
				dst[i] = make([]byte, 3)
				continue
			}
			dst[i] = make([]byte, 3*w*h)
		}
		errs := g.Decode(imgs, dst)
		var sum, n, differ int
		worst := 0
		for i, img := range imgs {
			if errs[i] != nil {
				continue
			}
			ref, err := decodeRGB(img, 0, nil, fullRegion)
			if err != nil {
				// --decode gpu would then give features where --decode
				// cpu gives EIO.
				t.Errorf("%s, image %d: the GPU decoded what the CPU refuses (%v)", name, i, err)
				continue
			}
			var isum, imax, idiffer int
			for y := range ref.h {
				row, got := ref.row(y), dst[i][3*ref.w*y:3*ref.w*(y+1)]
				for k := range row {
					dv := int(row[k]) - int(got[k])
					dv = max(dv, -dv)
					isum += dv
					imax = max(imax, dv)
					if dv != 0 {
						idiffer++
					}
				}
			}
			mean := float64(isum) / float64(len(dst[i]))
			if slices.Contains(bad, i) {
				t.Logf("%s, bad image %d decoded: mean |diff| %.2f from the CPU's, max %d", name, i, mean, imax)
				continue
			}
			sum += isum
			differ += idiffer
			n += len(dst[i])
			worst = max(worst, imax)
			if mean > 4 {
				t.Errorf("%s, image %d (%dx%d): mean absolute difference %.2f from libjpeg-turbo: not an IDCT difference", name, i, ref.w, ref.h, mean)
			}
		}
		if n > 0 {
			t.Logf("%s: %d images, mean |diff| %.3f, max %d, %.2f%% of bytes differ", name, len(imgs), float64(sum)/float64(n), worst, 100*float64(differ)/float64(n))
		}
		return errs
	}

	var batch [][]byte
	for _, s := range [][2]int{{500, 375}, {375, 500}, {224, 224}, {33, 17}, {1, 1}, {1023, 767}, {640, 480}} {
		batch = append(batch, photo(s[0], s[1], false))
	}
	batch = append(batch, photo(300, 200, true), photo(17, 9, true))
	for i, err := range compare("baseline batch", batch) {
		if err != nil {
			t.Errorf("baseline batch, image %d: %v", i, err)
		}
	}

	good := photo(320, 240, false)
	truncated := good[:len(good)/2]
	garbled := slices.Clone(good)
	for i := len(garbled) / 3; i < len(garbled)/3+200; i++ {
		garbled[i] = byte(rng.IntN(256))
	}
	errs := compare("batch with bad images", [][]byte{batch[0], truncated, batch[2], garbled, batch[3]}, 1, 3)
	for _, i := range []int{0, 2, 4} {
		if errs[i] != nil {
			t.Errorf("a good image failed with the bad ones: %v", errs[i])
		}
	}
	for _, i := range []int{1, 3} {
		t.Logf("bad image %d: %v (ErrBadImage %v, refused %v)", i, errs[i], errors.Is(errs[i], ErrBadImage), errors.Is(errs[i], errGPURefused))
	}
	if d.broken != nil {
		t.Errorf("the context was lost on bad images: %v", d.broken)
	}
	for i, err := range compare("batch after the bad ones", batch) {
		if err != nil {
			t.Errorf("after the bad images, image %d: %v", i, err)
		}
	}

	if dir := os.Getenv("FEATUREFS_NVJPEG_GPU_JPEGS"); dir != "" {
		files, _ := filepath.Glob(filepath.Join(dir, "*.jp*g"))
		var imgs [][]byte
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			imgs = append(imgs, b)
		}
		for start := 0; start < len(imgs); start += 64 {
			errs := compare(dir, imgs[start:min(start+64, len(imgs))])
			for i, err := range errs {
				if err != nil && !errors.Is(err, errGPURefused) {
					t.Errorf("%s: %v", files[start+i], err)
				}
			}
		}
	}

	// Throughput: decode and copy to the host, batches of 64.
	var imgs [][]byte
	for range 64 {
		imgs = append(imgs, photo(500, 375, false))
	}
	dst := make([][]byte, len(imgs))
	for i := range dst {
		dst[i] = make([]byte, 3*500*375)
	}
	g.Decode(imgs, dst) // warm up
	start, rounds := time.Now(), 0
	for time.Since(start) < 3*time.Second {
		for i, err := range g.Decode(imgs, dst) {
			if err != nil {
				t.Fatalf("throughput batch, image %d: %v", i, err)
			}
		}
		rounds++
	}
	el := time.Since(start)
	t.Logf("throughput: %.0f images/s (500x375 4:2:0, batches of 64, decode + copy to pageable host memory, one goroutine); %d device bytes kept",
		float64(rounds*len(imgs))/el.Seconds(), d.kept())
}
