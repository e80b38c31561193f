package fs

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/featurefs/featurefs/fs/bucket"
)

// storeHealth tracks whether the object store is answering, from the
// outcome of every call (countingBucket) and from refreshes that ran past
// Config.StaleGrace. While the store is failing, lookups and directory reads
// that have a stale listing wait for the store only failingGrace before they
// answer from it; the refresh goes on in the background, and the first call
// the store answers ends the failing state. Safe for concurrent use.
type storeHealth struct {
	bad atomic.Bool
}

// failing reports whether the store's last outcome was a failure or a
// stall.
func (h *storeHealth) failing() bool { return h.bad.Load() }

// slow records a call that has not answered within the grace period.
func (h *storeHealth) slow() { h.bad.Store(true) }

// observe records the outcome of one store call: an answer (not-found and
// too-large are answers) ends the failing state; an error other than the
// caller's own cancellation starts it.
func (h *storeHealth) observe(err error) {
	switch {
	case err == nil, errors.Is(err, bucket.ErrNotFound), errors.Is(err, bucket.ErrTooLarge):
		h.bad.Store(false)
	case errors.Is(err, context.Canceled):
	default:
		h.bad.Store(true)
	}
}
