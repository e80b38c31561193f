package fs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/figures"
)

// faultyBucket fails Gets of keys containing "fail" with a store error and
// blocks Gets of keys containing "slow" until their context ends. It counts
// the Gets that succeed and their bytes: what the stats must report.
type faultyBucket struct {
	*fakeBucket
	okGets, okBytes *atomic.Int64
}

func (b faultyBucket) Get(ctx context.Context, key string, maxBytes int64) ([]byte, bucket.Object, error) {
	switch {
	case strings.Contains(key, "fail"):
		b.gets.Add(1)
		return nil, bucket.Object{}, fmt.Errorf("get %s: connection reset by peer", key)
	case strings.Contains(key, "slow"):
		b.gets.Add(1)
		<-ctx.Done()
		return nil, bucket.Object{}, fmt.Errorf("get %s: %w", key, ctx.Err())
	}
	data, obj, err := b.fakeBucket.Get(ctx, key, maxBytes)
	if err == nil {
		b.okGets.Add(1)
		b.okBytes.Add(int64(len(data)))
	}
	return data, obj, err
}

// queueExtractor reports fixed scheduler figures and fails objects whose
// key contains "odd" after fetching them. It counts its calls.
type queueExtractor struct {
	*fakeExtractor
	figures api.Stats
	calls   *atomic.Int64
}

func (x queueExtractor) Stats() api.Stats { return x.figures }

func (x queueExtractor) Extract(ctx context.Context, req api.Request) ([]byte, error) {
	x.calls.Add(1)
	if strings.Contains(req.Key, "odd") {
		if _, err := req.Fetch(ctx); err != nil {
			return nil, err
		}
		return nil, errors.New("model run failed")
	}
	return x.fakeExtractor.Extract(ctx, req)
}

// scenario is a mount after statsScenario's reads, with what the fakes saw.
type scenario struct {
	*env
	okGets, okBytes, calls atomic.Int64
	served                 int64 // bytes the good reads returned
}

// statsScenario mounts a bucket of five good objects and one of each error
// kind and reads everything once at the fake clock's start. A failed read
// may reach featurefs twice (the kernel retries a failed readahead with a
// plain read), so the expected figures come from the fakes' own counts.
func statsScenario(t *testing.T) *scenario {
	t.Helper()
	b := newFakeBucket(1000)
	for i := range 5 {
		b.put(fmt.Sprintf("d/%d.jpg", i), []byte(strings.Repeat("x", 10+i)))
	}
	b.put("d/bad.jpg", []byte("BAD image"))
	b.put("d/gone.jpg", []byte("deleted after listing"))
	b.put("d/fail.jpg", []byte("store error"))
	b.put("d/slow.jpg", []byte("past the read timeout"))
	b.put("d/odd.jpg", []byte("the model fails"))
	figures := api.Stats{Batches: 4, BatchedItems: 10, QueuedForeground: 2, QueuedBackground: 7,
		Decoded: 3, Running: 1, InFlight: 13}
	s := &scenario{}
	s.env = testMount(t, b, func(c *testConfig) {
		c.Bucket = faultyBucket{fakeBucket: b, okGets: &s.okGets, okBytes: &s.okBytes}
		c.ReadTimeout = 100 * time.Millisecond
		c.Extractor = queueExtractor{fakeExtractor: c.Extractor.(*fakeExtractor), figures: figures, calls: &s.calls}
	})
	dir := s.path("features", "tiny", "layer0", "d")
	if got := len(names(t, dir)); got != 10 {
		t.Fatalf("listing has %d names, want 10", got)
	}
	b.del("d/gone.jpg")
	for i := range 5 {
		data, err := os.ReadFile(s.path("features", "tiny", "layer0", "d", fmt.Sprintf("%d.npy", i)))
		if err != nil {
			t.Fatal(err)
		}
		s.served += int64(len(data))
	}
	for name, want := range map[string]error{"bad": syscall.EIO, "gone": syscall.ENOENT, "fail": syscall.EIO,
		"slow": syscall.EIO, "odd": syscall.EIO} {
		if _, err := os.ReadFile(s.path("features", "tiny", "layer0", "d", name+".npy")); !errors.Is(err, want) {
			t.Fatalf("read %s.npy: %v, want %v", name, err, want)
		}
	}
	// A bad object again: refused by the negative cache, counted again.
	if _, err := os.ReadFile(s.path("features", "tiny", "layer0", "d", "bad.npy")); !errors.Is(err, syscall.EIO) {
		t.Fatalf("second read of bad.npy: %v", err)
	}
	// A name the bucket does not hold is a plain ENOENT, not an error.
	if _, err := os.Stat(s.path("features", "tiny", "layer0", "d", "nosuch.npy")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stat nosuch.npy: %v", err)
	}
	return s
}

