package features

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/featurefs/featurefs/cache"
	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/fs/internal/fakes"
)

// workloadCache is a cache that records the Workload it is given.
type workloadCache struct {
	*fakes.Cache
	mu sync.Mutex
	w  cache.Workload
	n  int
}

func (c *workloadCache) SetWorkload(w cache.Workload) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.w, c.n = w, c.n+1
}

func (c *workloadCache) workload() (cache.Workload, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.w, c.n
}

// inferExtractor reports inference seconds over batched images.
type inferExtractor struct {
	*fakeExtractor
	infer float64
	items int64
}

func (x *inferExtractor) Stats() api.Stats {
	return api.Stats{Device: "cpu", InferSeconds: x.infer, BatchedItems: x.items}
}

// TestPipelineTellsCacheItsWorkload (issue 49 item 7): the pipeline gives
// a cache that adapts (cache.Store.SetWorkload) its activity, which grows
// with the pipeline's work, and the extractor's inference time over the
// images it batched, and takes them back at Close.
func TestPipelineTellsCacheItsWorkload(t *testing.T) {
	b, _ := localBucket(t, map[string]string{"d/a.jpg": "abcd"})
	x := &inferExtractor{fakeExtractor: newFakeExtractor(), infer: 3.5, items: 100}
	c := &workloadCache{Cache: fakes.NewCache()}
	p, err := New(Config{Bucket: b, Extractor: x, Cache: c})
	if err != nil {
		t.Fatal(err)
	}
	w, _ := c.workload()
	if w.Activity == nil || w.Extraction == nil {
		t.Fatalf("workload %+v: want Activity and Extraction", w)
	}
	if d, n := w.Extraction(); d != 3500*time.Millisecond || n != 100 {
		t.Errorf("Extraction() = %v, %d; want 3.5s over 100 images", d, n)
	}
	a0 := w.Activity()
	obj, err := b.Stat(context.Background(), "d/a.jpg")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Feature(context.Background(), "tiny", 1, obj); err != nil {
		t.Fatal(err)
	}
	if a := w.Activity(); a == a0 {
		t.Error("the activity did not change with a read")
	}
	p.Close()
	if w, n := c.workload(); n != 2 || w.Activity != nil || w.Extraction != nil {
		t.Errorf("after Close: %d calls, workload %+v; want it taken back", n, w)
	}
}
