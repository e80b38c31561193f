// Package lifetime is the owned lifetime of a component that starts
// goroutines (the feature pipeline and its prefetch, the tree, the remote
// client, its split execution and the server): a root context that Close
// cancels and a WaitGroup that Close waits for, so that nothing the
// component started outlives it.
//
// It is the one way a goroutine that outlives the call starting it is
// started under fs/: Owner.Go (or Add and Start), counted until it returns;
// and, for the one goroutine per mount that waits for the FUSE server to
// end, Owner.CloseAfter. A fan-out that its function waits for before it
// returns (sync.WaitGroup.Go, then Wait) needs no owner. This package's
// TestGoroutinesAreOwned holds every package under fs/ to this.
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
// value is not usable; create one with New or Child. Safe for concurrent
// use.
type Owner struct {
	ctx    context.Context
	cancel context.CancelFunc
	parent *Owner // counts this owner's goroutines too (Child); nil for New's

	mu     sync.Mutex
	closed bool           // GUARDED_BY(mu)
	wg     sync.WaitGroup // Add only under mu while !closed
}

// New returns an open owner.
func New() *Owner {
	ctx, cancel := context.WithCancel(context.Background())
	return &Owner{ctx: ctx, cancel: cancel}
}

// Child returns an open owner for a part of o's component that is closed
// on its own (prefetch in a pipeline, split execution's probes in a
// client): its root context is under o's, and o counts its goroutines too,
// so closing o cancels them and waits for them; closing the child ends only
// its own.
func (o *Owner) Child() *Owner {
	ctx, cancel := context.WithCancel(o.ctx)
	return &Owner{ctx: ctx, cancel: cancel, parent: o}
}

// Context is the root context, cancelled by Close.
func (o *Owner) Context() context.Context { return o.ctx }

// Add counts one goroutine about to start (Start), unless the owner (or
// its parent) is closed (false: start nothing). Each true must be matched
// by one Done.
func (o *Owner) Add() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed || (o.parent != nil && !o.parent.Add()) {
		return false
	}
	o.wg.Add(1)
	return true
}

// Done marks a goroutine counted by Add finished.
func (o *Owner) Done() {
	o.wg.Done()
	if o.parent != nil {
		o.parent.Done()
	}
}

// Start runs fn in a goroutine that a true Add counted, and marks it Done
// when fn returns: for a caller that must know it may start before it
// commits to starting (inflight.Group).
func (o *Owner) Start(fn func()) {
	go func() {
		defer o.Done()
		fn()
	}()
}

// Go runs fn in a counted goroutine, unless the owner is closed (false:
// fn does not run).
func (o *Owner) Go(fn func()) bool {
	if !o.Add() {
		return false
	}
	o.Start(fn)
	return true
}

// CloseAfter runs wait, a call that blocks until something outside the
// owner ends (a FUSE server's Wait: the mount is gone), in a goroutine, and
// then Close. That goroutine is the owner's closer, not one of its counted
// goroutines: Close cannot interrupt wait, so it does not wait for it; it
// lives exactly as long as what it waits for.
func (o *Owner) CloseAfter(wait func()) {
	go func() {
		wait()
		o.Close()
	}()
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
// every counted goroutine to return (a child's included). A goroutine that
// cannot be interrupted (an ONNX Runtime run in progress) is waited for
// until it ends. Safe to call more than once and concurrently.
func (o *Owner) Close() {
	o.mu.Lock()
	o.closed = true
	o.mu.Unlock()
	o.cancel()
	o.wg.Wait()
}