// readStatsFile reads and decodes MOUNT/.featurefs/stats.
func readStatsFile(t *testing.T, e *env) figures.Stats {
	t.Helper()
	b, err := os.ReadFile(e.path(".featurefs", "stats"))
	if err != nil {
		t.Fatal(err)
	}
	var st figures.Stats
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("stats file: %v\n%s", err, b)
	}
	return st
}

// rateWindow is the span the pipeline measures the extraction rate over
// (features' rateWindow).
const rateWindow = 10 * time.Second

func TestStatsFieldsAfterReads(t *testing.T) {
	s := statsScenario(t)
	st := readStatsFile(t, s.env)

	if st.Device != "fake" {
		t.Errorf("device = %q, want the extractor's", st.Device)
	}
	// Every kind was answered at least once per read that hit it, and at
	// most twice (readahead, then a plain read); the bad object was read
	// twice. Every EIO is counted under exactly one kind.
	for kind, n := range st.Errors.ByKind() {
		lo, hi := int64(1), int64(2)
		if kind == figures.ErrKindBadImage {
			lo, hi = 2, 4
		}
		if n < lo || n > hi {
			t.Errorf("errors[%s] = %d, want %d..%d", kind, n, lo, hi)
		}
	}
	if eio := st.Errors.Total() - st.Errors.NotFound; eio != st.FS.IOErrors {
		t.Errorf("errors other than not_found sum to %d, but %d reads were answered EIO", eio, st.FS.IOErrors)
	}
	if len(st.Errors.ByKind()) != len(figures.ErrorKinds()) {
		t.Errorf("ByKind has %d kinds, figures.ErrorKinds %d", len(st.Errors.ByKind()), len(figures.ErrorKinds()))
	}
	if st.Store.BytesFetched != s.okBytes.Load() || st.Store.BytesFetched == 0 {
		t.Errorf("bytes fetched = %d, the bucket returned %d", st.Store.BytesFetched, s.okBytes.Load())
	}
	if gets := s.b.gets.Load(); st.Store.Gets != gets || st.Store.GetErrors != gets-s.okGets.Load() {
		t.Errorf("store gets = %d (errors %d), the bucket saw %d Gets, %d failed", st.Store.Gets, st.Store.GetErrors, gets, gets-s.okGets.Load())
	}
	if st.Store.ListCalls != s.b.lists.Load() || st.Store.StatCalls != s.b.stats.Load() {
		t.Errorf("store list/stat calls %d/%d, the bucket saw %d/%d", st.Store.ListCalls, st.Store.StatCalls, s.b.lists.Load(), s.b.stats.Load())
	}
	if st.BytesServed != s.served || st.BytesServed != st.FS.ReadBytes {
		t.Errorf("bytes served = %d (fs.read_bytes %d), the reads returned %d", st.BytesServed, st.FS.ReadBytes, s.served)
	}
	if st.Extraction.Completed != 5 || st.Extraction.Failed != s.calls.Load()-5 {
		t.Errorf("extractions completed %d, failed %d; want 5 and %d", st.Extraction.Completed, st.Extraction.Failed, s.calls.Load()-5)
	}
	// Five features came out of the extractor, all in the clock's first
	// second: the rate over the one second since mount is 5/s.
	if st.Extraction.RatePerSecond != 5 || st.Extraction.RateWindowSeconds != 1 {
		t.Errorf("rate = %v/s over %vs, want 5/s over 1s", st.Extraction.RatePerSecond, st.Extraction.RateWindowSeconds)
	}
	if st.Extraction.MeanBatchSize != 2.5 || st.Extraction.Batches != 4 || st.Extraction.BatchedItems != 10 {
		t.Errorf("batching = %+v, want 10 items in 4 batches, mean 2.5", st.Extraction)
	}
	wantQ := figures.QueueStats{Foreground: 2, Background: 7, DecodedWaiting: 3, Running: 1, InFlight: 13}
	if st.Queue != wantQ {
		t.Errorf("queue = %+v, want %+v", st.Queue, wantQ)
	}
	if st.CacheHitRatio != 0 || st.FS.CacheMisses == 0 {
		t.Errorf("first reads: hit ratio %v with %d misses, want 0", st.CacheHitRatio, st.FS.CacheMisses)
	}

	// The rate follows the clock: 5 extractions over 5 s, then nothing in
	// the last full window.
	s.clock.Advance(5 * time.Second)
	if st := s.fs.Stats(); st.Extraction.RatePerSecond != 1 || st.Extraction.RateWindowSeconds != 5 {
		t.Errorf("after 5s: rate %v/s over %vs, want 1/s over 5s", st.Extraction.RatePerSecond, st.Extraction.RateWindowSeconds)
	}
	s.clock.Advance(30 * time.Second)
	if st := s.fs.Stats(); st.Extraction.RatePerSecond != 0 || st.Extraction.RateWindowSeconds != rateWindow.Seconds() {
		t.Errorf("after 35s idle: rate %v/s over %vs, want 0 over %v", st.Extraction.RatePerSecond, st.Extraction.RateWindowSeconds, rateWindow)
	}
}

