// Package lifetime is the owned lifetime of a component that starts
// goroutines (the feature pipeline, the tree, the remote client and
// server): a root context that Close cancels and a WaitGroup that Close
// waits for, so that nothing the component started outlives it.
package lifetime

import (
	"context"
	"fmt"
	"sync"

	"github.com/featurefs/featurefs/extractor/spec"
)

// ErrClosed is the error of work refused because its owner is closed. It
// wraps spec.ErrClosed (same message), which every "used after Close"
// error of featurefs matches, and is matched on its own: a closed cache's
// or extractor's error is not it.
var ErrClosed = fmt.Errorf("%w", spec.ErrClosed)

// Owner owns goroutines: each is counted (Add/Done, Go) while the owner is
// open, and Close cancels the root context and waits for them. The zero
// value is not usable; create one with New. Safe for concurrent use.
type Owner struct {
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	closed bool           // GUARDED_BY(mu)
	wg     sync.WaitGroup // Add only under mu while !closed
}

// New returns an open owner.
func New() *Owner {
	ctx, cancel := context.WithCancel(context.Background())
	return &Owner{ctx: ctx, cancel: cancel}
}

// Context is the root context, cancelled by Close.
func (o *Owner) Context() context.Context { return o.ctx }

// Add counts one goroutine about to start, unless the owner is closed
// (false: start nothing). Each true must be matched by one Done.
func (o *Owner) Add() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return false
	}
	o.wg.Add(1)
	return true
}

// Done marks a goroutine counted by Add finished.
func (o *Owner) Done() { o.wg.Done() }

// Go runs fn in a counted goroutine, unless the owner is closed (false:
// fn does not run).
func (o *Owner) Go(fn func()) bool {
	if !o.Add() {
		return false
	}
	go func() {
		defer o.Done()
		fn()
	}()
	return true
}

// Detach returns a context with ctx's values and none of its cancellation,
// cancelled instead by Close (and by the returned cancel, which the caller
// must call): work that outlives its requester but not its owner.
func (o *Owner) Detach(ctx context.Context) (context.Context, context.CancelFunc) {
	c, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(o.ctx, cancel)
	return c, func() { stop(); cancel() }
}

// Close refuses new goroutines, cancels the root context and waits for
// every counted goroutine to return. A goroutine that cannot be
// interrupted (an ONNX Runtime run in progress) is waited for until it
// ends. Safe to call more than once and concurrently.
func (o *Owner) Close() {
	o.mu.Lock()
	o.closed = true
	o.mu.Unlock()
	o.cancel()
	o.wg.Wait()
}
