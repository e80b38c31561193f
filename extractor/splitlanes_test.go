package extractor

// Split calls in the one scheduler, with a fake runner: they are batched in
// lanes of their own (model, from, to) with the from layer's input size,
// share MaxPending with image calls, fail with ErrClosed when queued at
// Close, and a poisoned tensor fails only its own request.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/featurefs/featurefs/extractor/api"
)

// splitTestModel is testModel with two layers, layer0 of 3 elements and
// layer1 of 2: a split lane computes layer1 from layer0's 3 elements, an
// image lane from the 3x8x8 input.
func splitTestModel() *model {
	m := testModel()
	m.Layers = []Layer{
		{Index: 0, Name: "layer0", Tensor: "t0", Shape: []int64{3}, Bytes: 12},
		{Index: 1, Name: "layer1", Tensor: "t1", Shape: []int64{2}, Bytes: 8},
	}
	return m
}

// splitSegment is layer1 of m computed from layer0.
func splitSegment(m *model) segment {
	return segment{m: m, l: m.Layers[1], from: &m.Layers[0]}
}

// tensorOf is a layer0 tensor of value v in dt, checked as ExtractFrom
// checks it before queueing.
func tensorOf(t testing.TB, v float32, dt DType) *tensorInput {
	t.Helper()
	shape, got, data, err := api.ParseNPY(api.EncodeNPY([]int64{3}, []float32{v, v, v}, dt))
	if err != nil || len(shape) != 1 || shape[0] != 3 {
		t.Fatalf("tensor: shape %v, %v", shape, err)
	}
	return &tensorInput{dt: got, data: data}
}

// receive returns the next error from c, failing t after 10 s.
func receive(t *testing.T, c <-chan error) error {
	t.Helper()
	select {
	case err := <-c:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for a request to return")
		return nil
	}
}

func TestSplitAndImageCallsBatchInSeparateLanes(t *testing.T) {
	f := &fakeRunner{}
	s := newTestScheduler(t, f, 4, 2)
	m := splitTestModel()
	g := splitSegment(m)
	release, blocked := blockFirst(t, s, f, m)
	t.Cleanup(release) // before close, should the test fail while the runner is held

	imgs := [][]byte{pngOf(t, 10), pngOf(t, 20), pngOf(t, 30)}
	// Two equal tensors: tensor calls are never shared. One is float16.
	vals := []float32{0.5, 0.5, -0.25}
	tensors := []*tensorInput{tensorOf(t, vals[0], Float32), tensorOf(t, vals[1], Float32), tensorOf(t, vals[2], Float16)}
	imgOut := make([][]byte, len(imgs))
	tensorOut := make([][]byte, len(tensors))
	errs := make([]error, len(imgs)+len(tensors))
	var wg sync.WaitGroup
	for i := range imgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			imgOut[i], errs[i] = s.extract(context.Background(), m, m.Layers[1], req(fmt.Sprintf("%d.png", i), imgs[i], Background, nil))
		}()
		wg.Add(1)
		go func() {
			defer wg.Done()
			tensorOut[i], errs[len(imgs)+i] = s.extractFrom(context.Background(), g, tensors[i])
		}()
	}
	waitFor(t, "6 decoded inputs", func() bool { return statsOf(s).Decoded == 6 })
	release()
	wg.Wait()
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	for i := range imgs {
		if got, want := decodedValue(t, imgOut[i]), firstValue(t, m, imgs[i]); got != want {
			t.Errorf("image %d: %v, want %v", i, got, want)
		}
		if got := decodedValue(t, tensorOut[i]); got != vals[i] {
			t.Errorf("tensor %d: %v, want %v", i, got, vals[i])
		}
	}

	// The blocker, then one batch per lane: the split one of the three
	// tensors (the from layer's 3 elements each: fakeRunner checks the
	// sizes), the image one of the three images.
	f.mu.Lock()
	runs, keys := f.batches, f.keys
	f.mu.Unlock()
	if len(runs) != 3 {
		t.Fatalf("runs %v of lanes %v: want the blocker and one batch per lane", runs, keys)
	}
	for i := 1; i < 3; i++ {
		switch keys[i] {
		case sessionKey{model: "m", layer: 1, from: "t0"}:
			if got := slices.Sorted(slices.Values(runs[i])); fmt.Sprint(got) != fmt.Sprint([]float32{-0.25, 0.5, 0.5}) {
				t.Errorf("split batch %v, want the 3 tensors", runs[i])
			}
		case sessionKey{model: "m", layer: 1}:
			if len(runs[i]) != 3 {
				t.Errorf("image batch %v, want the 3 images", runs[i])
			}
			for _, v := range runs[i] {
				if v == 0.5 || v == -0.25 {
					t.Errorf("image batch %v holds a tensor", runs[i])
				}
			}
		default:
			t.Errorf("batch %v on lane %v", runs[i], keys[i])
		}
	}
	if keys[1] == keys[2] {
		t.Errorf("both batches on lane %v", keys[1])
	}
	if st := s.splitStats(); st != (SplitStats{Batches: 1, Items: 3, Lanes: 1}) {
		t.Errorf("split stats %+v, want 1 batch of 3 items on 1 lane", st)
	}
	if st := statsOf(s); st.Batches != 3 || st.BatchedItems != 7 || st.Shared != 0 {
		t.Errorf("stats: %d batches, %d items, %d shared; want 3, 7 and 0", st.Batches, st.BatchedItems, st.Shared)
	}
}

