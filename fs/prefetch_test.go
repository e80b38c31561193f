package fs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/featurefs/featurefs/cache"
	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/features"
	"github.com/featurefs/featurefs/fs/internal/leakcheck"
	"github.com/featurefs/featurefs/fs/views"
)

// batchExtractor is a fake extractor with the scheduling the real one has:
// identical requests in flight share one call, calls run in batches of up
// to batch (Foreground first, then Background, each in arrival order), a
// Foreground request for a queued Background call moves it to the
// Foreground queue, and calls nobody waits for any more are dropped
// unrun. Each batch takes delay. It records the batch each key ran in.
type batchExtractor struct {
	*fakeExtractor
	batch int
	delay time.Duration

	extracts atomic.Int64 // Extract calls

	mu      sync.Mutex
	cond    *sync.Cond
	closed  bool
	q       [2][]*bcall               // GUARDED_BY(mu)
	calls   map[string]*bcall         // GUARDED_BY(mu)
	batches int                       // GUARDED_BY(mu): batches started
	ranIn   map[string]int            // GUARDED_BY(mu): key -> batch number
	prioOf  map[string][]api.Priority // GUARDED_BY(mu): key -> priorities asked
	askedAt map[string]int            // GUARDED_BY(mu): key -> batches started when Foreground asked
	done    chan struct{}
}

type bcall struct {
	req     api.Request
	prio    api.Priority
	waiters int
	done    chan struct{}
	out     []byte
	err     error
}

func newBatchExtractor(t *testing.T, batch int, delay time.Duration, models ...*api.Model) *batchExtractor {
	fx := newFakeExtractor(models...)
	x := &batchExtractor{fakeExtractor: fx, batch: batch, delay: delay,
		calls: map[string]*bcall{}, ranIn: map[string]int{}, prioOf: map[string][]api.Priority{}, askedAt: map[string]int{}, done: make(chan struct{})}
	x.cond = sync.NewCond(&x.mu)
	go x.loop()
	t.Cleanup(x.close)
	return x
}

func (x *batchExtractor) close() {
	x.mu.Lock()
	if x.closed {
		x.mu.Unlock()
		return
	}
	x.closed = true
	x.cond.Broadcast()
	x.mu.Unlock()
	<-x.done
}

// Stats reports the batch size, as the real extractor does once chosen.
func (x *batchExtractor) Stats() api.Stats {
	st := x.fakeExtractor.Stats()
	st.BatchSizes = map[string]int{}
	for _, m := range x.Models() {
		st.BatchSizes[m.Name+"/layer0"] = x.batch
	}
	return st
}

func (x *batchExtractor) Extract(ctx context.Context, req api.Request) ([]byte, error) {
	x.extracts.Add(1)
	x.mu.Lock()
	x.prioOf[req.Key] = append(x.prioOf[req.Key], req.Priority)
	if req.Priority == api.Foreground {
		x.askedAt[req.Key] = x.batches
	}
	if x.closed {
		x.mu.Unlock()
		return nil, api.ErrClosed
	}
	id := fmt.Sprint(req.Model, "\x00", req.Layer, "\x00", req.ID)
	c := x.calls[id]
	if c == nil {
		c = &bcall{req: req, prio: req.Priority, done: make(chan struct{})}
		x.calls[id] = c
		x.q[c.prio] = append(x.q[c.prio], c)
		x.cond.Signal()
	} else if req.Priority == api.Foreground && c.prio == api.Background {
		if i := slices.Index(x.q[api.Background], c); i >= 0 {
			x.q[api.Background] = slices.Delete(x.q[api.Background], i, i+1)
			x.q[api.Foreground] = append(x.q[api.Foreground], c)
		}
		c.prio = api.Foreground
	}
	c.waiters++
	x.mu.Unlock()
	select {
	case <-c.done:
		return c.out, c.err
	case <-ctx.Done():
		x.mu.Lock()
		c.waiters--
		x.mu.Unlock()
		return nil, ctx.Err()
	}
}

