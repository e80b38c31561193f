package fs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"github.com/featurefs/featurefs/fs/figures"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/fs/namespace"
	"github.com/featurefs/featurefs/fs/views"
)

// TestFilesAreNeverOpened reads feature files, the layer table and the
// stats file many times: the kernel sends one OPEN for the whole mount
// (noOpen's ENOSYS stops it), every read returns the right bytes, and the
// stats file still shows fresh figures on each read.
func TestFilesAreNeverOpened(t *testing.T) {
	b := newFakeBucket(1000)
	for _, k := range []string{"d/1.jpg", "d/2.jpg", "d/3.jpg"} {
		b.put(k, []byte(k))
	}
	e := testMount(t, b)
	l := e.x.Models()[0].Layers[0]
	for range 10 {
		for _, n := range []string{"1", "2"} {
			got, err := os.ReadFile(e.path("features", "tiny", l.Name, "d", n+".npy"))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, expectedNPY(l, []byte("d/"+n+".jpg"), e.x.DType())) {
				t.Fatalf("%s.npy: wrong content", n)
			}
		}
		if _, err := os.ReadFile(e.path("features", "tiny", "layers")); err != nil {
			t.Fatal(err)
		}
	}
	readStats := func() figures.Stats {
		t.Helper()
		time.Sleep(20 * time.Millisecond) // past the kernel's clock tick (statsAttrTimeout)
		b, err := os.ReadFile(e.path(".featurefs", "stats"))
		if err != nil {
			t.Fatal(err)
		}
		var st figures.Stats
		if err := json.Unmarshal(b, &st); err != nil {
			t.Fatalf("stats: %v\n%s", err, b)
		}
		return st
	}
	before := readStats()
	if _, err := os.ReadFile(e.path("features", "tiny", l.Name, "d", "3.npy")); err != nil {
		t.Fatal(err)
	}
	after := readStats()
	if after.FS.Reads <= before.FS.Reads || after.FS.Extractions != before.FS.Extractions+1 {
		t.Errorf("stats file read after a new file's read: reads %d -> %d, extractions %d -> %d; want both up",
			before.FS.Reads, after.FS.Reads, before.FS.Extractions, after.FS.Extractions)
	}
	if n := e.fs.Stats().FS.Opens; n != 1 {
		t.Errorf("%d OPEN requests for 24 opens of 4 files; want 1 (the first, answered ENOSYS)", n)
	}
}

// TestDroppedPagesReadPartOfTheCachedFeature reads a file, then reads it
// through a second mount over the same cache (a restart: the feature is
// not in its memory), makes the kernel drop its pages (as memory pressure
// does) and reads it again: those reads copy what they ask for out of the
// cache (ReadAt), not the whole feature (Get), and compute nothing. (In
// the mount that computed it, the feature's next reads copy it from
// memory: TestComputedFeatureNextReadsFromMemory.)
func TestDroppedPagesReadPartOfTheCachedFeature(t *testing.T) {
	b := newFakeBucket(1000)
	b.put("d/1.jpg", []byte("one"))
	first := testMount(t, b)
	l := first.x.Models()[0].Layers[0]
	want := expectedNPY(l, []byte("one"), first.x.DType())
	if got, err := os.ReadFile(first.path("features", "tiny", l.Name, "d", "1.npy")); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("first read: %v", err)
	}
	first.flushCacheWrites(t)
	e := testMount(t, b, func(c *testConfig) { c.Cache = first.c })
	e.c = first.c
	p := e.path("features", "tiny", l.Name, "d", "1.npy")
	if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read through the second mount: %v", err)
	}
	calls, hits := e.x.Calls.Load(), e.c.Hits.Load()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const fadvDontNeed = 4
	if _, _, errno := syscall.Syscall6(syscall.SYS_FADVISE64, f.Fd(), 0, 0, fadvDontNeed, 0, 0); errno != 0 {
		t.Fatal(errno)
	}
	got, err := os.ReadFile(p)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read after the pages were dropped: %v, right bytes %v", err, bytes.Equal(got, want))
	}
	if e.x.Calls.Load() != calls || e.c.Hits.Load() != hits || e.c.PartReads.Load() == 0 {
		t.Errorf("read after the pages were dropped: %d extractions, %d whole reads, %d part reads of the cache; want 0, 0, some",
			e.x.Calls.Load()-calls, e.c.Hits.Load()-hits, e.c.PartReads.Load())
	}
	if n := e.fs.Stats().FS.CachePartialReads; n == 0 {
		t.Error("stats: no partial reads counted")
	}
}

// slowFailingExtractor fails every extraction after a delay, counting them.
type slowFailingExtractor struct {
	*fakeExtractor
	delay time.Duration
	calls atomic.Int64
}

func (x *slowFailingExtractor) Extract(ctx context.Context, req api.Request) ([]byte, error) {
	x.calls.Add(1)
	time.Sleep(x.delay)
	return nil, errors.New("the model crashed")
}

// TestSlowFailureAnswersOnlyTheKernelsRetry: a read whose computation fails
// slowly answers the kernel's one retry of that request (a read within it)
// with the same error at once, and a read after that computes again.
func TestSlowFailureAnswersOnlyTheKernelsRetry(t *testing.T) {
	b := newFakeBucket(10)
	b.put("d/a.jpg", []byte("a"))
	x := &slowFailingExtractor{fakeExtractor: newFakeExtractor(), delay: 2 * namespace.SlowFailure}
	f, err := newTree(t, testConfig{pipelineConfig: pipelineConfig{Bucket: b, Extractor: x, Cache: newFakeCache(), MetadataTTL: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := f.models[0]
	lv := views.NewLayer(f.p, m, m.Layers[0], m.Layers[0].Name)
	ff := &featureFile{fs: f, view: lv, fv: lv.View(), prefix: "d/", name: "a.npy", obj: b.objectFor(t, "d/a.jpg")}
	read := func(off int64, size int) (syscall.Errno, time.Duration) {
		t0 := time.Now()
		_, errno := ff.Read(context.Background(), nil, make([]byte, size), off)
		return errno, time.Since(t0)
	}
	// Readahead: two requests, failing together.
	var wg sync.WaitGroup
	for _, off := range []int64{0, 128 << 10} {
		wg.Go(func() {
			if errno, _ := read(off, 128<<10); errno != syscall.EIO {
				t.Errorf("readahead at %d: %v, want EIO", off, errno)
			}
		})
	}
	wg.Wait()
	calls := x.calls.Load()
	// The kernel's retry of the first page: the same error, at once.
	if errno, took := read(0, 4096); errno != syscall.EIO || took >= namespace.SlowFailure || x.calls.Load() != calls {
		t.Errorf("retry of the failed request: %v after %v, %d more extractions; want EIO at once, none",
			errno, took, x.calls.Load()-calls)
	}
	// A new read(2): computes again.
	if errno, _ := read(0, 4096); errno != syscall.EIO || x.calls.Load() == calls {
		t.Errorf("a read after the retry: %v, %d more extractions; want a new try", errno, x.calls.Load()-calls)
	}
	calls = x.calls.Load()
	// After namespace.FailMemo, the other request's retry is a new try too.
	time.Sleep(namespace.FailMemo)
	if _, _ = read(128<<10, 4096); x.calls.Load() == calls {
		t.Error("a read after namespace.FailMemo did not try again")
	}
}
