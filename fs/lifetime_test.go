package fs

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/featurefs/featurefs/fs/bucket"
	"github.com/featurefs/featurefs/fs/internal/leakcheck"
)

// blockingBucket's List and Get wait for release or their context's end;
// entered gets the call's name as each starts.
type blockingBucket struct {
	*fakeBucket
	entered chan string
	release chan struct{}
}

func (b *blockingBucket) wait(ctx context.Context, what string) error {
	b.entered <- what
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-b.release:
		return nil
	}
}

func (b *blockingBucket) List(ctx context.Context, prefix, token string) (bucket.Page, error) {
	if err := b.wait(ctx, "list"); err != nil {
		return bucket.Page{}, err
	}
	return b.fakeBucket.List(ctx, prefix, token)
}

func (b *blockingBucket) Get(ctx context.Context, key string, maxBytes int64) ([]byte, bucket.Object, error) {
	if err := b.wait(ctx, "get"); err != nil {
		return nil, bucket.Object{}, err
	}
	return b.fakeBucket.Get(ctx, key, maxBytes)
}

// TestTreeCloseLeavesNoGoroutine: the tree's detached work (a listing
// refresh its lookup stopped waiting for, a read's extraction whose reader
// gave up) is cancelled by Close (the tree's, then its pipeline's), which
// waits for it.
func TestTreeCloseLeavesNoGoroutine(t *testing.T) {
	fb := newFakeBucket(100)
	fb.put("a.jpg", []byte("abcd"))
	b := &blockingBucket{fakeBucket: fb, entered: make(chan string, 2), release: make(chan struct{})}
	defer close(b.release) // what the old code leaked ends after the check
	defer leakcheck.Check(t)()
	f, err := newTree(t, testConfig{pipelineConfig: pipelineConfig{Bucket: b, Extractor: newFakeExtractor(), Cache: newFakeCache()}, Config: Config{StaleGrace: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if l := f.ns.Revalidate(context.Background(), ""); l != nil {
		t.Fatal("the blocked listing answered")
	}
	if got := <-b.entered; got != "list" {
		t.Fatalf("entered %s, want list", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := f.p.Feature(ctx, "tiny", 0, bucket.Object{Key: "a.jpg"})
		errc <- err
	}()
	if got := <-b.entered; got != "get" {
		t.Fatalf("entered %s, want get", got)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled reader got %v", err)
	}
	f.Close()
	f.Close()   // twice is fine
	f.p.Close() // the read's extraction is the pipeline's: its owner closes it after the tree
}
