package extractor

import (
	"bytes"
	"image/jpeg"
	"os"
	"testing"
)

// benchJPEG returns $FEATUREFS_BENCH_IMAGE, or a 500x375 4:2:0 JPEG (the
// typical ImageNet size) made by Go's encoder.
func benchJPEG(b *testing.B) []byte {
	if p := os.Getenv("FEATUREFS_BENCH_IMAGE"); p != "" {
		data, err := os.ReadFile(p)
		if err != nil {
			b.Fatal(err)
		}
		return data
	}
	return testJPEG(b, 500, 375)
}

// BenchmarkPreprocess measures Apply (decode, resize 256, crop 224,
// normalize) on a 500x375 JPEG, next to Go's bare jpeg.Decode of the same
// bytes as the floor it cannot beat.
func BenchmarkPreprocess(b *testing.B) {
	data := benchJPEG(b)
	p := DefaultPreprocess()
	dst := make([]float32, 3*224*224)
	b.Run("apply", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := p.Apply(data, 0, dst); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "images/s")
	})
	b.Run("jpeg-decode-only", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := jpeg.Decode(bytes.NewReader(data)); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "images/s")
	})
	b.Run("resize-crop-only", func(b *testing.B) {
		sc := new(preprocScratch)
		img, err := decodeRGB(data, 0, nil, fullRegion)
		if err != nil {
			b.Fatal(err)
		}
		tw, th := p.resizedSize(img.w, img.h)
		b.ReportAllocs()
		for b.Loop() {
			sc.rs.plan(img.w, img.h, tw, th, cropOffset(tw, 224), cropOffset(th, 224), 224, 224)
			sc.rs.run(img)
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "images/s")
	})
}
