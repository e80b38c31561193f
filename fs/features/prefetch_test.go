package features

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/fs/internal/fakes"
)

// TestPrefetchByteBoundFollowsBatches: unset, prefetch's byte bound holds
// its in-flight bound of extractions (a GPU's 4 x 256 layer12 ones,
// about 1.5 MB each, where a fixed 256 MiB held fewer than one batch, as
// measured on an H100), at least 256 MiB and at most 2 GiB; set, it is
// what was set.
func TestPrefetchByteBoundFollowsBatches(t *testing.T) {
	const layer12 = 110_000 + 3*224*224*4 + 802_944 // object, decoded input, feature
	for _, c := range []struct {
		name     string
		inFlight int
		set      int64
		cost     int64
		want     int64
	}{
		{"GPU layer12", 1024, 0, layer12, 1024 * layer12},
		{"CPU layer12", 32, 0, layer12, defaultPrefetchBytes},
		{"huge features", 1024, 0, 8 << 20, maxAutoPrefetchBytes},
		{"set", 1024, 64 << 20, layer12, 64 << 20},
	} {
		p := &prefetcher{cfg: PrefetchConfig{MaxInFlight: c.inFlight, MaxBytes: c.set}}
		if got := p.maxBytes(p.maxInFlight(), c.cost); got != c.want {
			t.Errorf("%s: byte bound %d, want %d", c.name, got, c.want)
		}
		if got := p.maxBytes(p.maxInFlight(), c.cost); c.name == "GPU layer12" && got/c.cost < 256 {
			t.Errorf("%s: the bound holds %d extractions, less than a batch of 256", c.name, got/c.cost)
		}
	}
	b := newBudget(func() int { return 1024 }, (&prefetcher{cfg: PrefetchConfig{MaxInFlight: 1024}}).maxBytes)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // acquire then takes what fits and returns at once when nothing does
	for range 300 {
		if b.acquire(ctx, layer12) != nil {
			break
		}
	}
	if n, _, _, _, maxB := b.figures(); n < 256 || maxB != 1024*layer12 {
		t.Errorf("a budget of the GPU's bound took %d layer12 extractions (bound %d bytes), want at least a batch of 256", n, maxB)
	}
}

// statsUnderLock is an extractor whose Stats reports whether the
// prefetcher's batchMu was held when it was called.
type statsUnderLock struct {
	*fakeExtractor
	pf   *prefetcher
	held []bool
}

func (x *statsUnderLock) Stats() api.Stats {
	free := x.pf.batchMu.TryLock()
	if free {
		x.pf.batchMu.Unlock()
	}
	x.held = append(x.held, !free)
	return api.Stats{BatchSizes: map[string]int{"tiny": 8}}
}

// TestPrefetchBoundReadsStatsUnlocked: the in-flight bound follows the
// extractor's batch sizes, read with no lock held (docs/ARCHITECTURE.md,
// "Locks": no lock is held across a call into the extractor), and read
// again only after batchRefresh.
func TestPrefetchBoundReadsStatsUnlocked(t *testing.T) {
	x := &statsUnderLock{fakeExtractor: newFakeExtractor()}
	x.pf = &prefetcher{pipe: &Pipeline{cfg: Config{Extractor: x}}}
	if got, want := x.pf.maxInFlight(), min(max(4*8, minPrefetchInFlight), maxPrefetchInFlight); got != want {
		t.Errorf("in-flight bound %d, want %d (4 batches of 8)", got, want)
	}
	x.pf.maxInFlight() // within batchRefresh: the size found is used
	if len(x.held) != 1 || x.held[0] {
		t.Errorf("Stats calls (true: batchMu held) %v, want one, unlocked", x.held)
	}
}

// TestPrefetchedFeatureReadFromHandoff: a feature prefetch computed reaches
// its reader from memory (the hand-off buffer), not through the cache's
// compress-then-decompress round trip: the reads copy it without asking the
// cache, and the read that reaches its end frees it, so the next read of
// the file (pages the kernel dropped) is the cache's.
func TestPrefetchedFeatureReadFromHandoff(t *testing.T) {
	b, _ := localBucket(t, map[string]string{"d/a.jpg": "abcdefgh", "d/b.jpg": "ijklmnop"})
	x, c := newFakeExtractor(), fakes.NewCache()
	p, err := New(Config{Bucket: b, Extractor: x, Cache: c, Prefetch: PrefetchConfig{Mode: PrefetchTree}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	m, _ := x.Model("tiny")
	v := p.NewView(m, m.Layers[0])
	p.Touch(v, "")
	deadline := time.Now().Add(10 * time.Second)
	for c.Stats().Puts < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("prefetch stored %d features in 10s, want 2", c.Stats().Puts)
		}
		time.Sleep(time.Millisecond)
	}
	obj, err := b.Stat(context.Background(), "d/b.jpg")
	if err != nil {
		t.Fatal(err)
	}
	want := expectedNPY(m.Layers[0], []byte("ijklmnop"))
	got := make([]byte, 0, len(want))
	for off := 0; off < len(want); {
		dst := make([]byte, min(50, len(want)-off)) // the file in several reads
		n, ok := p.ReadCachedAt(v, obj, dst, int64(off))
		if !ok || n == 0 {
			t.Fatalf("read at %d: %d bytes, ok %v", off, n, ok)
		}
		got, off = append(got, dst[:n]...), off+n
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the handed-off feature differs from the extractor's")
	}
	if n := c.PartReads.Load(); n != 0 {
		t.Errorf("reads of a prefetched feature asked the cache %d times, want 0 (from memory)", n)
	}
	if st := p.Stats(); st.FS.HandoffReads < 2 || st.FS.CachePartialReads != 0 {
		t.Errorf("handoff_reads %d, cache_partial_reads %d; want every read from the hand-off", st.FS.HandoffReads, st.FS.CachePartialReads)
	}
	dst := make([]byte, len(want))
	if n, ok := p.ReadCachedAt(v, obj, dst, 0); !ok || n != len(want) || c.PartReads.Load() != 1 {
		t.Errorf("a read after the end: %d bytes, ok %v, %d cache reads; want it from the cache", n, ok, c.PartReads.Load())
	}
}

