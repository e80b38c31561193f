package remote

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/featurefs/featurefs/fs/internal/fakes"
	"github.com/featurefs/featurefs/fs/internal/leakcheck"
)

// gatedExtractor reports each Extract's key on Entered, then waits for its
// gate (fakes.Gated).
type gatedExtractor = fakes.Gated

// newGatedServer is a Server (no HTTP) over a.jpg and b.jpg computing with
// a gated extractor.
func newGatedServer(t *testing.T, honorCtx bool, maxConcurrent int) (*Server, *gatedExtractor) {
	t.Helper()
	g := &gatedExtractor{Extractor: newFakeExtractor(), Entered: make(chan string, 4), Gate: make(chan struct{}), HonorCtx: honorCtx}
	ts := startServer(t, map[string]string{"a.jpg": "aaaa", "b.jpg": "bbbb"}, func(c *testConfig) {
		c.Extractor = g
		c.MaxConcurrent = maxConcurrent
	})
	ts.http.Close() // the tests call the server's methods
	return ts.Server, g
}

// TestServerSlotHeldUntilComputationEnds: with --max-concurrent 1, a
// request that goes away while its feature is computed leaves the slot
// taken until the computation ends; a second request waits for it.
func TestServerSlotHeldUntilComputationEnds(t *testing.T) {
	defer leakcheck.Check(t)()
	s, g := newGatedServer(t, false, 1)
	defer s.Close()

	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() {
		_, err := s.feature(ctx, BatchItem{Model: "tiny", Layer: 0, Key: "a.jpg", ETag: "x"})
		first <- err
	}()
	if k := <-g.Entered; k != "a.jpg" {
		t.Fatalf("entered %s", k)
	}
	cancel() // the client goes away
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled request got %v", err)
	}
	if n := s.Stats().InFlight; n != 1 {
		t.Errorf("in flight after the request went away: %d, want 1 (the computation goes on)", n)
	}

	second := make(chan error, 1)
	go func() {
		_, err := s.feature(context.Background(), BatchItem{Model: "tiny", Layer: 0, Key: "b.jpg"})
		second <- err
	}()
	select {
	case k := <-g.Entered:
		t.Errorf("%s started while the first computation held the only slot", k)
	case <-time.After(200 * time.Millisecond):
	}
	close(g.Gate) // the first computation ends, freeing the slot
	if err := <-second; err != nil {
		t.Errorf("the second request: %v", err)
	}
	if got := s.Stats().InFlight; got != 0 {
		t.Errorf("in flight at the end: %d", got)
	}
}

// TestServerCloseCancelsComputations: Server.Close (then its pipeline's
// Close, as featurefs serve does) cancels the computations, that of a request that went away and that of a request
// still waiting (which is answered unavailable, so that its client fails
// over), waits for them and leaves no goroutine behind.
func TestServerCloseCancelsComputations(t *testing.T) {
	defer leakcheck.Check(t)()
	s, g := newGatedServer(t, true, 4)
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error, 1)
	go func() {
		_, err := s.feature(ctx, BatchItem{Model: "tiny", Layer: 0, Key: "a.jpg", ETag: "x"})
		gone <- err
	}()
	<-g.Entered
	cancel()
	<-gone
	waiting := make(chan error, 1)
	go func() {
		_, err := s.feature(context.Background(), BatchItem{Model: "tiny", Layer: 0, Key: "b.jpg", ETag: "x"})
		waiting <- err
	}()
	<-g.Entered
	s.Close()
	s.Pipeline().Close() // its owner closes the pipeline after the server (featurefs serve's stack)
	if err := <-waiting; StatusOf(err) != StatusUnavailable {
		t.Errorf("the waiting request: %v (status %d), want unavailable", err, StatusOf(err))
	}
	if n := s.Stats().InFlight; n != 0 {
		t.Errorf("in flight after Close: %d", n)
	}
	if _, err := s.feature(context.Background(), BatchItem{Model: "tiny", Layer: 0, Key: "b.jpg", ETag: "x"}); StatusOf(err) != StatusUnavailable {
		t.Errorf("a request after Close: %v, want unavailable", err)
	}
}

// TestClientCloseCancelsBatchInFlight: Close cancels a batch in flight (it
// is sent under the client's root context), its call fails as unavailable
// at once, and the client leaves no goroutine behind.
func TestClientCloseCancelsBatchInFlight(t *testing.T) {
	ts := startServer(t, map[string]string{"a.jpg": "aaaa"}, nil)
	defer leakcheck.Check(t)()
	c := dial(t, ClientConfig{URLs: []string{ts.URL}, Timeout: time.Minute})
	ts.hang.Store(true) // the server stops answering
	errc := make(chan error, 1)
	go func() {
		_, err := c.Extractor().Extract(context.Background(), featureReq("a.jpg", 0, "x"))
		errc <- err
	}()
	for c.Stats().Batches == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	c.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, ErrUnavailable) {
			t.Errorf("the call in flight got %v, want ErrUnavailable", err)
		}
	case <-time.After(10 * time.Second): // far below the one-minute Timeout
		t.Error("Close did not end the batch in flight")
	}
}
