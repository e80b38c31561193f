package inflight

import (
	"context"
	"errors"
	"testing"

	"github.com/featurefs/featurefs/fs/internal/lifetime"
)

// TestOwnedRuns: an owned run goes on when its caller gives up, is
// cancelled by the owner's Close, which waits for it; once closed, Start
// refuses without asking admit.
func TestOwnedRuns(t *testing.T) {
	o := lifetime.New()
	g := &Group[int]{Owner: o}
	started, ended := make(chan struct{}), make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	c := g.Start(ctx, "k", nil, func(ctx context.Context) (int, error) {
		close(started)
		<-ctx.Done()
		ended <- ctx.Err()
		return 0, ctx.Err()
	})
	<-started
	cancel()
	if _, err := c.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait: %v", err)
	}
	select {
	case err := <-ended:
		t.Fatalf("the run ended with its caller: %v", err)
	default:
	}
	o.Close()
	select {
	case err := <-ended: // Close returned after the run's end
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the run ended with %v", err)
		}
	default:
		t.Error("Close returned before the run ended")
	}
	admitted := false
	c = g.Start(context.Background(), "k2", func() bool { admitted = true; return true }, func(context.Context) (int, error) { return 1, nil })
	if _, err := c.Wait(context.Background()); !errors.Is(err, lifetime.ErrClosed) || admitted {
		t.Errorf("Start after Close: %v, admitted %v; want ErrClosed, not admitted", err, admitted)
	}
}