func TestSplitCallsShareMaxPending(t *testing.T) {
	f := &fakeRunner{}
	s := newTestScheduler(t, f, 1, 1, func(c *schedConfig) { c.maxCalls = 2 })
	m := splitTestModel()
	g := splitSegment(m)
	release, blocked := blockFirst(t, s, f, m)
	t.Cleanup(release) // before close, should the test fail while the runner is held
	errc := make(chan error, 3)
	first, second := tensorOf(t, 1, Float32), tensorOf(t, 2, Float32)
	go func() {
		_, err := s.extractFrom(context.Background(), g, first)
		errc <- err
	}()
	waitFor(t, "an image and a tensor call", func() bool { return statsOf(s).InFlight == 2 })

	// The one bound is full: a tensor call and an image call both wait
	// for a slot, outside the scheduler.
	img := req("r.png", pngOf(t, 4), Foreground, nil)
	go func() {
		_, err := s.extractFrom(context.Background(), g, second)
		errc <- err
	}()
	go func() {
		_, err := s.extract(context.Background(), m, m.Layers[1], img)
		errc <- err
	}()
	waitFor(t, "4 requests", func() bool { return statsOf(s).Requests == 4 })
	time.Sleep(50 * time.Millisecond)
	if st := statsOf(s); st.InFlight != 2 {
		t.Errorf("%d calls in flight with a bound of 2 (an image and a tensor call hold it)", st.InFlight)
	}

	release()
	if err := receive(t, blocked); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := receive(t, errc); err != nil {
			t.Error(err)
		}
	}
}

// schedulerGoroutines returns the stacks of the goroutines in a method of
// a scheduler.
func schedulerGoroutines() []string {
	var b strings.Builder
	pprof.Lookup("goroutine").WriteTo(&b, 2) // runtime.Stack's format, every goroutine
	var in []string
	for _, g := range strings.Split(b.String(), "\n\n") {
		if strings.Contains(g, "extractor.(*scheduler).") {
			in = append(in, g)
		}
	}
	return in
}

