package extractor

// Scheduler unit tests with a fake inference runner: sharing of identical
// requests, batching, priorities, cancellation, bad-input isolation, close.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/png"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/featurefs/featurefs/extractor/api"
)

// fakeRunner copies each input's first element into every element of its
// output, records the batches it runs and their lanes, can be gated, and
// fails any run that contains a poisoned input or buffers not sized for the
// segment's input and output.
type fakeRunner struct {
	mu      sync.Mutex
	batches [][]float32  // first input element of each item, per run
	keys    []sessionKey // the segment of each run
	gate    chan struct{}
	started chan int // receives n when a run starts (if non-nil)
	poison  float32
}

func (f *fakeRunner) run(ctx context.Context, g segment, n int, in, out []float32) error {
	ie, oe := g.inputElems(), int(g.l.Elements())
	if len(in) != n*ie || len(out) != n*oe {
		return fmt.Errorf("%d inputs of %s in %d and %d floats", n, g.key(), len(in), len(out))
	}
	firsts := make([]float32, n)
	for i := range n {
		firsts[i] = in[i*ie]
	}
	f.mu.Lock()
	f.batches = append(f.batches, firsts)
	f.keys = append(f.keys, g.key())
	gate, started := f.gate, f.started
	f.mu.Unlock()
	if started != nil {
		started <- n
	}
	if gate != nil {
		<-gate // like ONNX Runtime, a run is not interrupted
	}
	for i := range n {
		if f.poison != 0 && firsts[i] == f.poison {
			return fmt.Errorf("poisoned input in a batch of %d", n)
		}
		for j := range oe {
			out[i*oe+j] = firsts[i]
		}
	}
	return nil
}

func (f *fakeRunner) runs() [][]float32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]float32(nil), f.batches...)
}

// testModel is a tiny model: 3x8x8 input, one layer of shape [2].
func testModel() *model {
	return &model{Model: Model{
		Name:       "m",
		Layers:     []Layer{{Index: 0, Name: "layer0", Tensor: "t0", Shape: []int64{2}, Bytes: 8}},
		Aliases:    map[string]string{},
		Preprocess: Preprocess{Resize: 8, Crop: 8, Mean: [3]float32{0.5, 0.5, 0.5}, Std: [3]float32{0.25, 0.25, 0.25}},
		InputShape: []int64{3, 8, 8},
	}, bufs: &floatPool{}}
}

