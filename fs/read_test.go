package fs

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"

	"github.com/featurefs/featurefs/extractor/api"
	"github.com/featurefs/featurefs/fs/views"
)

func TestSizeEqualsBytesRead(t *testing.T) {
	b := newFakeBucket(1000)
	b.put("x/1.jpg", []byte("one"))
	e := testMount(t, b)
	for _, l := range e.x.Models()[0].Layers {
		p := e.path("features", "tiny", l.Name, "x", "1.npy")
		before := e.x.Calls.Load()
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if e.x.Calls.Load() != before {
			t.Fatalf("stat of %s extracted", l.Name)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() != int64(len(data)) {
			t.Errorf("%s: stat size %d, read %d bytes", l.Name, st.Size(), len(data))
		}
		if !bytes.Equal(data, expectedNPY(l, []byte("one"), e.x.DType())) {
			t.Errorf("%s: content differs from the extractor's", l.Name)
		}
		if st.Mode().Perm() != 0o444 {
			t.Errorf("mode %v", st.Mode())
		}
	}
}

func TestReadsUseCacheAndShareExtraction(t *testing.T) {
	b := newFakeBucket(1000)
	for i := range 8 {
		b.put(fmt.Sprintf("d/%d.jpg", i), []byte(fmt.Sprint("img", i)))
	}
	e := testMount(t, b)
	var wg sync.WaitGroup
	for r := range 4 {
		for i := range 8 {
			wg.Go(func() {
				p := e.path("features", "tiny", "layer0", "d", fmt.Sprintf("%d.npy", i))
				f, err := os.Open(p)
				if err != nil {
					t.Error(err)
					return
				}
				defer f.Close()
				// Small reads at scattered offsets, reader r starting elsewhere.
				buf := make([]byte, 7)
				var got []byte
				for off := int64(0); ; off += 7 {
					n, err := f.ReadAt(buf, off)
					got = append(got, buf[:n]...)
					if err == io.EOF {
						break
					}
					if err != nil {
						t.Error(err)
						return
					}
				}
				if !bytes.Equal(got, expectedNPY(e.x.Models()[0].Layers[0], []byte(fmt.Sprint("img", i)), e.x.DType())) {
					t.Errorf("reader %d file %d: wrong content", r, i)
				}
			})
		}
	}
	wg.Wait()
	for i := range 8 {
		if n := e.x.CallsFor(fmt.Sprintf("d/%d.jpg", i)); n != 1 {
			t.Errorf("object %d extracted %d times, want 1", i, n)
		}
	}
	// A new tree over the same cache reads without extracting.
	e.flushCacheWrites(t)
	x2 := e.x.Calls.Load()
	e2 := testMount(t, b, func(c *testConfig) { c.Cache = e.c })
	if _, err := os.ReadFile(e2.path("features", "tiny", "layer0", "d", "3.npy")); err != nil {
		t.Fatal(err)
	}
	if e2.x.Calls.Load() != 0 || e.x.Calls.Load() != x2 {
		t.Errorf("a cached feature was extracted again")
	}
}

// TestSecondReaderOfAFileIsInterruptible: while the first read of a file
// computes its feature, a second read of the same file waits for it but can
// be interrupted on its own; the first read then gets the feature, and a
// later read finds it without computing again.
func TestSecondReaderOfAFileIsInterruptible(t *testing.T) {
	b := newFakeBucket(10)
	b.put("d/a.jpg", []byte("a"))
	gate := make(chan struct{})
	f, err := newTree(t, testConfig{pipelineConfig: pipelineConfig{Bucket: b, Extractor: gatedExtractor{newFakeExtractor(), gate}, Cache: newFakeCache(), MetadataTTL: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := f.models[0]
	obj := b.objectFor(t, "d/a.jpg")
	lv := views.NewLayer(f.p, m, m.Layers[0], m.Layers[0].Name)
	ff := &featureFile{fs: f, view: lv, fv: lv.View(), prefix: "d/", name: "a.npy", obj: obj}
	var h gofs.FileHandle // reads come without a handle (noOpen)
	first := make(chan syscall.Errno, 1)
	go func() {
		_, errno := ff.Read(context.Background(), h, make([]byte, 16), 0)
		first <- errno
	}()
	time.Sleep(50 * time.Millisecond) // the first read is computing
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	if _, errno := ff.Read(ctx, h, make([]byte, 16), 0); errno != syscall.EINTR {
		t.Errorf("interrupted second read: %v, want EINTR", errno)
	}
	if took := time.Since(t0); took > 2*time.Second {
		t.Errorf("the interrupted second read returned after %v", took)
	}
	close(gate)
	if errno := <-first; errno != 0 {
		t.Errorf("first read: %v", errno)
	}
	calls := f.p.Stats().FS.Extractions
	if _, errno := ff.Read(context.Background(), h, make([]byte, 16), 16); errno != 0 {
		t.Errorf("a read after the computation: %v", errno)
	}
	if n := f.p.Stats().FS.Extractions; n != calls {
		t.Errorf("a read after the computation extracted again (%d extractions, were %d)", n, calls)
	}
}

// gatedExtractor extracts as fakeExtractor does once gate is closed.
type gatedExtractor struct {
	*fakeExtractor
	gate chan struct{}
}

func (x gatedExtractor) Extract(ctx context.Context, req api.Request) ([]byte, error) {
	select {
	case <-x.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return x.fakeExtractor.Extract(ctx, req)
}

// TestLayer12SizedFileIsOneOrTwoReads reads a feature file of ResNet-50
// layer12's size (802,944 bytes) with one read(2) of its size, as np.load
// does: the mount's READs are as large as the kernel allows (maxRead), so
// the kernel sends it in at most two requests, not the nine of 128KiB it
// sent before. Read as np.load reads it (Python's buffered first read of
// st_blksize bytes, then the rest), it is at most two requests too: the
// files' st_blksize is a whole READ (it was 4096, and the kernel's
// readahead then grew from a few pages: five requests).
func TestLayer12SizedFileIsOneOrTwoReads(t *testing.T) {
	m := testModel()
	m.Layers = []api.Layer{{Index: 0, Name: "layer12", Tensor: "l12", Shape: []int64{64, 56, 56}, Bytes: 64 * 56 * 56 * 4}}
	b := newFakeBucket(1000)
	b.put("x/1.jpg", []byte("one"))
	b.put("x/2.jpg", []byte("two"))
	e := testMountWith(t, b, newFakeExtractor(m))
	p := e.path("features", "tiny", "layer12", "x", "1.npy")
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	before := e.fs.Stats().FS.Reads
	data := make([]byte, st.Size())
	if _, err := io.ReadFull(f, data); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, expectedNPY(m.Layers[0], []byte("one"), e.x.DType())) {
		t.Fatal("content differs from the extractor's")
	}
	if n := e.fs.Stats().FS.Reads - before; n > 2 {
		t.Errorf("a %d-byte file took %d FUSE reads, want at most 2", st.Size(), n)
	}

	// np.load's pattern: Python's buffered open() reads st_blksize bytes
	// first, then numpy reads the rest in one read(2).
	p2 := e.path("features", "tiny", "layer12", "x", "2.npy")
	var sys syscall.Stat_t
	if err := syscall.Stat(p2, &sys); err != nil {
		t.Fatal(err)
	}
	f2, err := os.Open(p2)
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Close()
	before = e.fs.Stats().FS.Reads
	first := make([]byte, sys.Blksize)
	n1, err := io.ReadFull(f2, first[:min(int64(len(first)), sys.Size)])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(f2, make([]byte, sys.Size-int64(n1))); err != nil {
		t.Fatal(err)
	}
	if n := e.fs.Stats().FS.Reads - before; n > 2 {
		t.Errorf("np.load's pattern (a read of st_blksize %d, then the rest) took %d FUSE reads, want at most 2", sys.Blksize, n)
	}
}

// TestComputedFeatureNextReadsFromMemory: the reads of a file after the
// one that computed its feature copy it from the tree's recent features,
// not from the cache (which decompressed it again for each of them).
func TestComputedFeatureNextReadsFromMemory(t *testing.T) {
	m := testModel()
	m.Layers = []api.Layer{{Index: 0, Name: "big", Tensor: "big", Shape: []int64{3, 256, 1024}, Bytes: 3 << 20}}
	b := newFakeBucket(1000)
	b.put("x/1.jpg", []byte("one"))
	e := testMountWith(t, b, newFakeExtractor(m))
	before := e.fs.Stats().FS.Reads
	data, err := os.ReadFile(e.path("features", "tiny", "big", "x", "1.npy"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, expectedNPY(m.Layers[0], []byte("one"), e.x.DType())) {
		t.Fatal("content differs from the extractor's")
	}
	if n := e.fs.Stats().FS.Reads - before; n < 2 {
		t.Fatalf("a 3 MiB file took %d FUSE reads; the test needs several", n)
	}
	if n := e.c.PartReads.Load(); n != 0 || e.x.Calls.Load() != 1 {
		t.Errorf("%d cache reads and %d extractions for one file, want 0 and 1 (its next reads from memory)", n, e.x.Calls.Load())
	}
	if st := e.fs.Stats().FS; st.RecentReads < 1 || st.RecentReads > st.Reads-before-1 {
		t.Errorf("fs.recent_reads %d of %d reads, want all but the first read (which computed it)", st.RecentReads, st.Reads-before)
	}
}