func (x *batchExtractor) loop() {
	defer close(x.done)
	for {
		x.mu.Lock()
		for !x.closed && len(x.q[0])+len(x.q[1]) == 0 {
			x.cond.Wait()
		}
		if x.closed {
			x.mu.Unlock()
			return
		}
		var batch []*bcall
		for p := range x.q {
			for len(x.q[p]) > 0 && len(batch) < x.batch {
				c := x.q[p][0]
				x.q[p] = x.q[p][1:]
				if c.waiters == 0 { // abandoned: drop unrun
					x.finishLocked(c, nil, context.Canceled)
					continue
				}
				batch = append(batch, c)
			}
		}
		if len(batch) == 0 {
			x.mu.Unlock()
			continue
		}
		x.batches++
		for _, c := range batch {
			x.ranIn[c.req.Key] = x.batches
		}
		x.mu.Unlock()
		time.Sleep(x.delay)
		for _, c := range batch {
			out, err := x.compute(c.req)
			x.mu.Lock()
			x.finishLocked(c, out, err)
			x.mu.Unlock()
		}
	}
}

func (x *batchExtractor) finishLocked(c *bcall, out []byte, err error) {
	delete(x.calls, fmt.Sprint(c.req.Model, "\x00", c.req.Layer, "\x00", c.req.ID))
	c.out, c.err = out, err
	close(c.done)
}

// compute is the fake extractor's answer: the fakeExtractor's for small
// layers, zeros for large ones.
func (x *batchExtractor) compute(req api.Request) ([]byte, error) {
	m, ok := x.Model(req.Model)
	if !ok || req.Layer < 0 || req.Layer >= len(m.Layers) {
		return nil, fmt.Errorf("no model %s layer %d", req.Model, req.Layer)
	}
	data, err := req.Fetch(context.Background())
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(string(data), "BAD") {
		return nil, &api.ImageError{Key: req.Key, Reason: "not an image"}
	}
	l := m.Layers[req.Layer]
	if l.Elements() > 1024 {
		return append(api.NPYHeader(l.Shape, x.DType()), make([]byte, l.Elements()*x.DType().Size())...), nil
	}
	return expectedNPY(l, data, x.DType()), nil
}

func (x *batchExtractor) batchesRun() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.batches
}

// batchOf returns the batch key ran in and the batches started when a
// Foreground request for it arrived.
func (x *batchExtractor) batchOf(key string) (ran, asked int, ok bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	ran, ok = x.ranIn[key]
	return ran, x.askedAt[key], ok
}

// keyCache is a cache that remembers which keys were stored but drops the
// values: prefetch results must not be held anywhere.
type keyCache struct {
	mu   sync.Mutex
	keys map[string]bool
	puts atomic.Int64
}

func newKeyCache() *keyCache { return &keyCache{keys: map[string]bool{}} }

func (c *keyCache) Get(k cache.Key) ([]byte, bool, error) { return nil, false, nil }

// ReadAt misses, as Get does: no value is kept.
func (c *keyCache) ReadAt(k cache.Key, dst []byte, off int64) (int, int64, bool, error) {
	return 0, 0, false, nil
}
func (c *keyCache) Put(k cache.Key, v []byte) error {
	c.puts.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.keys[string(k.ID())] = true
	return nil
}
func (c *keyCache) Has(k cache.Key) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.keys[string(k.ID())]
}
func (c *keyCache) Stats() cache.Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return cache.Stats{Puts: c.puts.Load(), Entries: int64(len(c.keys))}
}

// mountFS mounts a tree over cfg (fake clock, discarded logs unless set)
// and returns it with its server; the test may unmount it itself.
func mountFS(t *testing.T, cfg testConfig) (*FS, *fuse.Server, string) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MetadataTTL == 0 {
		cfg.MetadataTTL = time.Hour
	}
	if cfg.Now == nil {
		cfg.Now = newFakeClock().Now
	}
	f, err := newTree(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	srv, err := f.Mount(mnt, MountOptions{FsName: "fake", DirectMount: true})
	if err != nil {
		t.Fatalf("mount: %v (the tests need /dev/fuse and root)", err)
	}
	t.Cleanup(func() {
		if err := srv.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
		f.Close()
	})
	return f, srv, mnt
}

