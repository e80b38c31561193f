package fs

import (
	"context"
	"sync"
)

// flightGroup shares one run of a function among concurrent callers with the
// same key. The function runs in its own goroutine under a context that
// ignores the callers' cancellation (an interrupted reader that retries finds
// the run still going), so each caller may stop waiting on its own context.
// The number of runs is bounded by the number of waiting callers, which
// go-fuse bounds.
type flightGroup[V any] struct {
	mu    sync.Mutex
	calls map[string]*flightCall[V] // GUARDED_BY(mu)
}

type flightCall[V any] struct {
	done chan struct{}
	val  V
	err  error
}

// do returns the result of fn for key, running it unless a run is in
// flight. fn gets a context without the caller's cancellation (values
// kept). If ctx ends first, do returns ctx.Err() and the run goes on.
func (g *flightGroup[V]) do(ctx context.Context, key string, fn func(context.Context) (V, error)) (V, error) {
	g.mu.Lock()
	if g.calls == nil {
		g.calls = map[string]*flightCall[V]{}
	}
	c, ok := g.calls[key]
	if !ok {
		c = &flightCall[V]{done: make(chan struct{})}
		g.calls[key] = c
		runCtx := context.WithoutCancel(ctx)
		go func() {
			defer func() {
				g.mu.Lock()
				delete(g.calls, key)
				g.mu.Unlock()
				close(c.done)
			}()
			c.val, c.err = fn(runCtx)
		}()
	}
	g.mu.Unlock()
	select {
	case <-c.done:
		return c.val, c.err
	case <-ctx.Done():
		var zero V
		return zero, ctx.Err()
	}
}
