package features

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/featurefs/featurefs/cache"
	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/internal/fakes"
	"github.com/featurefs/featurefs/fs/internal/leakcheck"
)

// gatedExtractor blocks each Extract until its gate is closed (fakes.Gated).
type gatedExtractor = fakes.Gated

// closingCache fails the test on a Put after close (a write into a closed
// cache).
type closingCache struct {
	*fakes.Cache
	t      *testing.T
	closed atomic.Bool
}

func (c *closingCache) Put(k cache.Key, v []byte) error {
	if c.closed.Load() {
		c.t.Errorf("Put of %s into the closed cache", k.Object)
		return cache.ErrClosed
	}
	return c.Cache.Put(k, v)
}

// detachedRead starts a read of a.jpg whose reader gives up at once, the
// extraction going on detached; it returns once the extraction has started.
func detachedRead(t *testing.T, p *Pipeline, x *gatedExtractor) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := p.Feature(ctx, "tiny", 0, bucket.Object{Key: "a.jpg"})
		errc <- err
	}()
	<-x.Entered
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled reader got %v, want context.Canceled", err)
	}
}

// TestCloseWaitsForDetachedExtraction: a read's detached extraction that
// cannot be interrupted is waited for by Close, and its result, which comes
// after Close began, is not written into the cache (which its owner closes
// once Close returns), and not logged as an error.
func TestCloseWaitsForDetachedExtraction(t *testing.T) {
	defer leakcheck.Check(t)()
	b, _ := localBucket(t, map[string]string{"a.jpg": "abcd"})
	x := &gatedExtractor{Extractor: newFakeExtractor(), Gate: make(chan struct{}), Entered: make(chan string, 1)}
	c := &closingCache{Cache: fakes.NewCache(), t: t}
	var logs bytes.Buffer
	p, err := New(Config{Bucket: b, Extractor: x, Cache: c, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	detachedRead(t, p, x)

	closed := make(chan struct{})
	go func() {
		p.Close()
		close(closed)
	}()
	select {
	case <-closed: // the old code: Close did not wait
		t.Error("Close returned while a detached extraction was running")
	case <-time.After(200 * time.Millisecond):
	}
	close(x.Gate) // the run ends
	<-closed
	c.closed.Store(true) // the cache's owner closes it after Close
	// On the old code the run's Put comes now, into the closed cache.
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) && x.Calls.Load() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	if n := c.Puts.Load(); n != 0 {
		t.Errorf("%d Puts after Close began, want 0", n)
	}
	if logs.Len() > 0 {
		t.Errorf("Close logged: %s", logs.String())
	}
	if _, err := p.Feature(context.Background(), "tiny", 0, bucket.Object{Key: "a.jpg"}); !errors.Is(err, ErrClosed) {
		t.Errorf("a read after Close got %v, want ErrClosed", err)
	}
}

// TestCloseCancelsDetachedExtraction: Close cancels the context of a read's
// detached extraction and leaves no goroutine behind.
func TestCloseCancelsDetachedExtraction(t *testing.T) {
	x := &gatedExtractor{Extractor: newFakeExtractor(), Gate: make(chan struct{}), Entered: make(chan string, 1), HonorCtx: true}
	defer close(x.Gate) // a leaked run (the old code) ends after the check
	defer leakcheck.Check(t)()
	b, _ := localBucket(t, map[string]string{"a.jpg": "abcd"})
	p, err := New(Config{Bucket: b, Extractor: x, Cache: fakes.NewCache()})
	if err != nil {
		t.Fatal(err)
	}
	detachedRead(t, p, x)
	p.Close()
	if err, _ := x.CtxErr.Load().(error); !errors.Is(err, context.Canceled) {
		t.Errorf("the detached extraction's context ended with %v by Close's return, want context.Canceled", err)
	}
}
