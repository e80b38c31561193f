package extractor

// Several batches in flight (the GPU's scheduler): batches run at once,
// each loop in buffers of its own from the allocator, reused across
// batches and freed on close; the batch size is chosen once per lane.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/featurefs/featurefs/extractor/api"
)

// concurrentRunner is a fakeRunner that records how many runs were in
// progress at once, holding the first runs until `hold` runs have been in
// progress together (or a timeout), and the input buffers it was given.
type concurrentRunner struct {
	fakeRunner
	hold     int
	cur, top atomic.Int32
	mu2      sync.Mutex
	arrived  chan struct{}
	bufs     map[*float32]bool
}

func (c *concurrentRunner) run(ctx context.Context, g segment, n int, in, out []float32) error {
	c.mu2.Lock()
	c.bufs[&in[:1][0]] = true
	c.mu2.Unlock()
	now := c.cur.Add(1)
	defer c.cur.Add(-1)
	for {
		top := c.top.Load()
		if now <= top || c.top.CompareAndSwap(top, now) {
			break
		}
	}
	select {
	case c.arrived <- struct{}{}:
	default:
	}
	deadline := time.Now().Add(2 * time.Second)
	for c.top.Load() < int32(c.hold) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	return c.fakeRunner.run(ctx, g, n, in, out)
}

func TestSchedulerRunsBatchesInFlight(t *testing.T) {
	m := testModel()
	r := &concurrentRunner{hold: 3, arrived: make(chan struct{}, 1), bufs: map[*float32]bool{}}
	var allocs, frees atomic.Int32
	var chosen atomic.Int32
	s := newTestScheduler(t, r, 2, 4, func(c *schedConfig) {
		c.inflight = 3
		c.maxWait = time.Millisecond
		c.batchSize = func(context.Context, segment, int) int {
			chosen.Add(1)
			time.Sleep(20 * time.Millisecond) // loops arriving meanwhile must wait, not choose again
			return 2
		}
		c.alloc = func(_, n int) ([]float32, func()) {
			allocs.Add(1)
			return make([]float32, n), func() { frees.Add(1) }
		}
	})
	const n = 24
	imgs := make([][]byte, n)
	for i := range imgs {
		imgs[i] = pngOf(t, uint8(10*i))
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	got := make([]float32, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := s.extract(context.Background(), m, m.Layers[0], req(fmt.Sprint(i), imgs[i], Background, nil))
			if err != nil {
				errs[i] = err
				return
			}
			got[i] = decodedValue(t, b)
		}()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("image %d: %v", i, errs[i])
		}
		if want := firstValue(t, m, imgs[i]); got[i] != want {
			t.Errorf("image %d: %v, want %v (an output went to another request)", i, got[i], want)
		}
	}
	if top := r.top.Load(); top != 3 {
		t.Errorf("at most %d batches ran at once, want 3", top)
	}
	if c := chosen.Load(); c != 1 {
		t.Errorf("batch size chosen %d times, want once", c)
	}
	for _, b := range r.runs() {
		if len(b) > 2 {
			t.Errorf("a batch of %d, over the batch size 2", len(b))
		}
	}
	// Each loop packs into its own buffers, kept across batches: an in and
	// an out buffer per loop, never one per batch.
	if a := allocs.Load(); a > 2*3 || len(r.bufs) > 3 {
		t.Errorf("%d allocations and %d distinct input buffers for %d batches, want at most 2 and 1 per loop", a, len(r.bufs), len(r.runs()))
	}
	s.close()
	if a, f := allocs.Load(), frees.Load(); a != f {
		t.Errorf("%d buffers allocated, %d freed on close", a, f)
	}
	if st := statsOf(s); st.Running != 0 {
		t.Errorf("running %d after close", st.Running)
	}
}

