package bucket_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/test/testenv"
)

// BenchmarkGet reads small objects (110 KiB, an average ImageNet JPEG) from
// a real MinIO: the AWS SDK's GetObject directly, reading into a buffer
// sized from Content-Length as bucket.Get does (the baseline), bucket.Get
// one at a time, and bucket.Get with 16 callers (per-request overhead, not
// bytes, dominates small objects, so concurrency is what buys throughput).
func BenchmarkGet(b *testing.B) {
	const n, size = 64, 110 << 10
	m := testenv.StartMinIO(b)
	m.CreateBucket(b, "bench")
	rng := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("train/c%d/img%04d.jpg", i%4, i)
		m.Put(b, "bench", keys[i], data)
	}
	ctx := context.Background()
	bk, err := bucket.Open(ctx, "s3://bench", m.S3Options())
	if err != nil {
		b.Fatal(err)
	}
	client := m.Client()
	report := func(b *testing.B) {
		b.SetBytes(size)
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "objects/s")
	}

	b.Run("sdk-GetObject/callers=1", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			out, err := client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("bench"), Key: aws.String(keys[i%n])})
			if err != nil {
				b.Fatal(err)
			}
			got := make([]byte, aws.ToInt64(out.ContentLength))
			_, err = io.ReadFull(out.Body, got)
			out.Body.Close()
			if err != nil || len(got) != size {
				b.Fatalf("read %d bytes: %v", len(got), err)
			}
		}
		report(b)
	})
	b.Run("bucket.Get/callers=1", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			got, _, err := bk.Get(ctx, keys[i%n], size)
			if err != nil || len(got) != size {
				b.Fatalf("read %d bytes: %v", len(got), err)
			}
		}
		report(b)
	})
	b.Run("bucket.Get/callers=16", func(b *testing.B) {
		var next atomic.Int64
		b.SetParallelism(max(1, 16/runtime.GOMAXPROCS(0)))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				got, _, err := bk.Get(ctx, keys[next.Add(1)%n], size)
				if err != nil || len(got) != size {
					b.Errorf("read %d bytes: %v", len(got), err)
					return
				}
			}
		})
		report(b)
	})
}
