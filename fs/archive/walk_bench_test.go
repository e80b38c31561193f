package archive

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/test/testenv"
)

// BenchmarkWalk reads 1,000 members of 110 KB (an ImageNet class) from a
// real MinIO in key order with 16 readers, as prefetch and warm do: as
// loose objects (the baseline) and as one tar (index and members). It
// reports GETs per sample; compare the two ns/op for the ratio.
func BenchmarkWalk(b *testing.B) {
	const n, size = 1000, 110_000
	m := testenv.StartMinIO(b)
	m.CreateBucket(b, "walk")
	var files []file
	for i := range n {
		name := fmt.Sprintf("n%04d.jpg", i)
		files = append(files, file{name, payload(i, size)})
		m.Put(b, "walk", "loose/"+name, files[i].data)
	}
	m.Put(b, "walk", "packed.tar", tarBytes(b, files))
	src, err := bucket.Open(context.Background(), "s3://walk", m.S3Options())
	if err != nil {
		b.Fatal(err)
	}
	walk := func(b *testing.B, bk bucket.Bucket, prefix string) {
		var keys []string
		tok := ""
		for {
			p, err := bk.List(ctx, prefix, tok)
			if err != nil {
				b.Fatal(err)
			}
			for _, o := range p.Objects {
				keys = append(keys, o.Key)
			}
			if tok = p.Next; tok == "" {
				break
			}
		}
		var next atomic.Int64
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				for i := next.Add(1) - 1; i < int64(len(keys)); i = next.Add(1) - 1 {
					if _, _, err := bk.Get(ctx, keys[i], 0); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		if len(keys) != n {
			b.Fatalf("%d keys", len(keys))
		}
	}
	b.Run("loose", func(b *testing.B) {
		for b.Loop() {
			walk(b, src, "loose/")
		}
		b.ReportMetric(1, "GETs/sample")
	})
	b.Run("tar", func(b *testing.B) {
		var gets int64
		for b.Loop() {
			w := Wrap(src, Config{Formats: Formats}).(*Bucket) // a fresh index each time
			walk(b, w, "packed.tar/")
			gets += w.Gets.Load()
		}
		b.ReportMetric(float64(gets)/float64(b.N)/n, "GETs/sample")
	})
}