// pngOf returns an 8x8 PNG of gray level v.
func pngOf(t testing.TB, v uint8) []byte {
	t.Helper()
	img := image.NewGray(image.Rect(0, 0, 8, 8))
	for i := range img.Pix {
		img.Pix[i] = v
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// firstValue is what preprocessing makes of gray level v (the fake
// runner's output for that image).
func firstValue(t testing.TB, m *model, img []byte) float32 {
	t.Helper()
	dst := make([]float32, m.InputElements())
	if err := ApplyPreprocess(m.Preprocess, img, 0, dst); err != nil {
		t.Fatal(err)
	}
	return dst[0]
}

func newTestScheduler(t *testing.T, r runner, bs int, workers int, mutate ...func(*schedConfig)) *scheduler {
	t.Helper()
	cfg := schedConfig{
		workers: workers,
		maxWait: 20 * time.Millisecond,
		dtype:   Float32,
		log:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		batchSize: func(context.Context, segment, int) int {
			return bs
		},
	}
	for _, f := range mutate {
		f(&cfg)
	}
	s := newScheduler(cfg, r)
	t.Cleanup(s.close)
	return s
}

func req(key string, img []byte, p Priority, fetches *atomic.Int64) Request {
	return Request{Model: "m", Layer: 0, Key: key, Priority: p, Fetch: func(ctx context.Context) ([]byte, error) {
		if fetches != nil {
			fetches.Add(1)
		}
		return img, nil
	}}
}

// decodedValue returns the single value of a fake-runner .npy result.
func decodedValue(t testing.TB, npy []byte) float32 {
	t.Helper()
	shape, _, data, err := api.DecodeNPY(npy)
	if err != nil {
		t.Fatal(err)
	}
	if len(shape) != 1 || shape[0] != 2 || len(data) != 2 || data[0] != data[1] {
		t.Fatalf("unexpected result shape %v data %v", shape, data)
	}
	return data[0]
}

// waitFor polls cond until it holds (fails after 10 s).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestIdenticalRequestsShareOneComputation(t *testing.T) {
	f := &fakeRunner{gate: make(chan struct{})}
	s := newTestScheduler(t, f, 8, 2)
	m := testModel()
	img := pngOf(t, 100)
	var fetches atomic.Int64
	const n = 10
	results := make([][]byte, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = s.extract(context.Background(), m, m.Layers[0], req("a.png", img, Foreground, &fetches))
		}()
	}
	waitFor(t, "all requests to join", func() bool { return s.n.requests.Load() == n })
	close(f.gate)
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		if !bytes.Equal(results[i], results[0]) {
			t.Fatalf("request %d got a different result", i)
		}
	}
	if got := fetches.Load(); got != 1 {
		t.Errorf("object fetched %d times, want 1", got)
	}
	if runs := f.runs(); len(runs) != 1 || len(runs[0]) != 1 {
		t.Errorf("runner saw %v, want one run of one item", runs)
	}
	if got := decodedValue(t, results[0]); got != firstValue(t, m, img) {
		t.Errorf("result %v, want %v", got, firstValue(t, m, img))
	}
	if st := statsOf(s); st.Shared != n-1 || st.Completed != 1 || st.InFlight != 0 {
		t.Errorf("stats %+v: want shared %d, completed 1, in flight 0", st, n-1)
	}
	// A request after completion computes again (results are not kept here).
	if _, err := s.extract(context.Background(), m, m.Layers[0], req("a.png", img, Foreground, &fetches)); err != nil {
		t.Fatal(err)
	}
	if fetches.Load() != 2 {
		t.Errorf("fetches = %d after a later request, want 2", fetches.Load())
	}
}

// blockFirst makes the runner busy with one request so that later ones
// queue up; it returns the release function and the result channel.
func blockFirst(t *testing.T, s *scheduler, f *fakeRunner, m *model) (release func(), done chan error) {
	t.Helper()
	f.mu.Lock()
	f.gate = make(chan struct{})
	f.started = make(chan int, 64)
	gate := f.gate
	f.mu.Unlock()
	done = make(chan error, 1)
	go func() {
		_, err := s.extract(context.Background(), m, m.Layers[0], req("blocker.png", pngOf(t, 1), Foreground, nil))
		done <- err
	}()
	<-f.started
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			f.gate = nil
			f.mu.Unlock()
			close(gate)
		})
	}, done
}

func TestInputsAreBatched(t *testing.T) {
	f := &fakeRunner{}
	s := newTestScheduler(t, f, 4, 2)
	m := testModel()
	release, blocked := blockFirst(t, s, f, m)
	var wg sync.WaitGroup
	want := map[float32]bool{}
	for i := range 6 {
		img := pngOf(t, uint8(10+i))
		want[firstValue(t, m, img)] = true
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := s.extract(context.Background(), m, m.Layers[0], req(fmt.Sprintf("%d.png", i), img, Background, nil))
			if err != nil {
				t.Error(err)
				return
			}
			if v := decodedValue(t, b); v != firstValue(t, m, img) {
				t.Errorf("item %d got %v, want %v", i, v, firstValue(t, m, img))
			}
		}()
	}
	waitFor(t, "6 decoded inputs", func() bool { return statsOf(s).Decoded == 6 })
	release()
	wg.Wait()
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}
	runs := f.runs()
	// blocker, then 4, then 2.
	if len(runs) != 3 || len(runs[1]) != 4 || len(runs[2]) != 2 {
		t.Fatalf("batches %v: want sizes 1, 4, 2", runs)
	}
	for _, r := range runs[1:] {
		for _, v := range r {
			if !want[v] {
				t.Errorf("unexpected item %v in batch", v)
			}
		}
	}
	if st := statsOf(s); st.Batches != 3 || st.BatchedItems != 7 {
		t.Errorf("stats batches %d items %d, want 3 and 7", st.Batches, st.BatchedItems)
	}
}

