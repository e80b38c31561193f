package remote

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/featurefs/featurefs/extractor/api"
)

// BenchmarkBatchVsSingle measures features/s fetched over loopback from a
// server whose cache holds them (transfer and per-request cost only, no
// model), by 64 concurrent readers: batched (MaxBatch 64, 4 requests in
// flight) against one request per feature (MaxBatch 1, 16 in flight), for a
// small feature (2048 floats, ResNet-50 layer18: 8 KiB) and a large one
// (1024x14x14, layer12: 784 KiB). It reports both rates and their ratio.
//
//	go test -run '^$' -bench BatchVsSingle -benchtime 1x ./fs/remote
func BenchmarkBatchVsSingle(b *testing.B) {
	for _, shape := range [][]int64{{2048}, {1024, 14, 14}} {
		b.Run(fmt.Sprintf("shape=%v", shape), func(b *testing.B) {
			const n, readers = 2048, 64
			objs := map[string]string{}
			for i := range n {
				objs[fmt.Sprintf("b/%04d.jpg", i)] = fmt.Sprintf("object %d", i)
			}
			ts := startServerEx(b, writeObjects(b, objs), newFakeExtractorShape(shape), nil)
			rate := func(maxBatch, inFlight int) float64 {
				c := dial(b, ClientConfig{URLs: []string{ts.URL}, MaxBatch: maxBatch, MaxInFlight: inFlight})
				keys := make(chan string, n)
				for k := range objs {
					keys <- k
				}
				close(keys)
				start := time.Now()
				var wg sync.WaitGroup
				for range readers {
					wg.Go(func() {
						for k := range keys {
							if _, err := c.Extractor().Extract(context.Background(), api.Request{Model: "tiny", Layer: 0, Key: k}); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				return float64(n) / time.Since(start).Seconds()
			}
			rate(64, 4) // fill the server's cache
			var batched, single float64
			for b.Loop() {
				single = rate(1, 16)
				batched = rate(64, 4)
			}
			b.ReportMetric(batched, "batched_features/s")
			b.ReportMetric(single, "single_features/s")
			b.ReportMetric(batched/single, "ratio")
		})
	}
}
