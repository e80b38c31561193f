package features

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/featurefs/featurefs/cache"
	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/internal/fakes"
	"github.com/featurefs/featurefs/fs/internal/leakcheck"
)

// blockingCache is an in-memory cache whose Puts chosen by block wait until
// its gate is closed; each blocked Put is announced on entered first.
type blockingCache struct {
	*fakes.Cache
	gate    chan struct{}
	entered chan string
	block   func(n int64) bool // whether the nth Put (from 1) blocks
	n       atomic.Int64
}

func newBlockingCache(block func(n int64) bool) *blockingCache {
	return &blockingCache{Cache: fakes.NewCache(), gate: make(chan struct{}), entered: make(chan string, 64), block: block}
}

func (c *blockingCache) Put(k cache.Key, v []byte) error {
	if c.block(c.n.Add(1)) {
		c.entered <- k.Object
		<-c.gate
	}
	return c.Cache.Put(k, v)
}

// stored reports whether the cache itself (not the queue) holds obj's
// feature at layer 0 of p.
func stored(t *testing.T, p *Pipeline, c *fakes.Cache, obj bucket.Object) bool {
	t.Helper()
	m, _ := p.cfg.Extractor.Model("tiny")
	_, ok, _ := c.Get(p.cacheKey(p.NewView(m, m.Layers[0]), obj))
	return ok
}

// within fails the test if fn has not returned after a long while (a
// deadlock guard, not a timing: fn is expected to return at once).
func within(t *testing.T, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not return in 10s: it waits for the cache write", what)
	}
}

// objects lists n objects of a local bucket ("o00.jpg"...), each with its
// own content.
func objects(t *testing.T, n int) (bucket.Bucket, []bucket.Object) {
	t.Helper()
	m := map[string]string{}
	for i := range n {
		m[fmt.Sprintf("o%02d.jpg", i)] = fmt.Sprintf("i%03d", i)
	}
	b, _ := localBucket(t, m)
	var objs []bucket.Object
	for i := range n {
		o, err := b.Stat(context.Background(), fmt.Sprintf("o%02d.jpg", i))
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, o)
	}
	return b, objs
}

// TestReadDoesNotWaitForCacheWrite: a read's feature is queued for the
// cache and the read returns while the cache write is still blocked; the
// feature, queued and not yet written, is then read again from the queue
// (Feature, the partial read, the presence test) with no second
// extraction, and counted as a cache hit; Close writes it.
func TestReadDoesNotWaitForCacheWrite(t *testing.T) {
	b, objs := objects(t, 1)
	x := newFakeExtractor()
	c := newBlockingCache(func(int64) bool { return true })
	p, err := New(Config{Bucket: b, Extractor: x, Cache: c, CacheWriters: 1})
	if err != nil {
		t.Fatal(err)
	}
	obj := objs[0]
	want := expectedNPY(testModel().Layers[0], []byte("i000"))
	var got []byte
	within(t, "a read", func() { got, err = p.Feature(context.Background(), "tiny", 0, obj) })
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read: %v, %q", err, got)
	}
	<-c.entered // the writer took it, and waits
	if stored(t, p, c.Cache, obj) {
		t.Fatal("the blocked Put stored the feature")
	}
	st := p.Stats().FS
	if st.WriteQueued != 1 || st.WriteQueuedBytes != int64(len(want)) || st.InlineWrites != 0 {
		t.Errorf("queue: %d features, %d bytes, %d inline; want 1, %d, 0", st.WriteQueued, st.WriteQueuedBytes, st.InlineWrites, len(want))
	}

	// Read again while its write is pending: from the queue.
	within(t, "a second read", func() { got, err = p.Feature(context.Background(), "tiny", 0, obj) })
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("second read: %v, %q", err, got)
	}
	m, _ := x.Model("tiny")
	v := p.NewView(m, m.Layers[0])
	dst := make([]byte, 8)
	if n, ok := p.ReadCachedAt(v, obj, dst, 4); !ok || n != 8 || !bytes.Equal(dst, want[4:12]) {
		t.Errorf("ReadCachedAt of a queued feature: %d, %v, %q; want 8 bytes of it", n, ok, dst[:n])
	}
	if !p.cached(p.cacheKey(v, obj)) {
		t.Error("a queued feature is not cached to prefetch's eyes: it would be extracted again")
	}
	if n := x.Calls.Load(); n != 1 {
		t.Errorf("%d extractions, want 1: a queued feature was computed again", n)
	}
	st = p.Stats().FS
	if st.CacheHits != 1 || st.CacheMisses != 1 || st.WriteQueueReads != 2 {
		t.Errorf("cache hits %d, misses %d, reads from the queue %d; want 1, 1, 2", st.CacheHits, st.CacheMisses, st.WriteQueueReads)
	}

	close(c.gate)
	p.Close()
	if !stored(t, p, c.Cache, obj) {
		t.Error("Close returned before the queued feature was written")
	}
	if st := p.Stats().FS; st.BackgroundWrites != 1 || st.WriteQueued != 0 || st.WriteQueuedBytes != 0 {
		t.Errorf("after Close: %d background writes, %d queued (%d bytes); want 1, 0, 0", st.BackgroundWrites, st.WriteQueued, st.WriteQueuedBytes)
	}
}