func TestForegroundJumpsBackgroundQueue(t *testing.T) {
	f := &fakeRunner{}
	s := newTestScheduler(t, f, 1, 1)
	m := testModel()
	release, blocked := blockFirst(t, s, f, m)
	var wg sync.WaitGroup
	extract := func(key string, v uint8, p Priority) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.extract(context.Background(), m, m.Layers[0], req(key, pngOf(t, v), p, nil)); err != nil {
				t.Error(err)
			}
		}()
	}
	for i := range 3 {
		extract(fmt.Sprintf("bg%d.png", i), uint8(50+i), Background)
		waitFor(t, "background decoded", func() bool { return statsOf(s).Decoded == i+1 })
	}
	extract("fg.png", 200, Foreground)
	waitFor(t, "foreground decoded", func() bool { return statsOf(s).Decoded == 4 })
	// A foreground reader joining a queued background request promotes it.
	extract("bg2.png", 52, Foreground)
	waitFor(t, "join", func() bool { return statsOf(s).Shared == 1 })
	release()
	wg.Wait()
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}
	var order []float32
	for _, r := range f.runs()[1:] {
		order = append(order, r...)
	}
	want := []float32{
		firstValue(t, m, pngOf(t, 200)), firstValue(t, m, pngOf(t, 52)),
		firstValue(t, m, pngOf(t, 50)), firstValue(t, m, pngOf(t, 51)),
	}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Errorf("run order %v, want %v (foreground, promoted, then background in arrival order)", order, want)
	}
}

func TestCancellationNeedsEveryWaiter(t *testing.T) {
	f := &fakeRunner{}
	s := newTestScheduler(t, f, 1, 2)
	m := testModel()
	img := pngOf(t, 77)
	proceed := make(chan struct{})
	fetchCtxErr := make(chan error, 4)
	var fetches atomic.Int64
	r := Request{Model: "m", Key: "c.png", Priority: Foreground, Fetch: func(ctx context.Context) ([]byte, error) {
		fetches.Add(1)
		select {
		case <-proceed:
			return img, nil
		case <-ctx.Done():
			fetchCtxErr <- ctx.Err()
			return nil, ctx.Err()
		}
	}}

	// Two waiters; the first gives up; the computation goes on for the second.
	ctx1, cancel1 := context.WithCancel(context.Background())
	err1 := make(chan error, 1)
	res2 := make(chan []byte, 1)
	go func() { _, err := s.extract(ctx1, m, m.Layers[0], r); err1 <- err }()
	go func() {
		b, err := s.extract(context.Background(), m, m.Layers[0], r)
		if err != nil {
			t.Error(err)
		}
		res2 <- b
	}()
	waitFor(t, "both waiters", func() bool { return statsOf(s).Shared == 1 && fetches.Load() == 1 })
	cancel1()
	if err := <-err1; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter got %v, want context.Canceled", err)
	}
	close(proceed)
	if b := <-res2; decodedValue(t, b) != firstValue(t, m, img) {
		t.Fatal("second waiter got a wrong result")
	}
	select {
	case err := <-fetchCtxErr:
		t.Fatalf("fetch saw cancellation %v although a waiter remained", err)
	default:
	}

	// Every waiter gives up: the fetch is cancelled and nothing runs.
	proceed = make(chan struct{})
	runsBefore := len(f.runs())
	ctxA, cancelA := context.WithCancel(context.Background())
	ctxB, cancelB := context.WithCancel(context.Background())
	r.ID = "second-version"
	errs := make(chan error, 2)
	go func() { _, err := s.extract(ctxA, m, m.Layers[0], r); errs <- err }()
	go func() { _, err := s.extract(ctxB, m, m.Layers[0], r); errs <- err }()
	waitFor(t, "both waiters again", func() bool { return statsOf(s).Shared == 2 && fetches.Load() == 2 })
	cancelA()
	cancelB()
	for range 2 {
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want context.Canceled", err)
		}
	}
	select {
	case err := <-fetchCtxErr:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("fetch ctx err %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("fetch was not cancelled when every waiter gave up")
	}
	waitFor(t, "call retired", func() bool { return statsOf(s).InFlight == 0 })
	if len(f.runs()) != runsBefore {
		t.Error("a cancelled request was run")
	}
	if st := statsOf(s); st.Cancelled != 1 {
		t.Errorf("cancelled = %d, want 1", st.Cancelled)
	}
}

