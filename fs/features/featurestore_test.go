package features

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/featurestore"
	"github.com/featurefs/featurefs/fs/internal/fakes"
)

// openFeatureStore opens a directory feature store.
func openFeatureStore(t *testing.T, dir string) *featurestore.Store {
	t.Helper()
	bs, err := bucket.OpenStore(context.Background(), dir, bucket.S3Options{})
	if err != nil {
		t.Fatal(err)
	}
	fst, err := featurestore.New(featurestore.Config{Store: bs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fst.Close)
	return fst
}

// Two pipelines with caches of their own share one feature store: the
// first computes and writes (named by the naming rule: a.jpg and a.png
// keep their extensions), the second reads everything from the store and
// extracts nothing; a store-only pipeline refuses what the store lacks.
func TestFeatureStoreBetweenPipelines(t *testing.T) {
	objs := map[string]string{"d/a.jpg": "abcd", "d/a.png": "efgh", "d/b.jpg": "ijkl"}
	b, _ := localBucket(t, objs)
	storeDir := filepath.Join(t.TempDir(), "fst")
	ctx := context.Background()
	run := func(fst *featurestore.Store, only bool) (*Pipeline, *fakeExtractor) {
		x := newFakeExtractor()
		p, err := New(Config{Bucket: b, Extractor: x, Cache: fakes.NewCache(), FeatureStore: fst, StoreOnly: only})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return p, x
	}
	fst1 := openFeatureStore(t, storeDir)
	p1, x1 := run(fst1, false)
	want := map[string][]byte{}
	for k := range objs {
		obj, err := b.Stat(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		got, err := p1.Feature(ctx, "tiny", 1, obj)
		if err != nil {
			t.Fatal(err)
		}
		want[k] = got
	}
	if err := fst1.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := x1.Calls.Load(); n != 3 {
		t.Fatalf("first pipeline: %d extractions, want 3", n)
	}
	for _, name := range []string{"a.jpg.npy", "a.png.npy", "b.npy"} {
		if _, err := os.Stat(filepath.Join(storeDir, "tiny-d1g35t", "layer1", "d", name)); err != nil {
			t.Errorf("store layout: %v", err)
		}
	}
	if _, err := os.Stat(filepath.Join(storeDir, "tiny-d1g35t", featurestore.ManifestName)); err != nil {
		t.Errorf("manifest: %v", err)
	}

	p2, x2 := run(openFeatureStore(t, storeDir), false)
	for k := range objs {
		obj, _ := b.Stat(ctx, k)
		got, err := p2.Feature(ctx, "tiny", 1, obj)
		if err != nil || !bytes.Equal(got, want[k]) {
			t.Fatalf("second pipeline %s: %v", k, err)
		}
	}
	if n := x2.Calls.Load(); n != 0 {
		t.Errorf("second pipeline: %d extractions, want 0", n)
	}
	if st := p2.Stats().FeatureStore; st == nil || st.Hits != 3 {
		t.Errorf("second pipeline's feature store stats: %+v", st)
	}

	p3, x3 := run(openFeatureStore(t, storeDir), true)
	obj, _ := b.Stat(ctx, "d/b.jpg")
	if _, err := p3.Feature(ctx, "tiny", 0, obj); !errors.Is(err, ErrNotExtracted) {
		t.Errorf("store-only, layer not in the store: %v, want ErrNotExtracted", err)
	}
	if got, err := p3.Feature(ctx, "tiny", 1, obj); err != nil || !bytes.Equal(got, want["d/b.jpg"]) {
		t.Errorf("store-only, in the store: %v", err)
	}
	if n := x3.Calls.Load(); n != 0 {
		t.Errorf("store-only: %d extractions", n)
	}
	if _, err := New(Config{Bucket: b, Extractor: newFakeExtractor(), Cache: fakes.NewCache(), StoreOnly: true}); err == nil {
		t.Error("StoreOnly without a FeatureStore accepted")
	}
}

// A changed model (another digest) neither reads the old model's features
// nor overwrites them: it computes and writes under a directory of its own.
func TestFeatureStoreChangedModel(t *testing.T) {
	b, _ := localBucket(t, map[string]string{"a.jpg": "abcd"})
	storeDir := filepath.Join(t.TempDir(), "fst")
	ctx := context.Background()
	obj, _ := b.Stat(ctx, "a.jpg")
	for i, digest := range []string{"aaaaaaaaaaaa11", "bbbbbbbbbbbb22"} {
		m := testModel()
		m.Digest = digest
		x := fakes.NewExtractor(func(l api.Layer, data []byte, _ api.DType) []byte { return expectedNPY(l, data) }, m)
		fst := openFeatureStore(t, storeDir)
		p, err := New(Config{Bucket: b, Extractor: x, Cache: fakes.NewCache(), FeatureStore: fst})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Feature(ctx, "tiny", 1, obj); err != nil {
			t.Fatal(err)
		}
		fst.Flush(ctx)
		p.Close()
		if n := x.Calls.Load(); n != 1 {
			t.Errorf("model %d: %d extractions, want 1 (nothing of another model's reused)", i, n)
		}
		if _, err := os.Stat(filepath.Join(storeDir, "tiny-"+digest[:12], "layer1", "a.npy")); err != nil {
			t.Errorf("model %d: %v", i, err)
		}
	}
}

// gatedStore is a feature store's backing whose feature writes (.npy keys)
// wait until gate is closed.
type gatedStore struct {
	bucket.Store
	gate chan struct{}
}

func (g *gatedStore) Put(ctx context.Context, key string, data []byte, meta map[string]string) error {
	if strings.HasSuffix(key, ".npy") {
		select {
		case <-g.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return g.Store.Put(ctx, key, data, meta)
}

// A reader's feature store write never waits: with the store's queue full
// (one write in flight, held, and one queued) the reads return and their
// writes are dropped. A warm-up's writes wait for room instead: none is
// dropped, and every feature it computed reaches the store once the held
// write goes through.
func TestFeatureStoreWritesWaitForWarmNotForReads(t *testing.T) {
	objs := map[string]string{"r/a.jpg": "abcd", "r/b.jpg": "efgh", "r/c.jpg": "ijkl", "w/d.jpg": "mnop", "w/e.jpg": "qrst"}
	b, _ := localBucket(t, objs)
	ctx := context.Background()
	storeDir := filepath.Join(t.TempDir(), "fst")
	bs, err := bucket.OpenStore(ctx, storeDir, bucket.S3Options{})
	if err != nil {
		t.Fatal(err)
	}
	gs := &gatedStore{Store: bs, gate: make(chan struct{})}
	var open sync.Once
	release := func() { open.Do(func() { close(gs.gate) }) }
	defer release()
	fst, err := featurestore.New(featurestore.Config{Store: gs, MaxQueue: 1, MaxPuts: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fst.Close)
	x := newFakeExtractor()
	p, err := New(Config{Bucket: b, Extractor: x, Cache: fakes.NewCache(), FeatureStore: fst})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })

	// Reads: three writes for room for two; the gate stays shut.
	for _, k := range []string{"r/a.jpg", "r/b.jpg", "r/c.jpg"} {
		obj, err := b.Stat(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Feature(ctx, "tiny", 1, obj); err != nil {
			t.Fatalf("read %s: %v", k, err)
		}
	}
	readDropped := fst.Stats().Dropped
	if readDropped < 1 {
		t.Fatalf("reads with the feature store's queue full: %d writes dropped, want at least 1 (3 writes, room for 2)", readDropped)
	}

	// Warm-up with the queue still full: its writes wait.
	done := make(chan error, 1)
	var res WarmResult
	go func() {
		var err error
		res, err = p.Warm(ctx, WarmOptions{Model: "tiny", Layer: "layer1", Prefix: "w/"})
		done <- err
	}()
	for x.Calls.Load() < 5 { // both of warm's extractions made
		select {
		case err := <-done:
			t.Fatalf("warm returned (%v) before extracting both objects", err)
		case <-time.After(time.Millisecond):
		}
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if res.Extracted != 2 {
		t.Errorf("warm: %+v, want 2 extracted", res)
	}
	if err := fst.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if d := fst.Stats().Dropped; d != readDropped {
		t.Errorf("warm-up: %d feature store writes dropped, want none (%d dropped before, by reads)", d-readDropped, readDropped)
	}
	for _, name := range []string{"d.npy", "e.npy"} {
		if _, err := os.Stat(filepath.Join(storeDir, "tiny-d1g35t", "layer1", "w", name)); err != nil {
			t.Errorf("warm-up's feature not in the store: %v", err)
		}
	}
}

// Augmented views go to the feature store under paths of their own, so
// that neither they nor the plain feature overwrite each other: a second
// pipeline reads the plain feature and two views of each image from the
// store and extracts nothing.
func TestFeatureStoreAugmentedViews(t *testing.T) {
	objs := map[string]string{"d/a.jpg": "abcd", "d/b.jpg": "ijkl"}
	b, _ := localBucket(t, objs)
	storeDir := filepath.Join(t.TempDir(), "fst")
	ctx := context.Background()
	aug := AugmentConfig{Views: 2, Seed: 3}
	run := func() (*Pipeline, *fakeExtractor) {
		x := newFakeExtractor()
		p, err := New(Config{Bucket: b, Extractor: x, Cache: fakes.NewCache(), FeatureStore: openFeatureStore(t, storeDir), Augment: aug})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return p, x
	}
	views := func(p *Pipeline) []*View {
		m := p.cfg.Extractor.Models()[0]
		return []*View{p.NewView(m, m.Layers[1]), p.NewAugView(m, m.Layers[1], aug.Spec(0)), p.NewAugView(m, m.Layers[1], aug.Spec(1))}
	}
	p1, x1 := run()
	want := map[string][]byte{}
	for k := range objs {
		obj, _ := b.Stat(ctx, k)
		for i, v := range views(p1) {
			got, err := p1.Read(ctx, v, obj)
			if err != nil {
				t.Fatal(err)
			}
			want[k+string(rune('0'+i))] = got
		}
	}
	if err := p1.cfg.FeatureStore.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := x1.Calls.Load(); n != 6 {
		t.Fatalf("first pipeline: %d extractions, want 6", n)
	}
	p2, x2 := run()
	for k := range objs {
		obj, _ := b.Stat(ctx, k)
		for i, v := range views(p2) {
			got, err := p2.Read(ctx, v, obj)
			if err != nil || !bytes.Equal(got, want[k+string(rune('0'+i))]) {
				t.Errorf("second pipeline, %s view %d: %v, same bytes %v", k, i, err, bytes.Equal(got, want[k+string(rune('0'+i))]))
			}
		}
	}
	if n := x2.Calls.Load(); n != 0 {
		t.Errorf("second pipeline: %d extractions, want 0 (all from the feature store)", n)
	}
}

// slowGets is a bucket whose Gets take 20 ms each, counting how many run
// at once.
type slowGets struct {
	bucket.Bucket
	running, most atomic.Int64
}

func (b *slowGets) Get(ctx context.Context, key string, maxBytes int64) ([]byte, bucket.Object, error) {
	n := b.running.Add(1)
	defer b.running.Add(-1)
	for m := b.most.Load(); n > m && !b.most.CompareAndSwap(m, n); m = b.most.Load() {
	}
	time.Sleep(20 * time.Millisecond)
	return b.Bucket.Get(ctx, key, maxBytes)
}

// TestViewParamsFetchesBounded: the images ViewParams fetches for their
// headers (each held whole until read) are at most viewParamFetches at
// once, however many views are asked for together (a directory's
// augment.jsonl, a burst of getxattr, a server's /v1/viewparams).
func TestViewParamsFetchesBounded(t *testing.T) {
	objs := map[string]string{}
	for i := range 40 {
		objs[fmt.Sprintf("d/%02d.jpg", i)] = fmt.Sprint("image ", i)
	}
	lb, _ := localBucket(t, objs)
	b := &slowGets{Bucket: lb}
	x := newFakeExtractor()
	p, err := New(Config{Bucket: b, Extractor: x, Cache: fakes.NewCache(), Augment: AugmentConfig{Views: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	m := x.Models()[0]
	v := p.NewAugView(m, m.Layers[0], p.Config().Augment.Spec(0))
	var wg sync.WaitGroup
	for k := range objs {
		obj, err := lb.Stat(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			if _, err := p.ViewParams(context.Background(), v, obj); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := b.most.Load(); n > viewParamFetches || n < 2 {
		t.Errorf("%d header fetches at once, want 2 to %d", n, viewParamFetches)
	}
}