func TestCloseFailsQueuedSplitCalls(t *testing.T) {
	before := len(schedulerGoroutines())
	f := &fakeRunner{gate: make(chan struct{}), started: make(chan int, 8)}
	s := newScheduler(schedConfig{workers: 1, maxWait: time.Millisecond, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		batchSize: func(context.Context, segment, int) int { return 1 }}, f)
	m := splitTestModel()
	g := splitSegment(m)

	// The running batch is a split one; three tensors and an image queue
	// behind it.
	type result struct {
		b   []byte
		err error
	}
	running := make(chan result, 1)
	blocker := tensorOf(t, 7, Float32)
	go func() {
		b, err := s.extractFrom(context.Background(), g, blocker)
		running <- result{b, err}
	}()
	select {
	case <-f.started:
	case r := <-running:
		t.Fatalf("the first split call returned before Close: %v", r.err)
	case <-time.After(10 * time.Second):
		t.Fatal("the first split call did not start")
	}
	errc := make(chan error, 4)
	for i := range 3 {
		tensor := tensorOf(t, float32(10+i), Float32)
		go func() {
			_, err := s.extractFrom(context.Background(), g, tensor)
			errc <- err
		}()
	}
	img := req("img.png", pngOf(t, 9), Background, nil)
	go func() {
		_, err := s.extract(context.Background(), m, m.Layers[1], img)
		errc <- err
	}()
	waitFor(t, "queued", func() bool { return statsOf(s).InFlight == 5 })
	go func() { time.Sleep(10 * time.Millisecond); close(f.gate) }()
	s.close()
	for range 4 {
		if err := receive(t, errc); !errors.Is(err, ErrClosed) {
			t.Errorf("queued call after close: %v, want ErrClosed", err)
		}
	}
	select {
	case r := <-running:
		if r.err != nil || decodedValue(t, r.b) != 7 {
			t.Errorf("running split batch: %v, want its result", r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the running split call did not return")
	}
	if _, err := s.extractFrom(context.Background(), g, tensorOf(t, 1, Float32)); !errors.Is(err, ErrClosed) {
		t.Errorf("tensor call after close: %v, want ErrClosed", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(schedulerGoroutines()) > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if left := schedulerGoroutines(); len(left) > before {
		t.Errorf("%d scheduler goroutines after close, %d before:\n\n%s", len(left), before, strings.Join(left, "\n\n"))
	}
}

func TestPoisonedTensorFailsOnlyItself(t *testing.T) {
	f := &fakeRunner{poison: 0.75}
	s := newTestScheduler(t, f, 4, 2)
	m := splitTestModel()
	g := splitSegment(m)
	release, blocked := blockFirst(t, s, f, m)
	t.Cleanup(release) // before close, should the test fail while the runner is held
	vals := []float32{0.5, 0.75, 0.25}
	tensors := []*tensorInput{tensorOf(t, vals[0], Float32), tensorOf(t, vals[1], Float32), tensorOf(t, vals[2], Float32)}
	outs := make([][]byte, len(vals))
	errs := make([]error, len(vals))
	var wg sync.WaitGroup
	for i := range tensors {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], errs[i] = s.extractFrom(context.Background(), g, tensors[i])
		}()
	}
	waitFor(t, "decoded", func() bool { return statsOf(s).Decoded == 3 })
	release()
	wg.Wait()
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 2} {
		if errs[i] != nil {
			t.Fatalf("batch mate %d of a poisoned tensor: %v", i, errs[i])
		}
		if got := decodedValue(t, outs[i]); got != vals[i] {
			t.Errorf("tensor %d: %v, want %v", i, got, vals[i])
		}
	}
	if errs[1] == nil || !strings.HasPrefix(errs[1].Error(), "extract m layer0..layer1: ") || !strings.Contains(errs[1].Error(), "poisoned") {
		t.Fatalf("poisoned tensor: %v, want an error naming the model and its segment", errs[1])
	}
	if st := statsOf(s); st.Retries != 3 || st.Failed != 1 {
		t.Errorf("%d retries and %d failed, want 3 and 1", st.Retries, st.Failed)
	}
	if st := s.splitStats(); st != (SplitStats{Batches: 1, Items: 3, Lanes: 1}) {
		t.Errorf("split stats %+v, want 1 batch of 3 items on 1 lane", st)
	}
}