// waitFor polls cond every 5ms until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestParsePrefetchMode(t *testing.T) {
	for in, want := range map[string]features.PrefetchMode{"": features.PrefetchOff, "off": features.PrefetchOff, "DIR": features.PrefetchDir, " tree": features.PrefetchTree} {
		if got, err := features.ParsePrefetchMode(in); err != nil || got != want {
			t.Errorf("features.ParsePrefetchMode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := features.ParsePrefetchMode("all"); !errors.Is(err, features.ErrPrefetchMode) {
		t.Errorf("features.ParsePrefetchMode(all) = %v, want features.ErrPrefetchMode", err)
	}
}

// prefetchBucket holds images at several depths, a non-image and a bad
// image.
func prefetchBucket() *fakeBucket {
	b := newFakeBucket(2)
	for _, k := range []string{"top.jpg", "a/1.jpg", "a/2.png", "a/b/3.jpg", "c/4.jpeg", "c/d/e/5.jpg"} {
		b.put(k, []byte("img "+k))
	}
	b.put("a/notes.txt", []byte("text"))
	b.put("c/broken.jpg", []byte("BAD bytes"))
	return b
}

var prefetchImages = []string{"top.jpg", "a/1.jpg", "a/2.png", "a/b/3.jpg", "c/4.jpeg", "c/d/e/5.jpg"}

// TestPrefetchTree: reading a feature file of a layer directory extracts
// every image under it once, in the background; reads are then cache hits;
// the bad image is recorded and its read fails at once without another
// fetch.
func TestPrefetchTree(t *testing.T) {
	b := prefetchBucket()
	e := testMount(t, b, func(c *testConfig) { c.Prefetch = features.PrefetchConfig{Mode: features.PrefetchTree} })
	if _, err := os.ReadFile(e.path("features", "tiny", "layer1", "a", "1.npy")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the walk", func() bool { return e.fs.p.PrefetchStats().WalksDone >= 1 })
	for _, k := range prefetchImages {
		if n := e.x.CallsFor(k); n != 1 {
			t.Errorf("%s: %d extractions, want 1", k, n)
		}
	}
	if n := e.x.CallsFor("a/notes.txt"); n != 0 {
		t.Errorf("a non-image was extracted %d times", n)
	}
	st := e.fs.p.PrefetchStats()
	if st.Extracted != 5 || st.Cached != 1 || st.Failed != 1 || st.Objects != 7 || st.Walks != 1 {
		t.Errorf("prefetch stats %+v: want 5 extracted, 1 cached (the one read), 1 failed, 7 objects, 1 walk", st)
	}
	// The alias of layer1 shares its walk; layer0 gets its own.
	if _, err := os.ReadFile(e.path("features", "tiny", "pool", "top.npy")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadFile(e.path("features", "tiny", "layer0", "top.npy")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the layer0 walk", func() bool { return e.fs.p.PrefetchStats().WalksDone >= 2 })
	if st := e.fs.p.PrefetchStats(); st.Walks != 2 {
		t.Errorf("%d walks after touching layer1, its alias and layer0; want 2", st.Walks)
	}
	before := e.x.Calls.Load()
	for _, k := range []string{"a/1.npy", "a/b/3.npy", "c/d/e/5.npy"} {
		if _, err := os.ReadFile(e.path("features", "tiny", "layer1", k)); err != nil {
			t.Errorf("read %s: %v", k, err)
		}
	}
	if _, err := os.ReadFile(e.path("features", "tiny", "layer1", "c", "broken.npy")); !errors.Is(err, syscall.EIO) {
		t.Errorf("read of the bad image: %v, want EIO", err)
	}
	if n := e.x.Calls.Load() - before; n != 0 {
		t.Errorf("reads after prefetch extracted %d times, want 0 (cache hits and the negative cache)", n)
	}
}

// TestPrefetchDir: in dir mode the images of the directory of a feature
// file read are extracted, not those of its subdirectories or siblings;
// listing and looking up directories schedule nothing.
func TestPrefetchDir(t *testing.T) {
	b := prefetchBucket()
	e := testMount(t, b, func(c *testConfig) { c.Prefetch = features.PrefetchConfig{Mode: features.PrefetchDir} })
	if _, err := os.ReadDir(e.path("features", "tiny", "layer0", "c")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadFile(e.path("features", "tiny", "layer0", "a", "1.npy")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the walk", func() bool { return e.fs.p.PrefetchStats().WalksDone >= 1 })
	if st := e.fs.p.PrefetchStats(); st.Walks != 1 {
		t.Errorf("%d walks, want 1 (a/ only)", st.Walks)
	}
	got := map[string]int{}
	for _, k := range append(prefetchImages, "c/broken.jpg") {
		got[k] = e.x.CallsFor(k)
	}
	want := map[string]int{"a/1.jpg": 1, "a/2.png": 1}
	for k, n := range got {
		if n != want[k] {
			t.Errorf("%s: %d extractions, want %d", k, n, want[k])
		}
	}
}

// TestPrefetchOffIsOnDemand: with prefetch off nothing is extracted until a
// file is read.
func TestPrefetchOffIsOnDemand(t *testing.T) {
	b := prefetchBucket()
	e := testMount(t, b) // features.Config.Prefetch zero: off
	var walk func(dir string)
	walk = func(dir string) {
		des, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range des {
			if d.IsDir() {
				walk(filepath.Join(dir, d.Name()))
			} else if _, err := d.Info(); err != nil {
				t.Fatal(err)
			}
		}
	}
	walk(e.path("features", "tiny", "layer0"))
	time.Sleep(100 * time.Millisecond)
	if n := e.x.Calls.Load(); n != 0 {
		t.Fatalf("listing with prefetch off extracted %d times", n)
	}
	if _, err := os.ReadFile(e.path("features", "tiny", "layer0", "a", "1.npy")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if n := e.x.Calls.Load(); n != 1 {
		t.Errorf("one read with prefetch off: %d extractions, want 1", n)
	}
	if st := e.fs.p.PrefetchStats(); st.Mode != string(features.PrefetchOff) || st.Walks != 0 {
		t.Errorf("prefetch stats %+v", st)
	}
}

// TestPrefetchSkipsCachedAndStopsAtLimit: objects cached already are not
// sent again and do not count against the limit.
func TestPrefetchSkipsCachedAndStopsAtLimit(t *testing.T) {
	b := newFakeBucket(3)
	for i := range 20 {
		b.put(fmt.Sprintf("s/%02d.jpg", i), []byte(fmt.Sprint("img", i)))
	}
	shared := newFakeCache()
	e1 := testMount(t, b, func(c *testConfig) { c.Cache = shared })
	for i := range 5 {
		if _, err := os.ReadFile(e1.path("features", "tiny", "layer0", "s", fmt.Sprintf("%02d.npy", i))); err != nil {
			t.Fatal(err)
		}
	}
	e1.flushCacheWrites(t)
	e2 := testMount(t, b, func(c *testConfig) {
		c.Cache = shared
		c.Prefetch = features.PrefetchConfig{Mode: features.PrefetchTree, Limit: 100, ModelLimits: map[string]int{"tiny": 7}}
	})
	if _, err := os.ReadFile(e2.path("features", "tiny", "layer0", "s", "00.npy")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the walk", func() bool { return e2.fs.p.PrefetchStats().WalksDone >= 1 })
	st := e2.fs.p.PrefetchStats()
	if st.Cached != 5 || st.Extracted != 7 || st.WalksLimited != 1 {
		t.Errorf("prefetch stats %+v: want 5 cached, 7 extracted, 1 walk stopped by the limit", st)
	}
	for i := range 5 {
		if n := e2.x.CallsFor(fmt.Sprintf("s/%02d.jpg", i)); n != 0 {
			t.Errorf("cached s/%02d.jpg extracted again", i)
		}
	}
}

// TestPrefetchQueueJump: while a large prefetch keeps the extractor busy,
// a reader of a file not yet extracted, and one of a file queued in the
// background, each gets its feature within two batches of asking.
func TestPrefetchQueueJump(t *testing.T) {
	const objects = 3000
	b := newFakeBucket(1000)
	for i := range objects {
		b.put(fmt.Sprintf("d/%05d.jpg", i), []byte(fmt.Sprint("img", i)))
	}
	x := newBatchExtractor(t, 16, 5*time.Millisecond)
	f, _, mnt := mountFS(t, testConfig{pipelineConfig: pipelineConfig{Bucket: b, Extractor: x, Cache: newFakeCache(),
		Prefetch: features.PrefetchConfig{Mode: features.PrefetchTree, MaxInFlight: 64}}})
	layer := filepath.Join(mnt, "features", "tiny", "layer0")
	if _, err := os.ReadFile(filepath.Join(layer, "d", "00000.npy")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "prefetch to run 5 batches", func() bool { return x.batchesRun() >= 5 })

	read := func(i int) {
		t.Helper()
		key := fmt.Sprintf("d/%05d.jpg", i)
		b0 := x.batchesRun()
		t0 := time.Now()
		data, err := os.ReadFile(filepath.Join(layer, "d", fmt.Sprintf("%05d.npy", i)))
		took := time.Since(t0)
		if err != nil {
			t.Fatalf("read %s: %v", key, err)
		}
		if want := expectedNPY(x.Models()[0].Layers[0], []byte(fmt.Sprint("img", i)), x.DType()); string(data) != string(want) {
			t.Errorf("%s: wrong content", key)
		}
		ran, asked, ok := x.batchOf(key)
		if !ok {
			t.Fatalf("%s was never run", key)
		}
		st := f.p.PrefetchStats()
		t.Logf("read of %s: %d batches run when the read began, %d when it reached the extractor; ran in batch %d; took %v; prefetch extracted %d of %d",
			key, b0, asked, ran, took.Round(time.Millisecond), st.Extracted, objects)
		// The batch running when the request arrives finishes first; the
		// request is in the next one.
		if ran > asked+2 {
			t.Errorf("read of %s ran in batch %d, asked with %d started: waited more than one batch", key, ran, asked)
		}
		if st.WalksDone != 0 || st.Extracted >= objects-64 {
			t.Errorf("prefetch was done before the read finished (%+v): nothing was jumped", st)
		}
		if took > 10*time.Second {
			t.Errorf("read of %s took %v", key, took)
		}
	}
	read(objects - 1) // far beyond what prefetch has sent
	// One prefetch has already sent but not yet run: inside the window of
	// 64 in flight beyond what is done.
	ext := int(f.p.PrefetchStats().Extracted)
	queued := min(ext+48, objects-2)
	read(queued)
	x.mu.Lock()
	prios := x.prioOf[fmt.Sprintf("d/%05d.jpg", queued)]
	x.mu.Unlock()
	t.Logf("priorities asked for d/%05d.jpg: %v (0 = foreground, 1 = background)", queued, prios)
}

// TestPrefetchBoundedMemory: a walk of 10,000 objects with large features
// keeps at most its bounds in flight and queued, holds no results (the
// cache drops them here), and the heap stays far below what holding them
// would take; every object is extracted once.
func TestPrefetchBoundedMemory(t *testing.T) {
	const objects = 10_000
	b := newFakeBucket(1000)
	for i := range objects {
		b.put(fmt.Sprintf("many/%05d.jpg", i), []byte(fmt.Sprint("img", i)))
	}
	big := &api.Model{
		Name: "big", Digest: "b1g",
		Layers:     []api.Layer{{Index: 0, Name: "layer0", Tensor: "wide", Shape: []int64{16, 1024}}},
		Preprocess: api.Preprocess{Resize: 32, Crop: 32, Std: [3]float32{1, 1, 1}},
	}
	featureBytes := api.NPYSize(big.Layers[0].Shape, api.Float32) // 64 KiB
	const maxBytes = 8 << 20
	x := newBatchExtractor(t, 32, 0, big)
	c := newKeyCache()
	f, _, mnt := mountFS(t, testConfig{pipelineConfig: pipelineConfig{Bucket: b, Extractor: x, Cache: c,
		Prefetch: features.PrefetchConfig{Mode: features.PrefetchTree, MaxBytes: maxBytes, MaxQueued: 4}}})

	base, peak := leakcheck.PeakHeap(10*time.Millisecond, func() {
		if _, err := os.ReadFile(filepath.Join(mnt, "features", "big", "layer0", "many", "00000.npy")); err != nil {
			t.Error(err)
			return
		}
		waitFor(t, 120*time.Second, "the walk of 10,000 objects", func() bool { return f.p.PrefetchStats().WalksDone >= 1 })
		// The last features may still be queued for their cache write.
		waitFor(t, 60*time.Second, "the queued cache writes", func() bool { return f.Stats().FS.WriteQueued == 0 })
	})

	st := f.p.PrefetchStats()
	limit := 4 * x.batch // the default: 4 batches
	// The pipeline's estimate of one extraction's bytes (features' costOf):
	// the object, the decoded input at the crop (224 when unset), the feature.
	crop := int64(big.Preprocess.Crop)
	if crop <= 0 {
		crop = 224
	}
	cost := b.objectFor(t, "many/00000.jpg").Size + 3*crop*crop*4 + featureBytes
	t.Logf("prefetch: %+v; feature %d bytes, cost %d bytes; heap %d MiB at start, peak %d MiB",
		st, featureBytes, cost, base>>20, peak>>20)
	// The first object is extracted by the read that started the walk.
	if st.Extracted != objects-1 || st.Cached != 1 || x.extracts.Load() != objects || c.puts.Load() != objects {
		t.Errorf("prefetch extracted %d (cached %d), Extract calls %d, cache puts %d; want %d prefetched, 1 cached and %d each",
			st.Extracted, st.Cached, x.extracts.Load(), c.puts.Load(), objects-1, objects)
	}
	if st.InFlightLimit != limit || st.PeakInFlight > limit {
		t.Errorf("in flight: limit %d, peak %d; want limit %d (4 batches) and the peak within it", st.InFlightLimit, st.PeakInFlight, limit)
	}
	if st.PeakInFlightBytes > maxBytes {
		t.Errorf("peak bytes in flight %d, want <= %d", st.PeakInFlightBytes, maxBytes)
	}
	if st.PeakInFlight < 2*x.batch && int64(2*x.batch)*cost <= maxBytes {
		t.Errorf("peak in flight %d: the bounds allow %d, too few to fill batches", st.PeakInFlight, 2*x.batch)
	}
	if ws := f.Stats().FS; ws.WriteQueueMaxBytes != maxBytes || ws.WriteQueuePeakBytes > maxBytes {
		t.Errorf("cache write queue: peak %d bytes, bound %d; want the bound Prefetch.MaxBytes (%d) and the peak within it",
			ws.WriteQueuePeakBytes, ws.WriteQueueMaxBytes, maxBytes)
	}
	if st.PeakQueued > 4 {
		t.Errorf("peak walks queued %d, want <= 4", st.PeakQueued)
	}
	// Holding every feature would take objects*featureBytes (625 MiB).
	if grow := int64(peak) - int64(base); grow > 96<<20 {
		t.Errorf("heap grew by %d MiB during the walk, want < 96 MiB (holding the features would take %d MiB)",
			grow>>20, objects*featureBytes>>20)
	}
}

// objectFor returns the listed object of key.
func (b *fakeBucket) objectFor(t *testing.T, key string) bucket.Object {
	t.Helper()
	o, err := b.Stat(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// TestPrefetchStopsOnUnmount: unmounting (and closing the pipeline, as
// featurefs mount does once the mount is gone) cancels the walk and the
// extractions in flight; no Extract call happens afterwards and the
// prefetch goroutines are gone.
func TestPrefetchStopsOnUnmount(t *testing.T) {
	const objects = 5000
	b := newFakeBucket(1000)
	for i := range objects {
		b.put(fmt.Sprintf("u/%05d.jpg", i), []byte(fmt.Sprint("img", i)))
	}
	x := newBatchExtractor(t, 16, 2*time.Millisecond)
	baseline := runtime.NumGoroutine()
	f, srv, mnt := mountFS(t, testConfig{pipelineConfig: pipelineConfig{Bucket: b, Extractor: x, Cache: newFakeCache(),
		Prefetch: features.PrefetchConfig{Mode: features.PrefetchTree, MaxInFlight: 64}}})
	if _, err := os.ReadFile(filepath.Join(mnt, "features", "tiny", "layer0", "u", "00000.npy")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "prefetch to extract 100", func() bool { return f.p.PrefetchStats().Extracted >= 100 })
	during := runtime.NumGoroutine()
	if err := srv.Unmount(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	// Once unmounted, the tree closes, then its pipeline's owner closes the
	// pipeline (cmd/featurefs's stack, right after the mount is gone).
	go func() { f.Close(); f.p.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return 10s after unmount")
	}
	calls := x.extracts.Load()
	st := f.p.PrefetchStats()
	time.Sleep(200 * time.Millisecond)
	if n := x.extracts.Load(); n != calls {
		t.Errorf("%d Extract calls after unmount", n-calls)
	}
	if st.Extracted >= objects || st.InFlight != 0 || st.WalksDone != st.Walks {
		t.Errorf("after unmount: %+v; want the walk stopped early, nothing in flight", st)
	}
	var after int
	for range 100 {
		if after = runtime.NumGoroutine(); after <= baseline+2 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("goroutines: %d before mount, %d while prefetching, %d after unmount; %d of %d extracted, %d cancelled",
		baseline, during, after, st.Extracted, objects, st.Cancelled)
	if after > baseline+2 {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines after unmount, %d before mount:\n%s", after, baseline, buf[:runtime.Stack(buf, true)])
	}
	// A touch after Close schedules nothing.
	m := f.models[0]
	f.p.Touch(views.NewLayer(f.p, m, m.Layers[0], m.Layers[0].Name).View(), "")
	if st2 := f.p.PrefetchStats(); st2.Walks != st.Walks || st2.Queued != 0 {
		t.Errorf("a touch after Close scheduled a walk: %+v", st2)
	}
}

// TestWarm: Warm extracts everything under a prefix without a mount, lists
// the failed keys with reasons, reports monotone progress, and a second run
// finds everything cached.
func TestWarm(t *testing.T) {
	b := newFakeBucket(4)
	var want []string
	for i := range 15 {
		k := fmt.Sprintf("w/c%d/%02d.jpg", i%3, i)
		b.put(k, []byte(fmt.Sprint("img", i)))
		want = append(want, k)
	}
	b.put("w/c1/bad1.jpg", []byte("BAD one"))
	b.put("w/c2/x/bad2.png", []byte("BAD two"))
	b.put("w/readme.txt", []byte("text"))
	b.put("other/o.jpg", []byte("elsewhere"))
	x := newFakeExtractor()
	f, err := newTree(t, testConfig{pipelineConfig: pipelineConfig{Bucket: b, Extractor: x, Cache: newFakeCache(), NegativeTTL: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	var last features.WarmProgress
	var calls int
	res, err := f.p.Warm(context.Background(), features.WarmOptions{Model: "tiny", Layer: "pool", Prefix: "w", Progress: func(p features.WarmProgress) {
		if p.Done < last.Done || p.Total < last.Total || p.Done > p.Total {
			t.Errorf("progress went from %+v to %+v", last, p)
		}
		last = p
		calls++
	}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Total != 17 || res.Extracted != 15 || res.Failed != 2 || res.Cached != 0 || res.Done != 17 || res.Listing {
		t.Errorf("first warm: %+v", res.WarmProgress)
	}
	if last != res.WarmProgress || calls < 17 {
		t.Errorf("last progress %+v after %d calls; result %+v", last, calls, res.WarmProgress)
	}
	var failed []string
	for _, fl := range res.Failures {
		failed = append(failed, fl.Key)
		if !fl.BadObject || !strings.Contains(fl.Reason, "not an image") {
			t.Errorf("failure %+v: want a bad object with its reason", fl)
		}
	}
	sort.Strings(failed)
	if strings.Join(failed, ",") != "w/c1/bad1.jpg,w/c2/x/bad2.png" {
		t.Errorf("failures %v", failed)
	}
	for _, k := range want {
		if n := x.CallsFor(k); n != 1 {
			t.Errorf("%s extracted %d times", k, n)
		}
	}
	if n := x.CallsFor("other/o.jpg"); n != 0 {
		t.Errorf("an object outside the prefix was extracted")
	}

	// Resumed: the cache has everything; the bad ones fail from the
	// negative cache without being fetched.
	before := x.Calls.Load()
	res2, err := f.p.Warm(context.Background(), features.WarmOptions{Model: "tiny", Layer: "layer1", Prefix: "w/"})
	if err != nil {
		t.Fatal(err)
	}
	if res2.Cached != 15 || res2.Extracted != 0 || res2.Failed != 2 || len(res2.Failures) != 2 || x.Calls.Load() != before {
		t.Errorf("second warm: %+v, %d new extractions", res2, x.Calls.Load()-before)
	}

	if _, err := f.p.Warm(context.Background(), features.WarmOptions{Model: "nope", Layer: "layer1"}); !errors.Is(err, api.ErrUnknownModel) {
		t.Errorf("unknown model: %v", err)
	}
	if _, err := f.p.Warm(context.Background(), features.WarmOptions{Model: "tiny", Layer: "layer9"}); !errors.Is(err, api.ErrUnknownLayer) {
		t.Errorf("unknown layer: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := f.p.Warm(ctx, features.WarmOptions{Model: "tiny", Layer: "layer0"}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled warm: %v", err)
	}
}