// TestCacheWriteQueueBound: with the writer stuck, reads fill the queue to
// its bound and no further; a reader whose feature does not fit gets it at
// once, not cached (skipped), and does not wait for room; prefetch-like
// producers (warm-up) wait for room within three quarters of the bound and
// cache what the readers skipped; the bytes queued never pass the bound,
// and every feature ends up in the cache.
func TestCacheWriteQueueBound(t *testing.T) {
	const n = 12
	b, objs := objects(t, n)
	size := int64(len(expectedNPY(testModel().Layers[0], []byte("i000"))))
	bound := 4 * size
	c := newBlockingCache(func(i int64) bool { return i == 1 }) // the writer's first Put sticks
	p, err := New(Config{Bucket: b, Extractor: newFakeExtractor(), Cache: c, CacheWriters: 1, CacheWriteBytes: bound})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := range 6 {
		within(t, fmt.Sprintf("read %d", i), func() {
			if _, err := p.Feature(context.Background(), "tiny", 0, objs[i]); err != nil {
				t.Fatal(err)
			}
		})
		if i == 0 {
			<-c.entered
		}
	}
	st := p.Stats().FS
	if st.WriteQueuedBytes != bound || st.WriteQueued != 4 || st.SkippedWrites != 2 || st.InlineWrites != 0 || st.WriteQueuePeakBytes != bound || st.WriteQueueMaxBytes != bound {
		t.Errorf("after 6 reads with the writer stuck: %d queued (%d bytes, peak %d, bound %d), %d skipped, %d inline; want 4 (%d bytes, peak %d), 2 skipped, 0 inline",
			st.WriteQueued, st.WriteQueuedBytes, st.WriteQueuePeakBytes, st.WriteQueueMaxBytes, st.SkippedWrites, st.InlineWrites, bound, bound)
	}
	for _, o := range objs[4:6] {
		if stored(t, p, c.Cache, o) {
			t.Errorf("%s: skipped, but in the cache", o.Key)
		}
	}

	// Warm-up (a background producer) waits for room: it cannot finish
	// while the writer is stuck; once the writer goes on, it does.
	warmed := make(chan error, 1)
	go func() {
		_, err := p.Warm(context.Background(), WarmOptions{Model: "tiny", Layer: "layer0"})
		warmed <- err
	}()
	for p.Stats().FS.WriteWaits == 0 {
		select {
		case err := <-warmed:
			t.Fatalf("warm-up returned (%v) with the queue full and the writer stuck", err)
		case <-time.After(time.Millisecond):
		}
	}
	close(c.gate)
	if err := <-warmed; err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if !stored(t, p, c.Cache, o) {
			t.Errorf("%s: not in the cache after warm-up returned", o.Key)
		}
	}
	st = p.Stats().FS
	if st.WriteQueuePeakBytes > bound || st.WriteQueued != 0 {
		t.Errorf("peak %d bytes queued (bound %d), %d queued at the end", st.WriteQueuePeakBytes, bound, st.WriteQueued)
	}
	if st.InlineWrites != 0 || st.BackgroundWrites != n {
		t.Errorf("%d inline and %d background writes; want none inline (warm-up never writes inline while it can wait) and %d: the readers' 4 queued, warm-up's 8 (the 2 skipped among them)",
			st.InlineWrites, st.BackgroundWrites, n)
	}
}