func TestCancelWhileQueuedFreesTheSlot(t *testing.T) {
	f := &fakeRunner{}
	s := newTestScheduler(t, f, 1, 1, func(c *schedConfig) { c.maxCalls = 2 })
	m := testModel()
	release, blocked := blockFirst(t, s, f, m)
	defer release()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := s.extract(ctx, m, m.Layers[0], req("q.png", pngOf(t, 3), Background, nil))
		errc <- err
	}()
	waitFor(t, "queued", func() bool { return statsOf(s).InFlight == 2 })
	// The service is full: a third distinct request waits for a slot.
	ctx3, cancel3 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel3()
	if _, err := s.extract(ctx3, m, m.Layers[0], req("r.png", pngOf(t, 4), Background, nil)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("request beyond the bound: %v, want to wait until its deadline", err)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	waitFor(t, "slot freed", func() bool { return statsOf(s).InFlight == 1 })
	release()
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}
	if _, err := s.extract(context.Background(), m, m.Layers[0], req("r.png", pngOf(t, 4), Background, nil)); err != nil {
		t.Fatal(err)
	}
}

func TestBadImageFailsOnlyItself(t *testing.T) {
	f := &fakeRunner{}
	s := newTestScheduler(t, f, 8, 2)
	m := testModel()
	good := pngOf(t, 120)
	inputs := map[string][]byte{
		"good1.png":     good,
		"empty.png":     {},
		"truncated.png": good[:len(good)/2],
		"text.png":      []byte("this is not an image at all"),
		"corrupt.png":   append(append([]byte{}, good[:40]...), bytes.Repeat([]byte{0xff}, 60)...),
		"good2.png":     pngOf(t, 130),
	}
	release, blocked := blockFirst(t, s, f, m)
	type result struct {
		b   []byte
		err error
	}
	res := map[string]result{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for k, img := range inputs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := s.extract(context.Background(), m, m.Layers[0], req(k, img, Background, nil))
			mu.Lock()
			res[k] = result{b, err}
			mu.Unlock()
		}()
	}
	waitFor(t, "all decoded or failed", func() bool { st := statsOf(s); return st.Decoded == 2 && st.BadImages == 4 })
	release()
	wg.Wait()
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}
	for k := range inputs {
		r := res[k]
		if k == "good1.png" || k == "good2.png" {
			if r.err != nil {
				t.Errorf("%s: %v", k, r.err)
			} else if decodedValue(t, r.b) != firstValue(t, m, inputs[k]) {
				t.Errorf("%s: wrong result", k)
			}
			continue
		}
		var ie *ImageError
		if !errors.As(r.err, &ie) || !errors.Is(r.err, ErrBadImage) {
			t.Errorf("%s: error %v, want an *ImageError matching ErrBadImage", k, r.err)
			continue
		}
		if ie.Key != k {
			t.Errorf("%s: ImageError names %q", k, ie.Key)
		}
	}
}

