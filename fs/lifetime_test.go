package fs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
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

// TestUnmountEndsTheTreesGoroutines: once the mount is gone the tree's
// goroutines (the kernel checkers, listings' detached runs) end without a
// Close, and the tree refuses new ones: the mount's watcher
// (lifetime.Owner.CloseAfter) closes the tree's owner.
func TestUnmountEndsTheTreesGoroutines(t *testing.T) {
	fb := newFakeBucket(100)
	fb.put("d/a.jpg", []byte("abcd"))
	defer leakcheck.Check(t)()
	f, err := newTree(t, testConfig{pipelineConfig: pipelineConfig{Bucket: fb, Extractor: newFakeExtractor(), Cache: newFakeCache()}})
	if err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	srv, err := f.Mount(mnt, MountOptions{FsName: "fake", DirectMount: true})
	if err != nil {
		t.Fatalf("mount: %v (the tests need /dev/fuse and root)", err)
	}
	if _, err := os.ReadFile(filepath.Join(mnt, "features", "tiny", "layer0", "d", "a.npy")); err != nil {
		srv.Unmount()
		t.Fatalf("read through the mount: %v", err)
	}
	if !f.owner.Go(func() {}) {
		t.Error("the mounted tree refused a goroutine")
	}
	if err := srv.Unmount(); err != nil {
		t.Fatalf("unmount: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for f.owner.Go(func() {}) {
		if time.Now().After(deadline) {
			t.Fatal("5s after the unmount the tree still starts goroutines")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
