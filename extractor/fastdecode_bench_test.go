package extractor

// Kept apart from preprocess_bench_test.go, which scripts/bench-preprocess.sh
// also compiles against an older version of the package (without
// FastDecode).

import (
	"image"
	"os"
	"testing"
)

// BenchmarkFastDecode measures, over the JPEGs of $FEATUREFS_BENCH_IMAGES
// in turn (scripts/bench-preprocess.sh points it at large photos; without
// it, two 4000x3000 and two 2000x1500 JPEGs from Go's encoder), the whole
// preprocess (Apply: decode, resize 256, crop 224, normalize) exactly and
// with FastDecode, and the decode alone (whole image to RGB) at full size
// and at the scale FastDecode picks. Run with -cpu 1 for per-core rates.
func BenchmarkFastDecode(b *testing.B) {
	var imgs [][]byte
	if os.Getenv("FEATUREFS_BENCH_IMAGES") != "" {
		imgs = benchJPEGs(b)
	} else {
		imgs = [][]byte{testJPEG(b, 4000, 3000), testJPEG(b, 3000, 4000), testJPEG(b, 2000, 1500), testJPEG(b, 1500, 2000)}
	}
	exact := DefaultPreprocess()
	fast := exact
	fast.FastDecode = true
	dst := make([]float32, 3*224*224)
	for _, c := range []struct {
		name string
		p    Preprocess
	}{{"exact", exact}, {"fast", fast}} {
		b.Run(c.name, func(b *testing.B) {
			loop(b, len(imgs), func(i int) {
				if err := ApplyPreprocess(c.p, imgs[i], 0, dst); err != nil {
					b.Fatal(err)
				}
			})
		})
		b.Run("decode-"+c.name, func(b *testing.B) {
			var buf, arena []byte
			loop(b, len(imgs), func(i int) {
				img, err := decodeRGBScaled(imgs[i], 0, buf, &arena, func(w, h int) int { return dctDenom(c.p, w, h) }, func(w, h, d int) image.Rectangle {
					sw, sh := scaledSize(w, h, d)
					return fullRegion(sw, sh)
				})
				if err != nil {
					b.Fatal(err)
				}
				buf = img.pix
			})
		})
	}
}
