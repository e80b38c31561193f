package extractor

import (
	"bytes"
	"image/jpeg"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the process's user+system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loop runs op over the images in turn for b.N iterations and reports
// images/s (wall) and images per CPU second: on a shared machine the
// second is the per-core rate (GOMAXPROCS=1 via -cpu 1; it includes the
// GC's work).
func loop(b *testing.B, n int, op func(i int)) {
	b.ReportAllocs()
	i := 0
	cpu0 := cpuTime(b)
	for b.Loop() {
		op(i % n)
		i++
	}
	cpu := cpuTime(b) - cpu0
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "images/s")
	b.ReportMetric(float64(b.N)/cpu.Seconds(), "images/cpu-s")
}

// benchJPEGs returns the *.jpg files in $FEATUREFS_BENCH_IMAGES (a
// directory: scripts/bench-preprocess.sh makes one with
// scripts/ref_preprocess.py genbench), or four JPEGs made by Go's encoder.
func benchJPEGs(b *testing.B) [][]byte {
	dir := os.Getenv("FEATUREFS_BENCH_IMAGES")
	if dir == "" {
		return [][]byte{testJPEG(b, 500, 375), testJPEG(b, 375, 500), testJPEG(b, 640, 427), testJPEG(b, 800, 600)}
	}
	paths, err := filepath.Glob(filepath.Join(dir, "*.jpg"))
	if err != nil || len(paths) == 0 {
		b.Fatalf("no *.jpg in FEATUREFS_BENCH_IMAGES=%s (%v)", dir, err)
	}
	sort.Strings(paths)
	var out [][]byte
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			b.Fatal(err)
		}
		out = append(out, data)
	}
	return out
}

// BenchmarkPreprocess measures, over the benchmark JPEGs in turn (one
// goroutine: run with -cpu 1 for a per-core rate): Apply (decode, resize
// 256, crop 224, normalize); decoding alone to RGB (decodeRGB, the whole
// image); the resize and crop alone on decoded RGB; and Go's image/jpeg
// decoder alone (to YCbCr planes, no RGB conversion), for comparison.
// The file only uses names that the hand-written Go decoder's version of
// the package also has, so scripts/bench-preprocess.sh runs it on both.
func BenchmarkPreprocess(b *testing.B) {
	imgs := benchJPEGs(b)
	p := DefaultPreprocess()
	dst := make([]float32, 3*224*224)
	b.Run("apply", func(b *testing.B) {
		loop(b, len(imgs), func(i int) {
			if err := ApplyPreprocess(p, imgs[i], 0, dst); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("decode", func(b *testing.B) {
		var buf []byte
		loop(b, len(imgs), func(i int) {
			img, err := decodeRGB(imgs[i], 0, buf, fullRegion)
			if err != nil {
				b.Fatal(err)
			}
			buf = img.pix
		})
	})
	b.Run("go-image-jpeg", func(b *testing.B) {
		loop(b, len(imgs), func(i int) {
			if _, err := jpeg.Decode(bytes.NewReader(imgs[i])); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("resize-crop", func(b *testing.B) {
		decoded := make([]rgbImage, len(imgs))
		for i, data := range imgs {
			img, err := decodeRGB(data, 0, nil, fullRegion)
			if err != nil {
				b.Fatal(err)
			}
			decoded[i] = img
		}
		sc := new(preprocScratch)
		loop(b, len(decoded), func(i int) {
			img := decoded[i]
			tw, th := resizedSize(p, img.w, img.h)
			sc.rs.plan(img.w, img.h, tw, th, cropOffset(tw, 224), cropOffset(th, 224), 224, 224)
			sc.rs.run(img)
		})
	})
}