// With one loop (the CPU), runs never overlap.
func TestSchedulerOneLoopRunsOneBatch(t *testing.T) {
	m := testModel()
	r := &concurrentRunner{hold: 1, arrived: make(chan struct{}, 1), bufs: map[*float32]bool{}}
	s := newTestScheduler(t, r, 2, 4)
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.extract(context.Background(), m, m.Layers[0], req(fmt.Sprint(i), pngOf(t, uint8(i)), Background, nil)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if top := r.top.Load(); top != 1 {
		t.Errorf("%d runs at once with one inference loop", top)
	}
}

// TestInChunksCoversEachIndexOnce: every index of [0, n) in exactly one
// call, on at most maxChunks goroutines, and a batch too small to be
// worth a goroutine on the caller's.
func TestInChunksCoversEachIndexOnce(t *testing.T) {
	for _, n := range []int{0, 1, 2, 7, 8, 9, 255, 256} {
		for _, bytes := range []int{0, chunkBytes - 1, chunkBytes, 3 * chunkBytes, 100 * chunkBytes} {
			seen := make([]atomic.Int32, n)
			var calls, cur, top atomic.Int32
			inChunks(n, bytes, func(lo, hi int) {
				calls.Add(1)
				c := cur.Add(1)
				defer cur.Add(-1)
				for {
					tp := top.Load()
					if c <= tp || top.CompareAndSwap(tp, c) {
						break
					}
				}
				for i := lo; i < hi; i++ {
					seen[i].Add(1)
				}
			})
			for i := range seen {
				if v := seen[i].Load(); v != 1 {
					t.Fatalf("n %d bytes %d: index %d covered %d times", n, bytes, i, v)
				}
			}
			want := max(1, min(n, maxChunks, bytes/chunkBytes))
			if got := int(calls.Load()); got != want {
				t.Errorf("n %d bytes %d: %d calls, want %d", n, bytes, got, want)
			}
			if top.Load() > maxChunks {
				t.Errorf("n %d bytes %d: %d calls at once, more than %d", n, bytes, top.Load(), maxChunks)
			}
		}
	}
}

// TestLargeBatchKeepsEachOutputWithItsRequest runs a batch large enough
// that its inputs are packed and its outputs encoded on several
// goroutines: each request still gets its own output.
func TestLargeBatchKeepsEachOutputWithItsRequest(t *testing.T) {
	f := &fakeRunner{}
	const bs = 16
	s := newTestScheduler(t, f, bs, 4)
	m := testModel()
	m.Preprocess.Resize, m.Preprocess.Crop, m.InputShape = 256, 256, []int64{3, 256, 256}
	m.Layers[0].Shape, m.Layers[0].Bytes = []int64{1 << 18}, 4<<18
	if in, out := bs*m.InputElements()*4, bs*int(m.Layers[0].Elements())*4; in < 2*chunkBytes || out < 2*chunkBytes {
		t.Fatalf("a batch of %d MB in and %d MB out is too small to be split", in>>20, out>>20)
	}
	release, blocked := blockFirst(t, s, f, m) // the batch forms behind it
	var wg sync.WaitGroup
	for i := range bs {
		img := pngOf(t, uint8(7*i))
		want := firstValue(t, m, img)
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := s.extract(context.Background(), m, m.Layers[0], req(fmt.Sprintf("%d.png", i), img, Background, nil))
			if err != nil {
				t.Error(err)
				return
			}
			_, _, data, err := api.DecodeNPY(b)
			if err != nil {
				t.Error(err)
				return
			}
			for j, v := range data {
				if v != want {
					t.Errorf("item %d: value %d is %v, want %v", i, j, v, want)
					return
				}
			}
		}()
	}
	waitFor(t, fmt.Sprintf("%d decoded inputs", bs), func() bool { return statsOf(s).Decoded == bs })
	release()
	wg.Wait()
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}
	if runs := f.runs(); len(runs) != 2 || len(runs[1]) != bs {
		t.Fatalf("runs %v: want the blocker's, then one batch of %d", runs, bs)
	}
}