func TestPoisonedBatchIsRetriedItemByItem(t *testing.T) {
	m := testModel()
	bad := pngOf(t, 66)
	f := &fakeRunner{poison: firstValue(t, m, bad)}
	s := newTestScheduler(t, f, 4, 2)
	release, blocked := blockFirst(t, s, f, m)
	keys := []string{"a.png", "poison.png", "b.png"}
	imgs := [][]byte{pngOf(t, 10), bad, pngOf(t, 20)}
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.extract(context.Background(), m, m.Layers[0], req(keys[i], imgs[i], Background, nil))
		}()
	}
	waitFor(t, "decoded", func() bool { return statsOf(s).Decoded == 3 })
	release()
	wg.Wait()
	<-blocked
	if errs[0] != nil || errs[2] != nil {
		t.Fatalf("batch mates of a poisoned input failed: %v, %v", errs[0], errs[2])
	}
	if errs[1] == nil || !bytes.Contains([]byte(errs[1].Error()), []byte("poison.png")) {
		t.Fatalf("poisoned input: %v, want an error naming poison.png", errs[1])
	}
	if st := statsOf(s); st.Retries != 3 {
		t.Errorf("retries = %d, want 3", st.Retries)
	}
}

func TestCloseFailsQueuedRequests(t *testing.T) {
	f := &fakeRunner{}
	cfg := schedConfig{workers: 1, maxWait: time.Millisecond, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		batchSize: func(context.Context, segment, int) int { return 1 }}
	s := newScheduler(cfg, f)
	m := testModel()
	release, blocked := blockFirst(t, s, f, m)
	errc := make(chan error, 3)
	for i := range 3 {
		go func() {
			_, err := s.extract(context.Background(), m, m.Layers[0], req(fmt.Sprint(i), pngOf(t, uint8(i+5)), Background, nil))
			errc <- err
		}()
	}
	waitFor(t, "queued", func() bool { return statsOf(s).InFlight == 4 })
	go func() { time.Sleep(10 * time.Millisecond); release() }()
	s.close()
	for range 3 {
		if err := <-errc; !errors.Is(err, ErrClosed) {
			t.Errorf("queued request after close: %v, want ErrClosed", err)
		}
	}
	if err := <-blocked; err != nil {
		t.Errorf("running request: %v, want its result", err)
	}
	if _, err := s.extract(context.Background(), m, m.Layers[0], req("late", pngOf(t, 9), Foreground, nil)); !errors.Is(err, ErrClosed) {
		t.Errorf("extract after close: %v", err)
	}
}

// costRunner advances a fake clock by overhead + perItem*n (+ jitter on the
// first run of each size): batching amortizes the overhead.
type costRunner struct {
	overhead, perItem, jitter time.Duration
	clock                     *time.Time
	seen                      map[int]bool
}

func (c costRunner) run(ctx context.Context, g segment, n int, in, out []float32) error {
	d := c.overhead + time.Duration(n)*c.perItem
	if !c.seen[n] {
		c.seen[n] = true
		d += c.jitter
	}
	*c.clock = c.clock.Add(d)
	return nil
}

func TestMeasuredBatchSizeFollowsThroughput(t *testing.T) {
	m := testModel()
	measure := func(overhead, perItem, jitter, budget time.Duration) (int, map[int]time.Duration, time.Duration) {
		t.Helper()
		clock := time.Unix(0, 0)
		r := costRunner{overhead: overhead, perItem: perItem, jitter: jitter, clock: &clock, seen: map[int]bool{}}
		b, per, err := measureBatchSize(context.Background(), r, m, m.Layers[0], 16, budget, func() time.Time { return clock })
		if err != nil {
			t.Fatal(err)
		}
		return b, per, clock.Sub(time.Unix(0, 0))
	}
	// Large fixed overhead: bigger batches are much better per image.
	if b, per, _ := measure(20*time.Millisecond, time.Millisecond, 0, 5*time.Second); b != 16 {
		t.Errorf("with a large per-run overhead chose %d (per image %v), want 16", b, per)
	}
	// Small overhead: not worth a bigger batch; a slow first run is ignored.
	if b, per, _ := measure(time.Millisecond/2, 10*time.Millisecond, 8*time.Millisecond, 5*time.Second); b != 1 {
		t.Errorf("without much overhead chose %d (per image %v), want 1", b, per)
	}
	// The budget bounds the cost.
	if _, per, spent := measure(0, 20*time.Millisecond, 0, 200*time.Millisecond); spent > 300*time.Millisecond || len(per) > 3 {
		t.Errorf("measurement spent %v on sizes %v with a 200ms budget", spent, per)
	}
}

