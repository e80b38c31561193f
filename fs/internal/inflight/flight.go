// Package inflight shares one run of a function among concurrent callers with
// the same key: the feature pipeline's reads (fs/features) and the tree's
// listings (fs).
package inflight

import (
	"context"
	"sync"

	"github.com/featurefs/featurefs/fs/internal/lifetime"
)

// Group shares one run of a function among concurrent callers with the
// same key. The function runs in its own goroutine under a context that
// ignores the callers' cancellation (an interrupted reader that retries finds
// the run still going), so each caller may stop waiting on its own context.
// The number of runs is bounded by the number of waiting callers, which
// go-fuse bounds, or by the admit function of Start.
//
// Every run is one of its Owner's goroutines: its context is also
// cancelled by the owner's Close, which waits for it, and a run is refused
// once the owner is closed (its callers get lifetime.ErrClosed).
type Group[V any] struct {
	// Owner owns the runs; it must be set before the first call.
	Owner *lifetime.Owner

	mu    sync.Mutex
	calls map[string]*Call[V] // GUARDED_BY(mu)
}

// Call is one run of a Group.
type Call[V any] struct {
	done chan struct{}
	val  V
	err  error
}

// Do returns the result of fn for key, running it unless a run is in
// flight. fn gets a context without the caller's cancellation (values
// kept). If ctx ends first, Do returns ctx.Err() and the run goes on.
func (g *Group[V]) Do(ctx context.Context, key string, fn func(context.Context) (V, error)) (V, error) {
	return g.Start(ctx, key, nil, fn).Wait(ctx)
}

// Start joins the run in flight for key, or starts fn in its own goroutine
// (under ctx without its cancellation). admit, if not nil, is asked (under
// the group's lock) before a new run starts: when it says no, Start returns
// nil and nothing runs. fn then owns whatever admit took. Once the Owner is
// closed, Start returns a call that failed with lifetime.ErrClosed (admit is
// not asked).
func (g *Group[V]) Start(ctx context.Context, key string, admit func() bool, fn func(context.Context) (V, error)) *Call[V] {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.calls == nil {
		g.calls = map[string]*Call[V]{}
	}
	if c, ok := g.calls[key]; ok {
		return c
	}
	if !g.Owner.Add() {
		c := &Call[V]{done: make(chan struct{}), err: lifetime.ErrClosed}
		close(c.done)
		return c
	}
	if admit != nil && !admit() {
		g.Owner.Done()
		return nil
	}
	c := &Call[V]{done: make(chan struct{})}
	g.calls[key] = c
	runCtx, cancel := g.Owner.Detach(ctx)
	g.Owner.Start(func() { // counted by the Add above
		defer func() {
			cancel()
			g.mu.Lock()
			delete(g.calls, key)
			g.mu.Unlock()
			close(c.done)
		}()
		c.val, c.err = fn(runCtx)
	})
	return c
}

// Wait returns the run's result, or ctx.Err() if ctx ends first (the run
// goes on).
func (c *Call[V]) Wait(ctx context.Context) (V, error) {
	select {
	case <-c.done:
		return c.val, c.err
	case <-ctx.Done():
		var zero V
		return zero, ctx.Err()
	}
}