// TestCacheWriteQueueBoundUnderLoad: many concurrent readers and a slow
// cache: the bytes queued never pass the bound (the high-water mark is
// exact), a feature is extracted again only after a read of it was skipped
// (the queue full), every write is accounted for, Close leaves every
// queued feature stored and no goroutine behind. Run under -race.
func TestCacheWriteQueueBoundUnderLoad(t *testing.T) {
	defer leakcheck.Check(t)()
	const n = 40
	b, objs := objects(t, n)
	size := int64(len(expectedNPY(testModel().Layers[0], []byte("i000"))))
	bound := 5 * size
	c := &slowCache{Cache: fakes.NewCache()}
	x := newFakeExtractor()
	p, err := New(Config{Bucket: b, Extractor: x, Cache: c, CacheWriters: 2, CacheWriteBytes: bound})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for r := range 8 {
		wg.Go(func() {
			for i := range n {
				o := objs[(i+r*5)%n]
				got, err := p.Feature(context.Background(), "tiny", 0, o)
				if err != nil || !bytes.Equal(got, expectedNPY(testModel().Layers[0], []byte(fmt.Sprintf("i%03d", (i+r*5)%n)))) {
					t.Errorf("read %s: %v", o.Key, err)
				}
			}
		})
	}
	wg.Wait()
	p.Close()
	st := p.Stats().FS
	if st.WriteQueuePeakBytes > bound {
		t.Errorf("peak %d bytes queued, bound %d", st.WriteQueuePeakBytes, bound)
	}
	calls := x.Calls.Load()
	if calls < n || calls-n > st.SkippedWrites || c.Puts.Load() != st.BackgroundWrites+st.InlineWrites ||
		calls != st.BackgroundWrites+st.InlineWrites+st.SkippedWrites {
		t.Errorf("%d extractions, %d Puts (%d background, %d inline), %d skipped for %d features; want each extracted once more only per skip, every extraction written or skipped",
			calls, c.Puts.Load(), st.BackgroundWrites, st.InlineWrites, st.SkippedWrites, n)
	}
	cached := int64(0)
	for _, o := range objs {
		if stored(t, p, c.Cache, o) {
			cached++
		}
	}
	if cached != c.Puts.Load() {
		t.Errorf("%d features in the cache after Close, %d written", cached, c.Puts.Load())
	}
}

// slowCache yields in each Put, so that writes overlap reads.
type slowCache struct{ *fakes.Cache }

func (c *slowCache) Put(k cache.Key, v []byte) error {
	for range 50 {
		time.Sleep(0) // let readers run; no timing is measured
	}
	return c.Cache.Put(k, v)
}

