package features

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/featurefs/featurefs/extractor/spec"
	"github.com/featurefs/featurefs/fs/internal/fakes"
)

// Warm with Shard k/3, three pipelines (hosts) with caches of their own
// sharing one directory feature store: each extracts exactly the images
// whose key spec.ShardOf puts in its part, counts the rest as
// OtherShards, and the three together extract every image once. A rerun
// of one part on a fresh cache extracts nothing (the store has it all),
// and the zero Shard warms everything.
func TestWarmShardsSplitTheSource(t *testing.T) {
	objs := map[string]string{}
	for i := range 60 {
		objs[fmt.Sprintf("train/c%d/img%03d.jpg", i%4, i)] = fmt.Sprintf("pixels%d", i)
	}
	objs["train/c0/notes.txt"] = "not an image: in no part"
	b, _ := localBucket(t, objs)
	storeDir := filepath.Join(t.TempDir(), "fst")
	ctx := context.Background()
	warm := func(s spec.Shard) (WarmResult, *fakeExtractor) {
		x := newFakeExtractor()
		fst := openFeatureStore(t, storeDir)
		p, err := New(Config{Bucket: b, Extractor: x, Cache: fakes.NewCache(), FeatureStore: fst})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		res, err := p.Warm(ctx, WarmOptions{Model: "tiny", Layer: "layer1", Shard: s})
		if err != nil {
			t.Fatalf("warm %s: %v", s, err)
		}
		if err := fst.Flush(ctx); err != nil { // as featurefs warm waits for its writes
			t.Fatal(err)
		}
		return res, x
	}

	var all []string
	for k := range 3 {
		s := spec.Shard{Index: k, Count: 3}
		var want []string
		for key := range objs {
			if spec.IsImage(key, nil) && spec.ShardOf(key, 3) == k {
				want = append(want, key)
			}
		}
		slices.Sort(want)
		res, x := warm(s)
		if got := x.Keys(); !slices.Equal(got, want) {
			t.Errorf("shard %s extracted %v, want %v", s, got, want)
		}
		n := int64(len(want))
		if res.Total != n || res.Extracted != n || res.Cached != 0 || res.OtherShards != 60-n || x.Calls.Load() != n {
			t.Errorf("shard %s: %+v, %d extractions; want %d total and extracted, %d other shards'", s, res, x.Calls.Load(), n, 60-n)
		}
		t.Logf("shard %s: %d of 60 images", s, n)
		all = append(all, want...)
	}
	slices.Sort(all)
	if len(all) != 60 || len(slices.Compact(all)) != 60 {
		t.Errorf("the three parts hold %d images (%d distinct), want the 60, each once", len(all), len(slices.Compact(all)))
	}

	res, x := warm(spec.Shard{Index: 1, Count: 3})
	if x.Calls.Load() != 0 || res.Extracted != 0 || res.Cached != res.Total || res.Total == 0 {
		t.Errorf("rerun of shard 1/3 on a fresh cache: %+v, %d extractions; want everything found in the store", res, x.Calls.Load())
	}
	res, x = warm(spec.Shard{})
	if x.Calls.Load() != 0 || res.Total != 60 || res.Cached != 60 || res.OtherShards != 0 {
		t.Errorf("unsharded warm after the three parts: %+v, %d extractions; want 60 found, none extracted", res, x.Calls.Load())
	}
}