// The idle hook (the C heap's trim) is called once the loops have had no
// work for idleAfter after batches ran: not before any batch, not while
// work keeps coming, and not again until another batch has run.
func TestIdleCalledOnceAfterBatches(t *testing.T) {
	m := testModel()
	var idles atomic.Int64
	s := newTestScheduler(t, &fakeRunner{}, 1, 1, func(c *schedConfig) {
		c.idle = func() { idles.Add(1) }
		c.idleAfter = 300 * time.Millisecond // well above one extraction under -race on a loaded CI host
	})
	time.Sleep(400 * time.Millisecond)
	if n := idles.Load(); n != 0 {
		t.Fatalf("idle called %d times before any batch ran", n)
	}
	extract := func(key string) {
		t.Helper()
		if _, err := s.extract(context.Background(), m, m.Layers[0], req(key, pngOf(t, 7), Foreground, nil)); err != nil {
			t.Fatal(err)
		}
	}
	// Work arriving more often than idleAfter: no idle call in between.
	for i := range 5 {
		extract(fmt.Sprintf("busy%d", i))
		time.Sleep(5 * time.Millisecond)
	}
	if n := idles.Load(); n != 0 {
		t.Fatalf("idle called %d times while work kept coming", n)
	}
	waitFor(t, "the idle call after the batches", func() bool { return idles.Load() == 1 })
	time.Sleep(400 * time.Millisecond)
	if n := idles.Load(); n != 1 {
		t.Fatalf("idle called %d times without a new batch, want 1", n)
	}
	extract("again")
	waitFor(t, "the idle call after the next batch", func() bool { return idles.Load() == 2 })
}

// On the CPU a measured pick below cpuPipelineBatch gives way to it when
// batch 4's bare runs are no more than 10% slower per image: the per-run cost
// the measurement cannot see favours it. A pick at or above it, a clearly
// slower batch 4 or one not measured keep the pick.
func TestPreferPipelineBatch(t *testing.T) {
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	cases := []struct {
		best int
		per  map[int]time.Duration
		want int
	}{
		{1, map[int]time.Duration{1: ms(20), 2: ms(19.5), 4: ms(20.5)}, 4},
		{1, map[int]time.Duration{1: ms(20), 2: ms(20), 4: ms(21.9)}, 4},
		{1, map[int]time.Duration{1: ms(20), 2: ms(21), 4: ms(23)}, 1},
		{1, map[int]time.Duration{1: ms(20), 2: ms(20)}, 1},
		{2, map[int]time.Duration{1: ms(20), 2: ms(17), 4: ms(18)}, 4},
		{8, map[int]time.Duration{1: ms(20), 4: ms(15), 8: ms(12)}, 8},
	}
	for _, c := range cases {
		if got := preferPipelineBatch(c.best, c.per); got != c.want {
			t.Errorf("preferPipelineBatch(%d, %v) = %d, want %d", c.best, c.per, got, c.want)
		}
	}
}