// TestCloseDrainsCacheWrites: Close returns only once every queued feature
// is written, and nothing is written after (the cache's owner closes it
// then); a concurrent second Close waits for the same drain.
func TestCloseDrainsCacheWrites(t *testing.T) {
	b, objs := objects(t, 5)
	c := newBlockingCache(func(i int64) bool { return i == 1 })
	cc := &closingCache{Cache: c.Cache, t: t}
	p, err := New(Config{Bucket: b, Extractor: newFakeExtractor(), Cache: &drainCache{blockingCache: c, closing: cc}, CacheWriters: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range objs {
		if _, err := p.Feature(context.Background(), "tiny", 0, o); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			<-c.entered
		}
	}
	if st := p.Stats().FS; st.WriteQueued != 5 || st.InlineWrites != 0 {
		t.Fatalf("%d queued, %d inline; want 5 queued", st.WriteQueued, st.InlineWrites)
	}
	var closed sync.WaitGroup
	for range 2 {
		closed.Go(func() { p.Close() })
	}
	close(c.gate)
	closed.Wait()
	cc.closed.Store(true) // the owner closes the cache
	for _, o := range objs {
		if !stored(t, p, c.Cache, o) {
			t.Errorf("%s: Close returned before it was written", o.Key)
		}
	}
	if st := p.Stats().FS; st.BackgroundWrites != 5 || st.DroppedWrites != 0 {
		t.Errorf("%d background writes, %d dropped; want 5, 0", st.BackgroundWrites, st.DroppedWrites)
	}
}

// drainCache is a blockingCache that also fails the test on a Put after
// its closingCache is closed.
type drainCache struct {
	*blockingCache
	closing *closingCache
}

func (c *drainCache) Put(k cache.Key, v []byte) error {
	if c.closing.closed.Load() {
		return c.closing.Put(k, v)
	}
	return c.blockingCache.Put(k, v)
}

// TestCloseDrainTimeoutDropsAndWarns: a cache that never finishes a write
// does not hold Close past CacheDrainTimeout; the features never written
// are dropped, counted and named in one warning.
func TestCloseDrainTimeoutDropsAndWarns(t *testing.T) {
	b, objs := objects(t, 4)
	c := newBlockingCache(func(int64) bool { return true })
	defer close(c.gate)
	var logs bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	p, err := New(Config{Bucket: b, Extractor: newFakeExtractor(), Cache: c, CacheWriters: 1,
		CacheDrainTimeout: 50 * time.Millisecond, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range objs {
		if _, err := p.Feature(context.Background(), "tiny", 0, o); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			<-c.entered
		}
	}
	within(t, "Close with a stuck cache", func() { p.Close() })
	if st := p.Stats().FS; st.DroppedWrites != 3 || st.WriteQueued != 1 {
		t.Errorf("%d dropped, %d still queued (the one being written); want 3, 1", st.DroppedWrites, st.WriteQueued)
	}
	mu.Lock()
	out := logs.String()
	mu.Unlock()
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "dropped=3") || !strings.Contains(out, "writing=1") {
		t.Errorf("want one warning naming 3 dropped and 1 being written, logged: %s", out)
	}
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// TestWarmReturnsOnceWritten: Warm returns once everything it extracted
// is in the cache itself, not only queued.
func TestWarmReturnsOnceWritten(t *testing.T) {
	b, objs := objects(t, 10)
	c := &slowCache{Cache: fakes.NewCache()}
	p, err := New(Config{Bucket: b, Extractor: newFakeExtractor(), Cache: c, CacheWriters: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	res, err := p.Warm(context.Background(), WarmOptions{Model: "tiny", Layer: "layer0"})
	if err != nil || res.Extracted != int64(len(objs)) {
		t.Fatalf("warm: %+v, %v", res, err)
	}
	for _, o := range objs {
		if !stored(t, p, c.Cache, o) {
			t.Errorf("%s: Warm returned before its cache write", o.Key)
		}
	}
}

// TestCacheWriteModes: the queue's admission rules. A feature larger
// than the bound is never queued (written inline); a background producer
// queues up to three quarters of the bound and, past it, waits until its
// context ends (then writes inline); a foreground one takes the rest
// without waiting and, past the bound, is refused (noRoom: not cached);
// nothing is queued after close (written inline).
func TestCacheWriteModes(t *testing.T) {
	gate := make(chan struct{})
	taken := make(chan struct{}, 4)
	c := newCacheWriter(func(*pendingWrite) { taken <- struct{}{}; <-gate }, slog.New(slog.DiscardHandler), 100, 1)
	bg := context.Background()
	if c.enqueue(bg, &pendingWrite{id: "big", data: make([]byte, 101)}, false) != writeNow {
		t.Error("a feature larger than the bound was queued")
	}
	if c.enqueue(bg, &pendingWrite{id: "bg", data: make([]byte, 76)}, true) != writeNow {
		t.Error("a background feature over three quarters of the bound was queued")
	}
	if c.enqueue(bg, &pendingWrite{id: "a", data: make([]byte, 70)}, false) != queued {
		t.Fatal("a foreground feature within the bound was not queued")
	}
	<-taken
	if c.enqueue(bg, &pendingWrite{id: "a", data: make([]byte, 70)}, false) != queued {
		t.Error("a feature already queued was not recognized")
	}
	ctx, cancel := context.WithCancel(bg)
	waited := make(chan bool)
	go func() { waited <- c.enqueue(ctx, &pendingWrite{id: "b", data: make([]byte, 10)}, true) == queued }()
	for c.waits.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	if c.enqueue(bg, &pendingWrite{id: "c", data: make([]byte, 30)}, false) != queued {
		t.Error("a foreground feature that fits the bound (70+30 of 100) was not queued")
	}
	if c.enqueue(bg, &pendingWrite{id: "d", data: make([]byte, 1)}, false) != noRoom {
		t.Error("a foreground feature past the bound was not refused for want of room")
	}
	cancel()
	if <-waited {
		t.Error("a background producer whose context ended was queued past three quarters of the bound")
	}
	if st := c.stats(); st.WriteQueuedBytes != 100 || st.WriteQueuePeakBytes != 100 || st.WriteWaits != 1 {
		t.Errorf("queue %+v; want 100 bytes, peak 100, 1 wait", st)
	}
	close(gate)
	c.close(10 * time.Second)
	if c.enqueue(bg, &pendingWrite{id: "late", data: make([]byte, 1)}, false) != writeNow {
		t.Error("a feature was queued after close")
	}
	if st := c.stats(); st.WriteQueued != 0 || st.BackgroundWrites != 2 {
		t.Errorf("after close: %+v; want nothing queued, 2 written", st)
	}
}
