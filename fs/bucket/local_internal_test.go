package bucket

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestLocalGetBound checks that a Get waits for a free slot and gives up
// when its context ends.
func TestLocalGetBound(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.jpg"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := openLocal(dir, S3Options{MaxConcurrentGets: 2}.withDefaults())
	if err != nil {
		t.Fatal(err)
	}
	if cap(b.sem) != 2 {
		t.Fatalf("semaphore capacity %d, want 2", cap(b.sem))
	}
	ctx := context.Background()
	for range 2 {
		if err := b.sem.acquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, _, err := b.Get(tctx, "a.jpg", 10); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get with all slots taken = %v, want DeadlineExceeded", err)
	}
	done := make(chan error, 1)
	go func() { _, _, err := b.Get(ctx, "a.jpg", 10); done <- err }()
	select {
	case err := <-done:
		t.Fatalf("Get finished (%v) while all slots were taken", err)
	case <-time.After(20 * time.Millisecond):
	}
	b.sem.release()
	if err := <-done; err != nil {
		t.Fatalf("Get after a slot freed: %v", err)
	}
	b.sem.release()
}
