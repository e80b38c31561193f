package features

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/featurefs/featurefs/fs/bucket"
)

// StoreHealth tracks whether the object store is answering, from the
// outcome of every call (countingBucket) and, from the tree, refreshes that
// ran past its StaleGrace (Slow). While the store is failing, the tree's
// lookups and directory reads that have a stale listing wait for the store
// only briefly before they answer from it; the refresh goes on in the background, and the first call
// the store answers ends the failing state. Safe for concurrent use.
type StoreHealth struct {
	bad  atomic.Bool // failing: an error or a stall
	down atomic.Bool // the last outcome was an error, not a stall
}

// Failing reports whether the store's last outcome was a failure or a
// stall.
func (h *StoreHealth) Failing() bool { return h.bad.Load() }

// Down reports whether the store's last outcome was an error (Failing
// without a mere stall): a lookup then answers from a stale listing, even
// that a name is missing, where a slow store is asked (namespace.Lookup).
func (h *StoreHealth) Down() bool { return h.down.Load() }

// Slow records a call that has not answered within the grace period.
func (h *StoreHealth) Slow() { h.bad.Store(true) }

// observe records the outcome of one store call: an answer (not-found and
// too-large are answers) ends the failing state; an error other than the
// caller's own cancellation starts it.
func (h *StoreHealth) observe(err error) {
	switch {
	case err == nil, errors.Is(err, bucket.ErrNotFound), errors.Is(err, bucket.ErrTooLarge):
		h.bad.Store(false)
		h.down.Store(false)
	case errors.Is(err, context.Canceled):
	default:
		h.bad.Store(true)
		h.down.Store(true)
	}
}