// TestFetchesWhileDecoding: the scheduler runs more workers than decoders
// (the service: Workers decoders and fetchAhead(Workers) more), so that
// objects are fetched while every decoder is busy: with one decoder held,
// three fetches of other requests run at once, and no more calls than
// decoders ever preprocess together.
func TestFetchesWhileDecoding(t *testing.T) {
	f := &fakeRunner{}
	s := newTestScheduler(t, f, 1, 1+fetchAhead(1), func(c *schedConfig) {
		c.decoders = 1
	})
	if s.cfg.workers != 3 {
		t.Fatalf("%d workers for 1 decoder, want 3", s.cfg.workers)
	}
	m := testModel()
	// Hold the one decoder's place, as a long decode would.
	s.mu.Lock()
	s.decoding = 1
	s.mu.Unlock()
	proceed := make(chan struct{})
	var fetching atomic.Int64
	var wg sync.WaitGroup
	for i := range 3 {
		img := pngOf(t, uint8(10+i))
		r := Request{Model: "m", Key: fmt.Sprintf("f%d.png", i), Priority: Background, Fetch: func(ctx context.Context) ([]byte, error) {
			fetching.Add(1)
			<-proceed
			return img, nil
		}}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.extract(context.Background(), m, m.Layers[0], r); err != nil {
				t.Error(err)
			}
		}()
	}
	waitFor(t, "three fetches at once while the decoder is busy", func() bool { return fetching.Load() == 3 })
	close(proceed)
	waitFor(t, "the fetched calls at the decoders' gate", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.gateWait[Background] == 3
	})
	s.mu.Lock()
	s.decoding = 0
	s.mu.Unlock()
	s.gate.Broadcast()
	wg.Wait()
	// Many calls, instant fetches: at most one preprocesses at a time.
	var most atomic.Int64
	s.mu.Lock()
	s.cfg.entered = func(Request) {
		most.Store(max(most.Load(), int64(s.decoding)))
	}
	s.mu.Unlock()
	for i := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.extract(context.Background(), m, m.Layers[0], req(fmt.Sprintf("g%d.png", i), pngOf(t, uint8(i)), Background, nil)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := most.Load(); n != 1 {
		t.Fatalf("%d calls preprocessed at once with 1 decoder, want 1", n)
	}
}

// TestForegroundFirstAtDecodeGate: fetched calls waiting for a decoder
// go in priority order: a foreground read that arrives after three
// background calls were fetched is decoded before them.
func TestForegroundFirstAtDecodeGate(t *testing.T) {
	f := &fakeRunner{}
	var mu sync.Mutex
	var order []string
	s := newTestScheduler(t, f, 1, 5, func(c *schedConfig) {
		c.decoders = 1
		c.entered = func(r Request) {
			mu.Lock()
			order = append(order, r.Key)
			mu.Unlock()
		}
	})
	m := testModel()
	s.mu.Lock()
	s.decoding = 1
	s.mu.Unlock()
	var wg sync.WaitGroup
	extract := func(key string, v uint8, p Priority) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.extract(context.Background(), m, m.Layers[0], req(key, pngOf(t, v), p, nil)); err != nil {
				t.Error(err)
			}
		}()
	}
	gateWait := func(p Priority, n int) func() bool {
		return func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.gateWait[p] == n
		}
	}
	for i := range 3 {
		extract(fmt.Sprintf("bg%d.png", i), uint8(50+i), Background)
	}
	waitFor(t, "three background calls at the gate", gateWait(Background, 3))
	extract("fg.png", 200, Foreground)
	waitFor(t, "the foreground call at the gate", gateWait(Foreground, 1))
	s.mu.Lock()
	s.decoding = 0
	s.mu.Unlock()
	s.gate.Broadcast()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(order) != 4 || order[0] != "fg.png" {
		t.Fatalf("decode order %v, want fg.png first", order)
	}
}