// The tree counts the errors it answers itself (its counters, in fs): the
// pipeline below it, which a feature server reads through too, counts none
// of them, and the tree's Stats, the stats file's, has them all.
func TestTreeCountsItsOwnErrors(t *testing.T) {
	s := statsScenario(t)
	tree, pipe := s.fs.Stats(), s.fs.p.Stats()
	if pipe.Errors.Total() != 0 || pipe.FS.IOErrors != 0 || pipe.FS.Reads != 0 {
		t.Errorf("the pipeline counted the tree's figures: errors %+v, io_errors %d, reads %d", pipe.Errors, pipe.FS.IOErrors, pipe.FS.Reads)
	}
	if tree.Errors.Total() == 0 || tree.Errors.Total()-tree.Errors.NotFound != tree.FS.IOErrors {
		t.Errorf("the tree's errors %+v, io_errors %d: want its failed reads, each EIO counted once", tree.Errors, tree.FS.IOErrors)
	}
	if got, want := readStatsFile(t, s.env).Errors, s.fs.Stats().Errors; got != want {
		t.Errorf("the stats file's errors %+v, the tree's %+v", got, want)
	}
}

func TestStatsCacheHitRatio(t *testing.T) {
	b := newFakeBucket(1000)
	for i := range 4 {
		b.put(fmt.Sprintf("d/%d.jpg", i), []byte(fmt.Sprint("img", i)))
	}
	first := testMount(t, b)
	for i := range 3 {
		if _, err := os.ReadFile(first.path("features", "tiny", "layer1", "d", fmt.Sprintf("%d.npy", i))); err != nil {
			t.Fatal(err)
		}
	}
	// A second mount over the same cache: three hits, then one miss.
	first.flushCacheWrites(t)
	second := testMount(t, b, func(c *testConfig) { c.Cache = first.c })
	for i := range 4 {
		if _, err := os.ReadFile(second.path("features", "tiny", "layer1", "d", fmt.Sprintf("%d.npy", i))); err != nil {
			t.Fatal(err)
		}
	}
	st := readStatsFile(t, second)
	if st.FS.CacheHits != 3 || st.FS.CacheMisses != 1 || st.CacheHitRatio != 0.75 {
		t.Errorf("hits %d, misses %d, ratio %v; want 3, 1, 0.75", st.FS.CacheHits, st.FS.CacheMisses, st.CacheHitRatio)
	}
	if st.Store.Gets != 1 || st.Store.BytesFetched != int64(len("img3")) {
		t.Errorf("store: %+v, want one Get of img3", st.Store)
	}
}