// keyGated is an extractor whose Extract of a key in gates waits for that
// gate, after reporting the key on entered.
type keyGated struct {
	*fakeExtractor
	gates   map[string]chan struct{}
	entered chan string
}

func (k *keyGated) Extract(ctx context.Context, req api.Request) ([]byte, error) {
	if g, ok := k.gates[req.Key]; ok {
		k.entered <- req.Key
		<-g
	}
	return k.fakeExtractor.Extract(ctx, req)
}

// TestPrefetchSkipsWhatAReaderComputedWhileItWaited: a walk that waits for
// room in its budget (one extraction in flight, held by d/a.jpg) looks at
// the cache again once it has room: d/b.jpg, which a reader computed
// meanwhile, is not extracted a second time (before: it was, the walk
// having looked only before it waited; bench-augment counted 5 such
// duplicates in 1280 extractions).
func TestPrefetchSkipsWhatAReaderComputedWhileItWaited(t *testing.T) {
	b, _ := localBucket(t, map[string]string{"d/a.jpg": "abcdefgh", "d/b.jpg": "ijklmnop"})
	gate := make(chan struct{})
	x := &keyGated{fakeExtractor: newFakeExtractor(), gates: map[string]chan struct{}{"d/a.jpg": gate}, entered: make(chan string, 4)}
	p, err := New(Config{Bucket: b, Extractor: x, Cache: fakes.NewCache(), Prefetch: PrefetchConfig{Mode: PrefetchDir, MaxInFlight: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	m, _ := x.Model("tiny")
	v := p.NewView(m, m.Layers[0])
	p.Touch(v, "d/")
	select {
	case <-x.entered: // the walk holds its one slot with d/a.jpg
	case <-time.After(10 * time.Second):
		t.Fatal("prefetch did not start d/a.jpg")
	}
	deadline := time.Now().Add(10 * time.Second)
	for p.PrefetchStats().Objects < 2 { // the walk reached d/b.jpg and waits for room
		if time.Now().After(deadline) {
			t.Fatal("the walk did not reach d/b.jpg")
		}
		time.Sleep(time.Millisecond)
	}
	obj, err := b.Stat(context.Background(), "d/b.jpg")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Read(context.Background(), v, obj); err != nil {
		t.Fatal(err)
	}
	close(gate)
	for st := p.PrefetchStats(); st.WalksDone < 1; st = p.PrefetchStats() {
		if time.Now().After(deadline) {
			t.Fatalf("the walk did not end: %+v", st)
		}
		time.Sleep(time.Millisecond)
	}
	if n := x.CallsFor("d/b.jpg"); n != 1 {
		t.Errorf("d/b.jpg extracted %d times (a reader's, then the walk's), want 1", n)
	}
}

// TestReadTakesAHandedOffFeature: a read whose feature prefetch has just
// handed off, and not yet queued for the cache (handOff comes first), takes
// it from the hand-off buffer instead of extracting it again.
func TestReadTakesAHandedOffFeature(t *testing.T) {
	b, _ := localBucket(t, map[string]string{"d/a.jpg": "abcdefgh"})
	x := newFakeExtractor()
	p, err := New(Config{Bucket: b, Extractor: x, Cache: fakes.NewCache()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	m, _ := x.Model("tiny")
	v := p.NewView(m, m.Layers[0])
	obj, err := b.Stat(context.Background(), "d/a.jpg")
	if err != nil {
		t.Fatal(err)
	}
	want := expectedNPY(m.Layers[0], []byte("abcdefgh"))
	p.handOff(string(p.cacheKey(v, obj).ID()), want)
	got, err := p.Read(context.Background(), v, obj)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read: %v, the handed-off bytes: %v", err, bytes.Equal(got, want))
	}
	if n := x.Calls.Load(); n != 0 {
		t.Errorf("%d extractions of a handed-off feature, want 0", n)
	}
}