// TestCancelAtDecodeGate: a fetched call waiting for a decoder whose only
// reader gives up ends at once (its token given back), and the decoder's
// place is not taken by it.
func TestCancelAtDecodeGate(t *testing.T) {
	f := &fakeRunner{}
	s := newTestScheduler(t, f, 1, 2, func(c *schedConfig) { c.decoders = 1 })
	m := testModel()
	s.mu.Lock()
	s.decoding = 1
	s.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := s.extract(ctx, m, m.Layers[0], req("c.png", pngOf(t, 9), Background, nil))
		errc <- err
	}()
	waitFor(t, "the call at the gate", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.gateWait[Background] == 1
	})
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("extract: %v, want context.Canceled", err)
	}
	waitFor(t, "the gate empty and the token back", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.gateWait[Background] == 0 && s.decoding == 1 && len(s.tokens) == 0
	})
}

// TestFetchBudgetBoundsFetchedObjects: the objects the workers hold
// between their GET and the end of their decode are bounded in bytes
// (schedConfig.fetch, --fetch-memory): with a budget of 1000 bytes and
// three workers, objects listed at 600 bytes are fetched one at a time
// while the one fetched waits for the busy decoder; one listed larger
// than the whole budget is held alone; an object of unknown size takes
// its bytes once fetched; and every byte is given back.
func TestFetchBudgetBoundsFetchedObjects(t *testing.T) {
	f := &fakeRunner{}
	s := newTestScheduler(t, f, 1, 1+fetchAhead(1), func(c *schedConfig) {
		c.decoders = 1
		c.fetch = newDecodeBudget(1000)
	})
	m := testModel()
	for _, size := range []int64{600, 5000} {
		s.mu.Lock()
		s.decoding = 1 // the decoder is busy
		s.mu.Unlock()
		var fetching, most atomic.Int64
		var wg sync.WaitGroup
		for i := range 3 {
			img := pngOf(t, uint8(10+i))
			r := Request{Model: "m", Key: fmt.Sprintf("s%d-%d.png", size, i), Size: size, Priority: Background,
				Fetch: func(ctx context.Context) ([]byte, error) {
					n := fetching.Add(1)
					most.Store(max(most.Load(), n))
					if held := s.cfg.fetch.inUse(); held > 1000 {
						t.Errorf("%d bytes of fetch budget held, budget 1000", held)
					}
					time.Sleep(20 * time.Millisecond)
					fetching.Add(-1)
					return img, nil
				}}
			wg.Go(func() {
				if _, err := s.extract(context.Background(), m, m.Layers[0], r); err != nil {
					t.Error(err)
				}
			})
		}
		waitFor(t, "one object fetched, waiting for the decoder", func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.gateWait[Background] == 1
		})
		time.Sleep(100 * time.Millisecond) // the others would fetch now, without the budget
		s.mu.Lock()
		waiting := s.gateWait[Background]
		s.decoding = 0
		s.mu.Unlock()
		s.gate.Broadcast()
		wg.Wait()
		if waiting != 1 || most.Load() != 1 {
			t.Errorf("objects listed at %d bytes, fetch budget 1000: %d fetched objects waited for the decoder at once, %d fetches ran at once; want 1 and 1", size, waiting, most.Load())
		}
		if n := s.cfg.fetch.inUse(); n != 0 {
			t.Errorf("%d bytes of fetch budget still held after every call ended", n)
		}
	}
	// Unknown size: the bytes are taken once fetched, and given back.
	img := pngOf(t, 99)
	r := Request{Model: "m", Key: "unsized.png", Priority: Background, Fetch: func(ctx context.Context) ([]byte, error) { return img, nil }}
	var held int64
	s.mu.Lock()
	s.cfg.entered = func(Request) { held = s.cfg.fetch.inUse() }
	s.mu.Unlock()
	if _, err := s.extract(context.Background(), m, m.Layers[0], r); err != nil {
		t.Fatal(err)
	}
	if held != int64(len(img)) || s.cfg.fetch.inUse() != 0 {
		t.Errorf("an object of unknown size (%d bytes) held %d bytes of the budget while decoded, %d after; want %d, 0", len(img), held, s.cfg.fetch.inUse(), len(img))
	}
}