// TestStatsReadSizesAndCPU: the stats file counts every READ of a feature
// file in the bucket of the size the kernel asked for (a small file's one
// page; a layer12-sized file's large requests), and reports the process's
// CPU seconds (the mount runs in this test's process, so its getrusage
// before and after the read brackets the figure).
func TestStatsReadSizesAndCPU(t *testing.T) {
	m := testModel()
	m.Layers = append(m.Layers, api.Layer{Index: 3, Name: "layer12", Tensor: "l12", Shape: []int64{64, 56, 56}, Bytes: 64 * 56 * 56 * 4})
	b := newFakeBucket(1000)
	b.put("x/1.jpg", []byte("one"))
	e := testMountWith(t, b, newFakeExtractor(m))
	total := func(r figures.ReadSizes) (n int64) {
		for _, c := range r.Counts() {
			n += c
		}
		return n
	}

	st0 := e.fs.Stats().FS
	if _, err := os.ReadFile(e.path("features", "tiny", "layer0", "x", "1.npy")); err != nil {
		t.Fatal(err)
	}
	st1 := e.fs.Stats().FS
	if n := st1.ReadSizes.Le4K - st0.ReadSizes.Le4K; n < 1 || total(st1.ReadSizes)-total(st0.ReadSizes) != n {
		t.Errorf("a %d-byte file: read sizes %+v -> %+v, want its reads all <= 4K", m.Layers[0].Bytes, st0.ReadSizes, st1.ReadSizes)
	}
	if reads := st1.Reads - st0.Reads; total(st1.ReadSizes)-total(st0.ReadSizes) != reads {
		t.Errorf("read sizes count %d requests, fs.reads %d", total(st1.ReadSizes)-total(st0.ReadSizes), reads)
	}

	if _, err := os.ReadFile(e.path("features", "tiny", "layer12", "x", "1.npy")); err != nil {
		t.Fatal(err)
	}
	st2 := e.fs.Stats().FS
	reads := st2.Reads - st1.Reads
	if got := total(st2.ReadSizes) - total(st1.ReadSizes); got != reads || reads < 1 {
		t.Errorf("read sizes count %d requests, fs.reads %d", got, reads)
	}
	// The file is 802,816 bytes in at most two requests (max_pages,
	// readahead: TestLayer12SizedFileIsOneOrTwoReads), so at least one
	// asked for more than 128K.
	if big := st2.ReadSizes.Le512K + st2.ReadSizes.Le1M - st1.ReadSizes.Le512K - st1.ReadSizes.Le1M; big < 1 {
		t.Errorf("a layer12-sized file: read sizes %+v -> %+v, want a request over 128K", st1.ReadSizes, st2.ReadSizes)
	}

	// The stats file shows the same buckets under fs.read_sizes, and the
	// process's CPU seconds.
	cpu := func() float64 {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
	}
	before := cpu()
	raw, err := os.ReadFile(e.path(".featurefs", "stats"))
	if err != nil {
		t.Fatal(err)
	}
	after := cpu()
	var doc struct {
		CPUSeconds *float64 `json:"cpu_seconds"`
		FS         struct {
			ReadSizes map[string]int64 `json:"read_sizes"`
		} `json:"fs"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("stats file: %v\n%s", err, raw)
	}
	if doc.CPUSeconds == nil || *doc.CPUSeconds < before || *doc.CPUSeconds > after || *doc.CPUSeconds <= 0 {
		t.Errorf("cpu_seconds %v, want within the process's %v..%v", doc.CPUSeconds, before, after)
	}
	counts := st2.ReadSizes.Counts()
	if len(doc.FS.ReadSizes) != len(figures.ReadSizeLabels) {
		t.Errorf("fs.read_sizes has %d buckets %v, want %v", len(doc.FS.ReadSizes), doc.FS.ReadSizes, figures.ReadSizeLabels)
	}
	for i, l := range figures.ReadSizeLabels {
		if n, ok := doc.FS.ReadSizes[l]; !ok || n != counts[i] {
			t.Errorf("fs.read_sizes.%s = %d (present %v), want %d", l, n, ok, counts[i])
		}
	}
}

func TestReadSizeBucket(t *testing.T) {
	for _, c := range []struct{ size, want int }{
		{0, 0}, {1, 0}, {4096, 0}, {4097, 1}, {32 << 10, 1}, {32<<10 + 1, 2}, {128 << 10, 2},
		{128<<10 + 1, 3}, {512 << 10, 3}, {512<<10 + 1, 4}, {1 << 20, 4}, {1<<20 + 1, 5}, {64 << 20, 5},
	} {
		if got := figures.ReadSizeBucket(c.size); got != c.want {
			t.Errorf("ReadSizeBucket(%d) = %d (%s), want %d (%s)", c.size, got, figures.ReadSizeLabels[got], c.want, figures.ReadSizeLabels[c.want])
		}
	}
}
